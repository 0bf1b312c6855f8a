// gpuscope errors against real processes: a saved kernel log replayed, the stand-in driver's
// sticky error after named kernels, the two joined, bad input, and the real libcudart without a
// GPU (whose cudaErrorInsufficientDriver is not sticky).
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "core/containers.h"
#include "core/cuda_api.h"
#include "errors/errors_collector.h"
#include "errors_fixture.h"
#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

uint64_t realtime_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// gpuscope errors --json ARGS in the background, until stop().
class Errors {
 public:
  explicit Errors(std::vector<std::string> args) : p_(argv(std::move(args))) {
    EXPECT_TRUE(p_.wait_for("gpuscope: watching", 30, true)) << p_.err();
  }
  // Waits until stdout holds `needle` (false after timeout_s).
  bool wait_for(const std::string& needle, double timeout_s = 15) { return p_.wait_for(needle, timeout_s); }
  std::vector<json> stop() {
    p_.signal(SIGINT);
    EXPECT_EQ(p_.wait(30), 0) << p_.err();
    return parse_lines(p_.out());
  }
  std::string err() const { return p_.err(); }

 private:
  // The stand-in libraries by --lib: probed before the workload starts, not at its exec.
  static std::vector<std::string> argv(std::vector<std::string> args) {
    args.insert(args.begin(), {gpuscope_bin(), "errors", "--json", "--lib", standin_lib_dir() + "/libcuda.so.1",
                               "--lib", standin_lib_dir() + "/libcudart.so.13"});
    return args;
  }
  Process p_;
};

std::vector<json> of_type(const std::vector<json>& lines, const std::string& type, pid_t pid = 0) {
  std::vector<json> r;
  for (auto& l : lines)
    if (l["type"] == type && (!pid || l["pid"] == pid)) r.push_back(l);
  return r;
}

// How long the stand-in app lives on after its error: its kernels' module is read from its maps,
// which must still be there when gpuscope reads them (a sanitized gpuscope reads them later than
// an exit right after the fault).
constexpr long kLingerMs = 1000;

// The one cuda_error line of the stand-in app: the process, its container, the call, the code and
// the kernels since its good sync, latest first.
void expect_sticky_line(const json& l, const StickyApp& app, const Workload& w, uint64_t t0, uint64_t t1) {
  EXPECT_EQ(l["pid"], app.pid);
  EXPECT_EQ(l["tid"], app.pid);
  EXPECT_EQ(l["comm"], w.comm());
  EXPECT_EQ(l["container"], own_container());
  EXPECT_EQ(l["container_id"], "");
  EXPECT_EQ(l["pod"], "");
  EXPECT_EQ(l["namespace"], "");
  EXPECT_EQ(l["api"], "cuCtxSynchronize");
  EXPECT_EQ(l["layer"], "driver");
  EXPECT_EQ(l["code"], 700);
  EXPECT_EQ(l["code_name"], "CUDA_ERROR_ILLEGAL_ADDRESS");
  uint64_t ts = l["ts_ns"], sync = l["last_ok_sync_ns"];
  EXPECT_GE(ts, t0);
  EXPECT_LE(ts, t1);
  EXPECT_GT(sync, t0);
  EXPECT_LT(sync, ts);
  json want = json::array({{{"kernel", "kern_faulting"}, {"module", "standin_app"}, {"launches", 1}},
                           {{"kernel", "kern_second"}, {"module", "standin_app"}, {"launches", 1}}});
  EXPECT_EQ(l["kernels"], want) << l.dump();
  EXPECT_EQ(l["kernels_truncated"], false);
}

}  // namespace

// Xid lines of drivers 535-580 in each form a saved log holds them (kmsg records, dmesg, journal),
// replayed: one xid line each, every field exact. The pids are of no process here, so no
// container is read for them.
TEST(Errors, SavedLogReplayedFieldByField) {
  TempFile log("replay",
               "6,1200,5107644336,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=3999971, name=python3, Ch 00000008, intr "
               "10000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type "
               "FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
               " SUBSYSTEM=pci\n"
               " DEVICE=+pci:0000:3b:00.0\n"
               "kernel: unrelated line\n"
               "[ 5210.000100] NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
               "the bus.\n"
               "Dec 07 10:11:12 node1 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:02 GPU-CI:01): 95, pid=3999972, "
               "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No\n"
               "4,1201,5300000000,-;NVRM: Xid (PCI:0000:cb:00): 109, pid=3999973, name=pt_main_thread, Ch 00000008, "
               "errorString CTX SWITCH TIMEOUT, Info 0x58005\n");
  uint64_t t0 = realtime_now();
  auto r = run({gpuscope_bin(), "errors", "--json", "--kmsg", log.path, "--window", "0", "-d", "2"});
  uint64_t t1 = realtime_now();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = parse_lines(r.out);
  auto x = of_type(lines, "xid");
  ASSERT_EQ(x.size(), 4u) << r.out;
  for (auto& l : x) {
    EXPECT_GE(l["ts_ns"].get<uint64_t>(), t0);
    EXPECT_LE(l["ts_ns"].get<uint64_t>(), t1);
    EXPECT_EQ(l["gpu"], -1);
    EXPECT_EQ(l["uuid"], "");
    EXPECT_EQ(l["source"], "kmsg");
    EXPECT_EQ(l["injected"], false);
    EXPECT_TRUE(l["joined"].is_null());
  }
  EXPECT_EQ(x[0]["id"], 1);
  EXPECT_EQ(x[0]["pid"], 3999971);
  EXPECT_EQ(x[0]["comm"], "python3");
  EXPECT_EQ(x[0]["container"], "");
  EXPECT_EQ(x[0]["pci_bus_id"], "0000:3b:00.0");
  EXPECT_EQ(x[0]["xid"], 31);
  EXPECT_EQ(x[0]["meaning"], "GPU memory page fault: the MMU refused an access, usually an application bug");
  EXPECT_EQ(x[0]["class"], "application");
  EXPECT_EQ(x[0]["action"], "restart_app");
  EXPECT_EQ(x[0]["kmsg_seq"], 1200);
  EXPECT_EQ(x[0]["kmsg_ts_us"], 5107644336);
  EXPECT_EQ(x[0]["message"],
            "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
  EXPECT_EQ(x[0]["gpu_instance"], -1);

  EXPECT_EQ(x[1]["id"], 2);
  EXPECT_FALSE(x[1].contains("pid"));
  EXPECT_EQ(x[1]["pci_bus_id"], "0000:2b:00.0");
  EXPECT_EQ(x[1]["xid"], 79);
  EXPECT_EQ(x[1]["class"], "hardware");
  EXPECT_EQ(x[1]["action"], "drain_node");
  EXPECT_EQ(x[1]["kmsg_seq"], 0);
  EXPECT_EQ(x[1]["kmsg_ts_us"], 5210000100);
  EXPECT_EQ(x[1]["message"], "GPU has fallen off the bus.");

  EXPECT_EQ(x[2]["pid"], 3999972);
  EXPECT_EQ(x[2]["comm"], "");
  EXPECT_EQ(x[2]["pci_bus_id"], "0000:01:00.0");
  EXPECT_EQ(x[2]["xid"], 95);
  EXPECT_EQ(x[2]["class"], "hardware");
  EXPECT_EQ(x[2]["action"], "reset_gpu");
  EXPECT_EQ(x[2]["gpu_instance"], 2);
  EXPECT_EQ(x[2]["compute_instance"], 1);
  EXPECT_EQ(x[2]["kmsg_ts_us"], 0);
  EXPECT_EQ(x[2]["message"], "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No");

  EXPECT_EQ(x[3]["pid"], 3999973);
  EXPECT_EQ(x[3]["comm"], "pt_main_thread");
  EXPECT_EQ(x[3]["xid"], 109);
  EXPECT_EQ(x[3]["class"], "driver");
  EXPECT_EQ(x[3]["action"], "reset_gpu");
  EXPECT_EQ(x[3]["kmsg_seq"], 1201);
  EXPECT_EQ(x[3]["message"], "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");

  auto s = of_type(lines, "summary");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0]["records"], 4);
  EXPECT_EQ(s[0]["xids"], 4);
  EXPECT_EQ(s[0]["kmsg_lost"], 0);
  EXPECT_EQ(s[0]["lost_ringbuf_full"], 0);
  EXPECT_NE(r.err.find("gpuscope: 4 errors (4 Xids from the kernel log, 0 sticky CUDA errors)"), std::string::npos)
      << r.err;
}

// The stand-in's sticky error: one cuda_error line naming the process, its container, the call,
// code 700 and the kernels launched after its last good sync (not the one before it).
TEST(Errors, StickyErrorNamesProcessContainerAndKernelsSinceSync) {
  Workload w("errs", "gse");
  TempFile log("sticky");
  Errors g({"-c", w.comm(), "--kmsg", log.path, "--window", "0.3"});
  uint64_t t0 = realtime_now();
  StickyApp app(w, kLingerMs);
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  uint64_t t1 = realtime_now();
  EXPECT_TRUE(g.wait_for("\"cuda_error\""));
  auto lines = g.stop();
  auto e = of_type(lines, "cuda_error");
  ASSERT_EQ(e.size(), 1u) << lines.size();
  expect_sticky_line(e[0], app, w, t0, t1);
  EXPECT_TRUE(e[0]["joined"].is_null());
  auto s = of_type(lines, "summary");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0]["sticky"], 1);
  EXPECT_EQ(s[0]["lost_ringbuf_full"], 0);
}

// A sticky error and a kernel-log Xid of the same process, the Xid appended to the replayed log
// while gpuscope reads it: joined both ways, the Xid with the process's container.
TEST(Errors, StickyErrorAndXidOfTheProcessJoinedBothWays) {
  Workload w("errj", "gsj");
  TempFile log("join");
  Errors g({"-c", w.comm(), "--kmsg", log.path});
  uint64_t t0 = realtime_now();
  StickyApp app(w, 4000);
  log.append("3,77001,9000000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=" + std::to_string(app.pid) +
             ", name=" + w.comm() + ", Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC0 faulted @ 0x1000");
  EXPECT_TRUE(g.wait_for("\"xid\""));
  EXPECT_TRUE(g.wait_for("\"cuda_error\""));
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  uint64_t t1 = realtime_now();
  auto lines = g.stop();
  auto e = of_type(lines, "cuda_error");
  auto x = of_type(lines, "xid");
  ASSERT_EQ(e.size(), 1u) << lines.size();
  ASSERT_EQ(x.size(), 1u) << lines.size();
  expect_sticky_line(e[0], app, w, t0, t1);
  EXPECT_EQ(e[0]["joined"], x[0]["id"]);
  EXPECT_EQ(x[0]["joined"], e[0]["id"]);
  EXPECT_EQ(x[0]["pid"], app.pid);
  EXPECT_EQ(x[0]["comm"], w.comm());
  EXPECT_EQ(x[0]["container"], own_container());
  EXPECT_EQ(x[0]["xid"], 31);
  EXPECT_EQ(x[0]["kmsg_seq"], 77001);
  EXPECT_EQ(x[0]["injected"], false);
  EXPECT_EQ(x[0]["class"], "application");
}

// Flags that cannot be honoured are refused in one line with exit 2; an unreadable kernel log is
// said once and the sticky errors are still reported.
TEST(Errors, BadInputRefusedAndUnreadableKmsgSaidOnce) {
  auto r = expect_usage_error("errors", {"--window", "abc"});
  EXPECT_NE(r.err.find("--window"), std::string::npos) << r.err;
  expect_usage_error("errors", {"--window", "-1"});
  expect_usage_error("errors", {"--window", "nan"});
  expect_usage_error("errors", {"--bogus"});
  expect_usage_error("errors", {"--kmsg"});

  Workload w("erru", "gsu");
  const std::string missing = "/nonexistent-gs/kmsg";
  Errors g({"-c", w.comm(), "--kmsg", missing, "--window", "0"});
  uint64_t t0 = realtime_now();
  StickyApp app(w, kLingerMs);
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  uint64_t t1 = realtime_now();
  EXPECT_TRUE(g.wait_for("\"cuda_error\""));
  auto lines = g.stop();
  auto e = of_type(lines, "cuda_error");
  ASSERT_EQ(e.size(), 1u);
  expect_sticky_line(e[0], app, w, t0, t1);
  std::string err = g.err();
  const std::string said = "gpuscope: cannot read " + missing +
                           ": No such file or directory: no Xids from the kernel "
                           "log; sticky CUDA errors are still watched\n";
  EXPECT_NE(err.find(said), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot read"), err.rfind("cannot read")) << err;
}

// With --stacks every kernel of the record names the call site its sampled launches came from
// (every launch sampled here): the stand-in app's scenario function, under main, above the
// probed cuLaunchKernel. The site flags without --stacks, or a --site-skip that is no regular
// expression, are usage errors.
TEST(Errors, StickyErrorsKernelsNameTheirCallSites) {
  auto r = expect_usage_error("errors", {"--stack-every", "2"});
  EXPECT_NE(r.err.find("--stack-every needs --stacks"), std::string::npos) << r.err;
  r = expect_usage_error("errors", {"--stacks", "--site-skip", "("});
  EXPECT_NE(r.err.find("--site-skip ( is not a valid regular expression"), std::string::npos) << r.err;

  Workload w("errs", "gss");
  Errors g({"-c", w.comm(), "--kmsg", "", "--window", "0", "--stacks", "--stack-every", "1"});
  uint64_t t0 = realtime_now();
  StickyApp app(w, kLingerMs);
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  uint64_t t1 = realtime_now();
  EXPECT_TRUE(g.wait_for("\"cuda_error\""));
  auto e = of_type(g.stop(), "cuda_error");
  ASSERT_EQ(e.size(), 1u);
  json sited = e[0];
  ASSERT_EQ(sited["kernels"].size(), 2u) << sited.dump();
  const std::vector<std::string> stack{"cuLaunchKernel", "scenario_sticky(long)", "main"};
  for (auto& k : sited["kernels"]) {
    EXPECT_EQ(k["site"], "scenario_sticky(long)") << k.dump();
    auto s = k["stack"].get<std::vector<std::string>>();
    ASSERT_GE(s.size(), 3u) << k.dump();
    EXPECT_EQ(std::vector<std::string>(s.begin(), s.begin() + 3), stack) << k.dump();
    EXPECT_EQ(k["site_samples"], 1) << k.dump();
    EXPECT_EQ(k["samples"], 1) << k.dump();
  }
  // Less the site fields, the record is the one without --stacks.
  for (auto& k : sited["kernels"])
    for (auto f : {"site", "stack", "site_samples", "samples"}) k.erase(f);
  expect_sticky_line(sited, app, w, t0, t1);
}

// The real libcudart.so.13 without a GPU returns cudaErrorInsufficientDriver, which is not
// sticky: no record for it, while the stand-in's sticky error in the same run is reported.
TEST(Errors, InsufficientDriverIsNotSticky) {
  Workload w("erri", "gsi");
  TempFile log("insufficient");
  Errors g({"--kmsg", log.path, "--window", "0"});
  Process real({calls_shared(), "2", "1", "1500"});
  pid_t real_pid = ready_pid(real);
  uint64_t t0 = realtime_now();
  StickyApp app(w, kLingerMs);
  EXPECT_EQ(app.p.wait(30), 0);
  EXPECT_EQ(real.wait(30), 0) << real.err();
  uint64_t t1 = realtime_now();
  EXPECT_TRUE(g.wait_for("\"pid\":" + std::to_string(app.pid)));
  auto lines = g.stop();
  EXPECT_EQ(of_type(lines, "cuda_error", real_pid).size(), 0u);
  auto e = of_type(lines, "cuda_error", app.pid);
  ASSERT_EQ(e.size(), 1u);
  expect_sticky_line(e[0], app, w, t0, t1);
}

// NVML's events through the collector, as the bridge hands them over (from its own thread): an
// Xid the kernel log also reports is one record with what each source knows, the bridge's device
// list fills the index and UUID of a kernel-log Xid, other critical events are nvml_event records,
// and the records kept are bounded (oldest dropped, counted).
TEST(Errors, NvmlEventsMergeWithTheKernelLogAndAreBounded) {
  TempFile log("nvml",
               "3,501,100,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=3999981, name=python3, Ch 00000008, MMU Fault\n");
  gpuscope::UprobeSession session({}, false);
  gpuscope::ErrorsCollector::Config cfg;
  cfg.kmsg_path = log.path;
  cfg.sticky = false;
  cfg.max_records = 3;
  gpuscope::ErrorsCollector c(session, cfg);
  ASSERT_EQ(c.kmsg_error(), "");
  std::thread bridge([&] {
    c.set_devices({{0, "GPU-aaaa", "00000000:3B:00.0"}, {1, "GPU-bbbb", "00000000:5E:00.0"}});
  });
  bridge.join();
  c.poll();
  uint64_t now = realtime_now();
  std::thread events([&] {
    c.add_nvml_event({now, 0, "GPU-aaaa", "00000000:3B:00.0", gpuscope::kNvmlEventXid, 31, -1, -1, ""});
    c.add_nvml_event({now, 1, "GPU-bbbb", "00000000:5E:00.0", 0x2, 0, -1, -1, "ecc_double_bit"});
  });
  events.join();
  auto rs = c.records();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].id, 1u);
  EXPECT_EQ(rs[0].kind, gpuscope::ErrorKind::kXid);
  EXPECT_TRUE(rs[0].from_kmsg);
  EXPECT_TRUE(rs[0].from_nvml);
  EXPECT_EQ(rs[0].device.index, 0);
  EXPECT_EQ(rs[0].device.uuid, "GPU-aaaa");
  EXPECT_EQ(rs[0].device.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(rs[0].pid, 3999981u);
  EXPECT_EQ(rs[0].comm, "python3");
  EXPECT_EQ(rs[0].kmsg_seq, 501u);
  EXPECT_EQ(rs[0].nvml_event_type, gpuscope::kNvmlEventXid);
  EXPECT_EQ(rs[1].id, 2u);
  EXPECT_EQ(rs[1].kind, gpuscope::ErrorKind::kNvmlEvent);
  EXPECT_EQ(rs[1].nvml_event, "ecc_double_bit");
  EXPECT_EQ(rs[1].device.index, 1);
  EXPECT_EQ(rs[1].device.pci_bus_id, "0000:5e:00.0");
  EXPECT_FALSE(rs[1].pid.has_value());

  auto xc = c.xid_counts();
  ASSERT_EQ(xc.size(), 2u);
  uint64_t xid31 = 0;
  for (auto& x : xc)
    if (x.xid == 31) {
      xid31 += x.count;
      EXPECT_EQ(x.device.uuid, "GPU-aaaa");
      EXPECT_EQ(x.pid, 3999981u);
      EXPECT_EQ(x.cls, gpuscope::XidClass::kApplication);
    }
  EXPECT_EQ(xid31, 1u);

  // No process: nothing to wait for.
  auto ready = c.take_ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_TRUE(c.take_ready(true).empty());

  for (int i = 0; i < 3; i++)
    c.add_nvml_event({now + 10'000'000'000ull * (i + 1), 1, "GPU-bbbb", "", gpuscope::kNvmlEventXid, 79, -1, -1, ""});
  rs = c.records();
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].id, 3u);
  EXPECT_EQ(rs[2].id, 5u);
  EXPECT_EQ(rs[2].device.pci_bus_id, "0000:5e:00.0");
  auto s = c.stats();
  EXPECT_EQ(s.records_dropped, 2u);
  EXPECT_EQ(s.nvml_events, 5u);
  EXPECT_EQ(s.kmsg.xids, 1u);
  EXPECT_TRUE(s.kmsg_open);
}

// The sticky errors after a process's first, counted in BPF per (pid, call, code) and read by the
// collector with the first one's kernel; the process's state in BPF goes at its exit, and its
// counts once read.
TEST(Errors, LaterStickyErrorsCountedPerCallAndCode) {
  Workload w("errc", "gsc");
  gpuscope::Scope scope;
  scope.comm = w.comm();
  scope.libs = {standin_lib_dir() + "/libcuda.so.1", standin_lib_dir() + "/libcudart.so.13"};
  gpuscope::UprobeSession session(scope, false);
  gpuscope::ErrorsCollector::Config cfg;
  cfg.scope = scope;
  cfg.kmsg_path = "";
  gpuscope::ErrorsCollector c(session, cfg);
  ASSERT_TRUE(c.sticky_probed());
  session.start();
  c.start(session);
  StickyApp app(w, kLingerMs);
  EXPECT_EQ(app.p.wait(30), 0);
  std::vector<gpuscope::StickyCount> counts;
  for (int i = 0; i < 50 && counts.size() < 2; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.poll();
    counts = c.sticky_counts();
  }
  ASSERT_EQ(counts.size(), 2u);
  std::map<std::string, uint64_t> by_api;
  for (auto& s : counts) {
    EXPECT_EQ(s.pid, static_cast<uint32_t>(app.pid));
    EXPECT_EQ(s.comm, w.comm());
    EXPECT_EQ(s.code, 700);
    EXPECT_EQ(s.first_kernel, "kern_faulting");
    by_api[gpuscope::api_symbol(s.api)] = s.count;
  }
  EXPECT_EQ(by_api, (std::map<std::string, uint64_t>{{"cuCtxSynchronize", 3}, {"cuMemAlloc_v2", 1}}));
  auto s = c.stats();
  EXPECT_EQ(s.sticky_events, 1u);
  EXPECT_EQ(s.bpf_lost_events, 0u);
  EXPECT_EQ(s.bpf_counts_full, 0u);
  ASSERT_EQ(c.records().size(), 1u);
  EXPECT_EQ(c.records()[0].api_name, "cuCtxSynchronize");
  auto maps = pids_in_maps(getpid());
  for (const char* m : {"err_procs", "err_counts"}) {
    auto& pids = maps[m];
    EXPECT_EQ(std::count(pids.begin(), pids.end(), static_cast<uint32_t>(app.pid)), 0) << m;
  }
}

// NVML's events reach gpuscope errors through an event set of its own (--nvml, here the
// stand-in): an Xid there is one xid record with the device's index, UUID and PCI bus id as the
// stand-in gives them, source nvml; an event of another critical type is an nvml_event record.
// An --nvml named that cannot load is bad input; without --nvml a missing NVML is said once.
TEST(Errors, NvmlEventsThroughItsOwnEventSet) {
  TempFile devices("nvml-devices", "device 0 util 5 memutil 1\ndevice 1 util 7 memutil 2\n");
  TempFile events("nvml-events");
  Process p({gpuscope_bin(), "errors", "--json", "--kmsg", "/dev/null", "--nvml", NVML_STANDIN, "--window", "0"},
            {"NVML_STANDIN_FILE=" + devices.path, "NVML_STANDIN_EVENTS=" + events.path});
  ASSERT_TRUE(p.wait_for("gpuscope: watching", 30, true)) << p.err();
  const uint64_t t0 = realtime_now();
  events.append("1 8 79");  // nvmlEventTypeXidCriticalError, Xid 79, device 1
  events.append("0 2 0");   // nvmlEventTypeDoubleBitEccError, device 0
  ASSERT_TRUE(p.wait_for("\"nvml_event\"", 10)) << p.out() << p.err();
  ASSERT_TRUE(p.wait_for("\"xid\"", 10)) << p.out() << p.err();
  const uint64_t t1 = realtime_now();
  p.signal(SIGINT);
  ASSERT_EQ(p.wait(30), 0) << p.err();
  auto lines = parse_lines(p.out());
  auto x = of_type(lines, "xid");
  ASSERT_EQ(x.size(), 1u) << p.out();
  EXPECT_EQ(x[0]["xid"], 79);
  EXPECT_EQ(x[0]["gpu"], 1);
  EXPECT_EQ(x[0]["uuid"], "GPU-5eed0000-0000-4000-8000-000000000001");
  EXPECT_EQ(x[0]["pci_bus_id"], "0000:5b:00.0");
  EXPECT_EQ(x[0]["source"], "nvml");
  EXPECT_EQ(x[0]["class"], "hardware");
  EXPECT_EQ(x[0]["action"], "drain_node");
  EXPECT_FALSE(x[0].contains("pid")) << x[0].dump();
  uint64_t ts = x[0]["ts_ns"];
  EXPECT_GE(ts, t0);
  EXPECT_LE(ts, t1);
  auto n = of_type(lines, "nvml_event");
  ASSERT_EQ(n.size(), 1u) << p.out();
  EXPECT_EQ(n[0]["event"], "ecc_double_bit");
  EXPECT_EQ(n[0]["gpu"], 0);
  EXPECT_EQ(n[0]["uuid"], "GPU-5eed0000-0000-4000-8000-000000000000");
  EXPECT_EQ(n[0]["pci_bus_id"], "0000:3b:00.0");

  auto r = expect_usage_error("errors", {"--nvml", "/nonexistent-gs/libnvidia-ml.so.1"});
  EXPECT_NE(r.err.find("NVML not available"), std::string::npos) << r.err;
}

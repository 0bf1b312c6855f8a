// The agent's errors collector: Xid series from a replayed kernel log, the stand-in's sticky CUDA
// error counted with its process and kernel, /api/errors as `gpuscope errors --json` writes the
// same records, and an unreadable kernel log said once. Each agent is scoped by -c to a name only
// this test runs; its kernel log is a file of the test's own.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "core/containers.h"
#include "errors_fixture.h"
#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

// The governor off: its deferrals play no part in what is counted when.
std::vector<std::string> agent_args(std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--max-cpu-percent", "0"});
  return extra;
}

// The one object of /api/errors with this type (and pid, when given).
json api_record(const json& api, const std::string& type, pid_t pid = 0) {
  json found;
  int n = 0;
  for (auto& r : api["errors"])
    if (r["type"] == type && (!pid || r.value("pid", 0) == pid)) found = r, n++;
  EXPECT_EQ(n, 1) << api.dump();
  return found;
}

// An /api/errors object and `gpuscope errors --json`'s line for the same record: the same fields
// with the same values, but for the times, each process's own reading: within `slack_ns` (a
// replayed log's record is as of when it was read).
void expect_same_record(json api, json line, double slack_ns) {
  for (const char* t : {"ts_ns", "last_ok_sync_ns"}) {
    if (!line.contains(t)) continue;
    ASSERT_TRUE(api.contains(t)) << api.dump();
    double d = static_cast<double>(api[t].get<uint64_t>()) - static_cast<double>(line[t].get<uint64_t>());
    EXPECT_LT(std::abs(d), slack_ns) << t << " " << api.dump() << "\n" << line.dump();
    api.erase(t), line.erase(t);
  }
  api.erase("id"), line.erase("id");  // each numbers what it saw
  api.erase("joined"), line.erase("joined");
  EXPECT_EQ(api, line);
}

const char* const kXidSeries = "gpuscope_xid_errors_total";
const char* const kStickySeries = "gpuscope_cuda_sticky_errors_total";

}  // namespace

// A saved kernel log replayed by the agent: one series per device, Xid and process with its
// class, action and source, the repeat counted on the same series, another process's Xid left out
// by -c, the sequence gap counted as lost records; promtool finds nothing to say; /api/errors
// holds the records `gpuscope errors --json` prints for the same log.
TEST(ErrorsAgent, XidSeriesFromAReplayedLog) {
  Workload w("eax", "gax");
  const std::string c = w.comm();
  TempFile log("replay",
               "6,1200,5107644336,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=3999971, name=" + c +
                   ", Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC0 faulted @ 0x7f12_34560000\n"
                   "[ 5210.000100] NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
                   "off the bus.\n"
                   "6,1203,5300000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=3999971, name=" +
                   c +
                   ", Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC1 faulted @ 0x7f12_34570000\n"
                   "6,1204,5300000100,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=3999972, name=other_proc, Graphics SM "
                   "Warp Exception\n"
                   "4,1205,5400000000,-;NVRM: Xid (PCI:0000:5e:00): 48, An uncorrectable double bit error (DBE) has "
                   "been detected on GPU in the framebuffer at physical address 0x1000\n"
                   "Dec 07 10:11:12 node1 kernel: NVRM: Xid (PCI:0000:5e:00): 999, pid=-1, some future Xid\n");
  Agent a(w, agent_args({"--kmsg", log.path}));
  std::string m = a.until([&](const std::string& t) { return sum_of(t, kXidSeries, {}) == 5; });
  ASSERT_NE(m, "") << a.metrics();
  auto xs = samples(m, kXidSeries);
  ASSERT_EQ(xs.size(), 4u) << m;
  using L = std::map<std::string, std::string>;
  auto device = [](const std::string& pci, const std::string& xid, const std::string& cls, const std::string& action) {
    return L{{"gpu", ""},    {"uuid", ""},       {"pci_bus_id", pci}, {"xid", xid},
             {"class", cls}, {"action", action}, {"source", "kmsg"}};
  };
  auto with_process = [](L l, const std::string& pid, const std::string& comm) {
    l.insert({{"pid", pid}, {"comm", comm}, {"container", ""}, {"pod", ""}, {"namespace", ""}});
    return l;
  };
  const std::vector<std::pair<L, double>> want = {
      {with_process(device("0000:3b:00.0", "31", "application", "restart_app"), "3999971", c), 2},
      {with_process(device("0000:2b:00.0", "79", "hardware", "drain_node"), "", ""), 1},
      {with_process(device("0000:5e:00.0", "48", "hardware", "reset_gpu"), "", ""), 1},
      {with_process(device("0000:5e:00.0", "999", "other", "see_catalog"), "", ""), 1}};
  for (auto& [labels, value] : want) {
    auto s = where(xs, labels);
    ASSERT_EQ(s.size(), 1u) << labels.at("xid") << "\n" << m;
    EXPECT_EQ(s[0].labels, labels);
    EXPECT_EQ(s[0].value, value) << labels.at("xid");
  }
  EXPECT_EQ(value_of(m, "gpuscope_errors_kmsg_lost_records_total", {}), 2);  // 1201 and 1202
  EXPECT_EQ(samples(m, kStickySeries).size(), 0u);
  for (const char* r :
       {"ring_buffer_full", "process_map_full", "count_map_full", "counts_full", "xid_series_full", "records_evicted"})
    EXPECT_EQ(value_of(m, "gpuscope_errors_dropped_total", {{"reason", r}}), 0) << r;
  std::string file = w.dir() + "/scrape.txt";
  std::ofstream(file) << m;
  auto pr = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
  EXPECT_EQ(pr.exit_code, 0) << pr.out;
  EXPECT_EQ(pr.out, "") << pr.out;

  json api = a.api("/api/errors");
  EXPECT_EQ(api["kmsg"], log.path);
  EXPECT_EQ(api["kmsg_error"], "");
  EXPECT_EQ(api["kmsg_records"], 6);
  EXPECT_EQ(api["kmsg_lost"], 2);
  auto r = run({gpuscope_bin(), "errors", "--json", "-c", c, "--kmsg", log.path, "--window", "0", "-d", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> lines;
  for (auto& l : parse_lines(r.out))
    if (l["type"] == "xid") lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  ASSERT_EQ(api["errors"].size(), 5u) << api.dump();
  for (size_t i = 0; i < lines.size(); i++) {
    EXPECT_EQ(api["errors"][i]["id"], i + 1);
    EXPECT_TRUE(api["errors"][i]["joined"].is_null());
    expect_same_record(api["errors"][i], lines[i], 60e9);
  }
  EXPECT_EQ(api["errors"][2]["message"],
            "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC1 faulted @ 0x7f12_34570000");
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// The stand-in's sticky error, and an Xid of the same process appended to the log: the sticky
// series names the process, its container, the call, the error and the kernel launched last; the
// Xid's series carries the process too; /api/errors has both, joined both ways, field for field
// as `gpuscope errors --json` beside it prints them.
TEST(ErrorsAgent, StickyErrorCountedWithItsKernelAndJoinedToItsXid) {
  Workload w("eas", "gas");
  const std::string c = w.comm();
  TempFile log("sticky");
  Agent a(w, agent_args({"--kmsg", log.path}));
  Process cmd({gpuscope_bin(), "errors", "--json", "-c", c, "--kmsg", log.path, "--lib",
               standin_lib_dir() + "/libcuda.so.1", "--lib", standin_lib_dir() + "/libcudart.so.13"});
  ASSERT_TRUE(cmd.wait_for("gpuscope: watching", 30, true)) << cmd.err();
  StickyApp app(w, 3000);
  const std::string pid = std::to_string(app.pid);
  log.append("3,88001,9000000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=" + pid + ", name=" + c +
             ", Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC0 faulted @ 0x1000");
  // The first error and the two later cuCtxSynchronize calls; the cuMemAlloc_v2 after them.
  std::string m = a.until([&](const std::string& t) {
    return sum_of(t, kStickySeries, {{"pid", pid}}) == 4 && value_of(t, kXidSeries, {{"pid", pid}}) == 1;
  });
  ASSERT_NE(m, "") << a.metrics();
  auto st = where(samples(m, kStickySeries), {{"pid", pid}});
  ASSERT_EQ(st.size(), 2u) << m;
  for (auto [api, n] : std::map<std::string, double>{{"cuCtxSynchronize", 3}, {"cuMemAlloc_v2", 1}}) {
    auto one = where(st, {{"api", api}});
    ASSERT_EQ(one.size(), 1u) << api;
    const std::map<std::string, std::string> want = {
        {"pid", pid},      {"comm", c},  {"container", own_container()},          {"pod", ""},
        {"namespace", ""}, {"api", api}, {"error", "CUDA_ERROR_ILLEGAL_ADDRESS"}, {"kernel", "kern_faulting"}};
    EXPECT_EQ(one[0].labels, want);
    EXPECT_EQ(one[0].value, n) << api;
  }
  auto xs = where(samples(m, kXidSeries), {{"pid", pid}});
  ASSERT_EQ(xs.size(), 1u);
  const std::map<std::string, std::string> xid_labels = {{"gpu", ""},
                                                         {"uuid", ""},
                                                         {"pci_bus_id", "0000:3b:00.0"},
                                                         {"xid", "31"},
                                                         {"class", "application"},
                                                         {"action", "restart_app"},
                                                         {"source", "kmsg"},
                                                         {"pid", pid},
                                                         {"comm", c},
                                                         {"container", own_container()},
                                                         {"pod", ""},
                                                         {"namespace", ""}};
  EXPECT_EQ(xs[0].labels, xid_labels);

  ASSERT_TRUE(cmd.wait_for("\"cuda_error\"", 15)) << cmd.out();
  ASSERT_TRUE(cmd.wait_for("\"xid\"", 15)) << cmd.out();
  json api = a.api("/api/errors");
  json e = api_record(api, "cuda_error", app.pid), x = api_record(api, "xid", app.pid);
  EXPECT_EQ(e["joined"], x["id"]);
  EXPECT_EQ(x["joined"], e["id"]);
  EXPECT_EQ(e["kernels"], json::parse(R"([{"kernel":"kern_faulting","module":"standin_app","launches":1},
                                          {"kernel":"kern_second","module":"standin_app","launches":1}])"));
  EXPECT_EQ(e["code_name"], "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(x["kmsg_seq"], 88001);
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  cmd.signal(SIGINT);
  EXPECT_EQ(cmd.wait(30), 0) << cmd.err();
  json line_e, line_x;
  for (auto& l : parse_lines(cmd.out()))
    if (l.value("pid", 0) == app.pid) (l["type"] == "xid" ? line_x : line_e) = l;
  expect_same_record(e, line_e, 50e6);
  expect_same_record(x, line_x, 1e9);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// An unreadable kernel log is said once and the rest goes on: the collector stays up and a
// process that ends right after its sticky error is counted with the kernel it launched last
// (the kernels collector's rows outlive its exit until the errors collector has read the error).
// A --kmsg without its value is a usage error.
TEST(ErrorsAgent, UnreadableKmsgSaidOnceStickyErrorsStillCounted) {
  expect_usage_error("agent", {"--kmsg"});
  Workload w("eau", "gau");
  const std::string missing = "/nonexistent-gs/kmsg";
  Agent a(w, agent_args({"--kmsg", missing}));
  StickyApp app(w, 0);
  EXPECT_EQ(app.p.wait(30), 0) << app.p.err();
  const std::string pid = std::to_string(app.pid);
  std::string m = a.until([&](const std::string& t) { return sum_of(t, kStickySeries, {{"pid", pid}}) == 4; });
  ASSERT_NE(m, "") << a.metrics();
  auto st = where(samples(m, kStickySeries), {{"pid", pid}, {"api", "cuCtxSynchronize"}});
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].value, 3);
  EXPECT_EQ(st[0].labels["kernel"], "kern_faulting");
  EXPECT_EQ(st[0].labels["comm"], w.comm());
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "errors"}}), 1);
  json api = a.api("/api/errors");
  const std::string why = "cannot read " + missing + ": No such file or directory";
  EXPECT_EQ(api["kmsg_error"], why);
  EXPECT_EQ(a.stop(), 0);
  std::string err = a.proc().err();
  EXPECT_NE(err.find("gpuscope: agent: errors: " + why +
                     ": no Xids from the kernel log; sticky CUDA errors are still counted\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("cannot read"), err.rfind("cannot read")) << err;
}

// NVML's Xid events through the errors collector's own event set (--nvml, the stand-in): a
// series with the device's index, UUID and PCI bus id as the stand-in gives them, source nvml,
// no process labels (NVML names none).
TEST(ErrorsAgent, NvmlXidSeries) {
  Workload w("ean", "gan");
  TempFile devices("nvml-devices", "device 0 util 5 memutil 1\n");
  TempFile events("nvml-events");
  TempFile log("nvml-kmsg");
  Agent a(w, agent_args({"--collectors", "errors", "--kmsg", log.path, "--nvml", NVML_STANDIN}),
          {"NVML_STANDIN_FILE=" + devices.path, "NVML_STANDIN_EVENTS=" + events.path});
  // The event set exists once the agent serves; an event appended before it was made is not delivered.
  a.until([](const std::string& t) { return t.find("gpuscope_collector_up") != std::string::npos; });
  events.append("0 8 48");
  std::string m = a.until([&](const std::string& t) { return sum_of(t, kXidSeries, {}) == 1; });
  ASSERT_NE(m, "") << a.metrics() << a.proc().err();
  auto xs = samples(m, kXidSeries);
  ASSERT_EQ(xs.size(), 1u) << m;
  const std::map<std::string, std::string> want = {{"gpu", "0"},
                                                   {"uuid", "GPU-5eed0000-0000-4000-8000-000000000000"},
                                                   {"pci_bus_id", "0000:3b:00.0"},
                                                   {"xid", "48"},
                                                   {"class", "hardware"},
                                                   {"action", "reset_gpu"},
                                                   {"source", "nvml"},
                                                   {"pid", ""},
                                                   {"comm", ""},
                                                   {"container", ""},
                                                   {"pod", ""},
                                                   {"namespace", ""}};
  EXPECT_EQ(xs[0].labels, want);
  EXPECT_EQ(xs[0].value, 1);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// GPU time without a GPU: libgpuscope-cupti.so loads and initializes where there is no driver,
// and the records a fixture hands to its exported function come out of gpuscope kernels (GPU
// columns joined with the launches it counted) and gpuscope timeline (tracks, spans, flows).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "bridge_fixture.h"
#include "core/containers.h"
#include "harness.h"

using namespace gstest;

namespace {

// Durations the feeder gives its 40 kernels: 50 us + i us.
constexpr uint64_t kKernels = 40;
constexpr uint64_t kTotalNs = kKernels * 50000 + 1000 * (kKernels * (kKernels - 1) / 2);
constexpr uint64_t kMaxNs = 50000 + 1000 * (kKernels - 1);

std::string tmp_file(const std::string& name) { return "/tmp/gputime_test_" + std::to_string(getpid()) + "_" + name; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A gpuscope scoped to no process (a developer's, on a shared machine) tells every process that
// maps the library to record; the tests below count on knowing every client.
std::string other_gpuscope() {
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream c(e.path() / "comm");
    std::string comm;
    if (!std::getline(c, comm) || comm != "gpuscope") continue;
    std::string args = slurp(e.path() / "cmdline"), scoped;
    for (const char* f : {"-p", "--pid", "-c", "--comm"})
      if (args.find(std::string(1, '\0') + f + '\0') != std::string::npos) scoped = f;
    bool tells = false;  // the subcommands with the GPU-time collector
    for (const char* sub : {"kernels", "timeline", "agent"})
      tells = tells || args.find(std::string(1, '\0') + sub + '\0') != std::string::npos;
    if (scoped.empty() && tells) return e.path().filename().string();
  }
  return "";
}

}  // namespace

TEST(GpuTime, LibraryInitializesWithoutDevice) {
  // The toolkit's libcupti, found beside nothing (no libcudart loaded): through the fallbacks.
  auto r = run({CUPTI_INIT_PROBE, CUPTI_LIB}, {"GPUSCOPE_CUPTI_PATH=" CUPTI_TOOLKIT_DIR});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("initialized rc=1 again=1"), std::string::npos) << r.out;
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Recording from the start turns CUPTI's activity on at once: still no failure.
  r = run({CUPTI_INIT_PROBE, CUPTI_LIB}, {"GPUSCOPE_CUPTI_PATH=" CUPTI_TOOLKIT_DIR, "GPUSCOPE_CUPTI_ALWAYS=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("initialized rc=1 again=1"), std::string::npos) << r.out;
}

TEST(GpuTime, LibraryWithoutCuptiSaysSoOnce) {
  auto r = run({CUPTI_INIT_PROBE, CUPTI_LIB}, {"GPUSCOPE_CUPTI_PATH=/nonexistent"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("initialized rc=1 again=1"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("gpuscope-cupti: GPUSCOPE_CUPTI_PATH=/nonexistent holds no libcupti"), std::string::npos)
      << r.err;
}

// A libcupti cut short would fault inside dlopen and kill the workload (issue 24): the library
// passes it over with one line, named through GPUSCOPE_CUPTI_PATH (the file, or its directory),
// and found beside the process's libcudart, and the process carries on.
TEST(GpuTime, LibraryPassesOverTruncatedCupti) {
  std::string dir = tmp_file("cupti"), lib = dir + "/libcupti.so.13";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(truncated_copy(CUPTI_STANDIN, lib, 8192));
  for (const std::string& env : {lib, dir}) {
    auto r = run({CUPTI_INIT_PROBE, CUPTI_LIB}, {"GPUSCOPE_CUPTI_PATH=" + env});
    EXPECT_EQ(r.exit_code, 0) << env << ": " << r.err;
    EXPECT_EQ(r.out, "initialized rc=1 again=1\n") << env;
    EXPECT_EQ(r.err.rfind("gpuscope-cupti: " + lib + " is truncated: segment ", 0), 0u) << env << ": " << r.err;
    EXPECT_NE(r.err.find(", the file has 8192; GPU activity is not recorded\n"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << env << ": " << r.err;
  }
  // Beside a libcudart the process loaded (then the toolkit's libcupti, a fallback, is taken).
  for (const char* f : {"libcudart.so.13", "libcuda.so.1"})
    std::filesystem::copy_file(standin_lib_dir() + "/" + f, dir + "/" + f);
  auto r = run({CUPTI_INIT_PROBE, CUPTI_LIB, dir + "/libcudart.so.13"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "initialized rc=1 again=1\n");
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::filesystem::remove_all(dir);
}

// A real CUDA program (real libcudart, no driver) under gpuscope run: the library is named in
// its environment and the program's exit status comes back.
TEST(GpuTime, RunSetsInjectionPath) {
  auto r = run({gpuscope_bin(), "run", "--", "/bin/sh", "-c", "echo \"$CUDA_INJECTION64_PATH\"; exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, std::string(CUPTI_LIB) + "\n");
  r = run({gpuscope_bin(), "run", "--json", "--", calls_shared()});
  ASSERT_NE(r.out.find("done\n"), std::string::npos) << r.out << r.err;
  json last = json::parse(r.out.substr(r.out.find("done\n") + 5));  // the program's lines come first
  EXPECT_EQ(last["type"], "summary");
  EXPECT_EQ(last["exit_code"].get<int>(), r.exit_code);
  EXPECT_EQ(last["library"], CUPTI_LIB);
}

// The command under run gets HUP, USR1 and USR2 as sent to run; INT and TERM end it (SIGTERM);
// it does not outlive run killed with -9; and with -d, one that ignores SIGTERM is killed 10 s
// after it.
TEST(GpuTime, RunForwardsSignalsAndTakesItsCommandAlong) {
  {
    Process r({gpuscope_bin(), "run", "--", "/bin/sh", "-c",
               "for s in HUP USR1 USR2; do trap \"echo got $s\" $s; done; echo ready; while :; do sleep 0.05; done"});
    ASSERT_TRUE(r.wait_for("ready", 10)) << r.err();
    for (int sig : {SIGHUP, SIGUSR1, SIGUSR2}) {
      r.signal(sig);
      std::string want = std::string("got ") + (sig == SIGHUP ? "HUP" : sig == SIGUSR1 ? "USR1" : "USR2");
      EXPECT_TRUE(r.wait_for(want, 10)) << r.out();
    }
    r.signal(SIGTERM);
    EXPECT_EQ(r.wait(10), 128 + SIGTERM) << r.err();
  }
  {
    Process r({gpuscope_bin(), "run", "--", "/bin/sh", "-c", "echo pid=$$; exec sleep 60"});
    ASSERT_TRUE(r.wait_for("pid=", 10)) << r.err();
    const pid_t child = std::stoi(r.out().substr(r.out().find("pid=") + 4));
    r.signal(SIGKILL);
    r.wait(10);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; i++, std::this_thread::sleep_for(std::chrono::milliseconds(50)))
      gone = kill(child, 0) != 0 && errno == ESRCH;
    EXPECT_TRUE(gone) << "the command outlived run's kill -9";
    if (!gone) kill(child, SIGKILL);
  }
  {
    auto t0 = std::chrono::steady_clock::now();
    auto r = run({gpuscope_bin(), "run", "-d", "1", "--", "/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"},
                 {}, 30);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
    EXPECT_NE(r.err.find("still running 10 s after SIGTERM: SIGKILL"), std::string::npos) << r.err;
    EXPECT_GE(s, 10.5);
    EXPECT_LT(s, 15);
  }
}

TEST(GpuTime, KernelsGpuColumns) {
  Process w({GT_FEEDER, CUPTI_LIB});
  pid_t pid = ready_pid(w);
  Process g({gpuscope_bin(), "kernels", "--json", "--interval", "0.5", "-p", std::to_string(pid)});
  ASSERT_TRUE(w.wait_for("fed", 30)) << w.out() << w.err() << g.err();
  EXPECT_EQ(w.wait(20), 0) << w.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  auto lines = parse_lines(g.out());
  const json* row = nullptr;
  for (auto& l : lines)
    if (l["type"] == "kernel" && l["pid"] == pid && l.value("exited", false) && l["kernel"] == "alpha_kernel(float*)")
      row = &l;
  ASSERT_TRUE(row) << g.out();
  EXPECT_EQ((*row)["launches"].get<uint64_t>(), kKernels);
  ASSERT_TRUE(row->contains("gpu_time_ns")) << row->dump();
  EXPECT_EQ((*row)["gpu_kernels"].get<uint64_t>(), kKernels);
  EXPECT_EQ((*row)["gpu_time_ns"].get<uint64_t>(), kTotalNs);
  EXPECT_EQ((*row)["gpu_mean_ns"].get<uint64_t>(), kTotalNs / kKernels);
  EXPECT_EQ((*row)["gpu_max_ns"].get<uint64_t>(), kMaxNs);
  double share = (*row)["gpu_share"].get<double>();
  EXPECT_GT(share, 0);
  EXPECT_LT(share, 1);
  // The library reported 3 records CUPTI dropped: said, not hidden.
  EXPECT_NE(g.err().find("3 (CUPTI had no buffer)"), std::string::npos) << g.err();
}

// Launch sites weighted by GPU time (--weight gpu-time): each site line has gpu_ns, the kernel's
// GPU time split over its sites as its launches are (one site here: all of it), and the folded
// file carries those nanoseconds. Without the CUPTI library (a gpuscope copied alone), a bad
// weight, or the weight without --stacks: one line, exit 2.
TEST(GpuTime, KernelsSitesWeighedByGpuTime) {
  std::string folded = tmp_file("sites.folded"), lone = tmp_file("lone");
  std::filesystem::create_directories(lone);
  std::filesystem::copy_file(gpuscope_bin(), lone + "/gpuscope", std::filesystem::copy_options::overwrite_existing);
  auto r = run({lone + "/gpuscope", "kernels", "--stacks", "--weight", "gpu-time", "-d", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err,
            "gpuscope: --weight gpu-time needs the CUPTI library (libgpuscope-cupti.so beside gpuscope, or "
            "--cupti-lib)\n");
  std::filesystem::remove_all(lone);
  for (std::vector<std::string> bad :
       {std::vector<std::string>{"--stacks", "--weight", "bytes"}, {"--weight", "gpu-time"}}) {
    bad.insert(bad.begin(), {gpuscope_bin(), "kernels"});
    auto b = run(bad);
    EXPECT_EQ(b.exit_code, 2) << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
  }

  Process w({GT_FEEDER, CUPTI_LIB});
  pid_t pid = ready_pid(w);
  Process g({gpuscope_bin(), "kernels", "--json", "--interval", "0.5", "-p", std::to_string(pid), "--stacks",
             "--stack-every", "1", "--weight", "gpu-time", "--folded", folded});
  ASSERT_TRUE(w.wait_for("fed", 30)) << w.out() << w.err() << g.err();
  EXPECT_EQ(w.wait(20), 0) << w.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  uint64_t launches = 0, gpu_ns = 0;
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "site" && l["pid"] == pid && l["kernel"] == "alpha_kernel(float*)") {
      launches += l["launches"].get<uint64_t>();
      gpu_ns += l["gpu_ns"].get<uint64_t>();
    }
  EXPECT_EQ(launches, kKernels) << g.out();
  EXPECT_EQ(gpu_ns, kTotalNs) << g.out();
  uint64_t folded_ns = 0;
  std::istringstream in(slurp(folded));
  for (std::string line; std::getline(in, line);)
    if (line.find(";[kernel] alpha_kernel(float*) ") != std::string::npos)
      folded_ns += std::stoull(line.substr(line.rfind(' ')));
  EXPECT_EQ(folded_ns, kTotalNs) << slurp(folded);
  unlink(folded.c_str());
}

// A process that loads the library after gpuscope started (as libcuda does at cuInit) is found
// through its dlopen notice, told, and its records counted; -c scopes it, not -p.
// The table: GPU columns appear once records flow, with the same figures.
TEST(GpuTime, KernelsTableColumns) {
  Process w({GT_FEEDER, CUPTI_LIB});
  pid_t pid = ready_pid(w);
  Process g({gpuscope_bin(), "kernels", "--interval", "0.5", "-p", std::to_string(pid)});
  ASSERT_TRUE(w.wait_for("fed", 30)) << w.out() << w.err() << g.err();
  EXPECT_EQ(w.wait(20), 0) << w.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  EXPECT_NE(g.out().find("GPU_ms   MEAN_us    MAX_us   GPU%"), std::string::npos) << g.out();
  std::string row;
  std::istringstream in(g.out());
  for (std::string line; std::getline(in, line);)
    if (line.find("alpha_kernel(float*)") != std::string::npos && line.find("exited") != std::string::npos) row = line;
  ASSERT_FALSE(row.empty()) << g.out();
  std::istringstream cells(row);
  std::string p, comm, container, launches, rate, total, mean, max;
  cells >> p >> comm >> container;
  // POD and NAMESPACE follow CONTAINER where the kubelet's pod directory is readable.
  gpuscope::ContainerResolver resolver;
  if (resolver.kubernetes_readable()) cells >> rate >> rate;
  cells >> launches >> rate >> total >> mean >> max;
  EXPECT_EQ(p, std::to_string(pid));
  EXPECT_EQ(container, resolver.resolve(getpid()).display());
  EXPECT_EQ(launches, "40");
  EXPECT_EQ(total, "2.780");  // ms
  EXPECT_EQ(mean, "69.5");    // us
  EXPECT_EQ(max, "89.0");     // us
}

TEST(GpuTime, LibraryLoadedLater) {
  Process w({GT_FEEDER, CUPTI_LIB, "late"});
  pid_t pid = ready_pid(w);
  Process g({gpuscope_bin(), "kernels", "--json", "--interval", "0.5", "-c", "gputime_feeder"});
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  w.signal(SIGUSR1);
  ASSERT_TRUE(w.wait_for("fed", 15)) << w.out() << w.err() << g.err();
  EXPECT_EQ(w.wait(20), 0) << w.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  bool found = false;
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "kernel" && l["pid"] == pid && l["kernel"] == "alpha_kernel(float*)" &&
        l.contains("gpu_time_ns")) {
      EXPECT_EQ(l["gpu_time_ns"].get<uint64_t>(), kTotalNs);
      found = true;
    }
  EXPECT_TRUE(found) << g.out();
}

TEST(GpuTime, TimelineTracksSpansFlows) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  Process w({GT_FEEDER, CUPTI_LIB, "wait-detach"});
  pid_t pid = ready_pid(w);
  std::string out = tmp_file("timeline.json");
  PinDir no_bridge;  // bpffs, and no bridge there
  Process g({gpuscope_bin(), "timeline", "--json", "-d", "3", "-p", std::to_string(pid), "-o", out, "--pin-dir",
             no_bridge.path});
  ASSERT_TRUE(w.wait_for("fed", 30)) << w.out() << w.err() << g.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  // gpuscope cleared the library's flag on its way out.
  EXPECT_TRUE(w.wait_for("detached", 10)) << w.out();
  EXPECT_EQ(w.wait(20), 0) << w.err();

  auto summary = parse_lines(g.out());
  ASSERT_FALSE(summary.empty()) << g.out();
  EXPECT_EQ(summary.back()["gpu_spans"].get<uint64_t>(), kKernels + 2);
  EXPECT_EQ(summary.back()["flows"].get<uint64_t>(), kKernels);

  auto c = run({"python3", TIMELINE_CHECKER, out, "--pid", std::to_string(pid), "--gpu", "--min-cpu",
                std::to_string(kKernels), "--min-kernels", std::to_string(kKernels), "--kernel", "alpha_kernel(float*)",
                "--min-flows", std::to_string(kKernels)});
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;

  // The fields themselves.
  json doc = json::parse(slurp(out));
  std::map<uint64_t, std::string> tracks;
  for (auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid) tracks[e["tid"]] = e["args"]["name"];
  std::vector<json> kernels, copies, sets;
  for (auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "gpu_kernel") kernels.push_back(e);
    if (e["cat"] == "gpu_memcpy") copies.push_back(e);
    if (e["cat"] == "gpu_memset") sets.push_back(e);
  }
  ASSERT_EQ(kernels.size(), kKernels);
  std::vector<double> durs;
  for (auto& k : kernels) {
    EXPECT_EQ(k["name"], "alpha_kernel(float*)");
    EXPECT_EQ(tracks[k["tid"]], "GPU 0 stream 7");
    EXPECT_EQ(k["args"]["grid"], json::array({2, 3, 4}));
    EXPECT_EQ(k["args"]["block"], json::array({32, 1, 1}));
    durs.push_back(k["dur"].get<double>());
  }
  std::sort(durs.begin(), durs.end());
  EXPECT_DOUBLE_EQ(durs.front(), 50.0);
  EXPECT_DOUBLE_EQ(durs.back(), kMaxNs / 1e3);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0]["name"], "memcpy HtoD");
  EXPECT_EQ(copies[0]["args"]["bytes"], 4096);
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(tracks[sets[0]["tid"]], "GPU 0 stream 8");
  EXPECT_EQ(sets[0]["args"]["bytes"], 512);
  // GPU spans sit after their launches on the same clock (the 5 s batch offset was undone).
  double first_kernel = 1e300, last_launch = 0;
  for (auto& k : kernels) first_kernel = std::min(first_kernel, k["ts"].get<double>());
  for (auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "cuda_api") last_launch = std::max(last_launch, e["ts"].get<double>());
  EXPECT_GT(first_kernel, last_launch);
  EXPECT_LT(first_kernel - last_launch, 1e6);  // µs: within a second, not 5 s off
  EXPECT_EQ(doc["metadata"]["gpu_spans"], "present");
  EXPECT_NE(doc["metadata"]["counters"].get<std::string>().find("gpuscope bridge"), std::string::npos);
  unlink(out.c_str());
}

TEST(GpuTime, TimelineWithoutLibrary) {
  Process w({calls_shared(), "3", "5", "4000"});  // calls after 4 s
  pid_t pid = ready_pid(w);
  std::string out = tmp_file("nolib.json");
  Process g({gpuscope_bin(), "timeline", "-d", "20", "-p", std::to_string(pid), "-o", out});
  ASSERT_TRUE(g.wait_for("recording a timeline", 30, true)) << g.err();
  EXPECT_EQ(w.wait(20), 0) << w.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  auto c = run({"python3", TIMELINE_CHECKER, out, "--pid", std::to_string(pid), "--no-gpu", "--min-cpu", "5"});
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(g.out().find("GPU spans need libgpuscope-cupti.so"), std::string::npos) << g.out();
  unlink(out.c_str());
}

// Device counters come from the bridge's pins (the bridge on the NVML stand-in here).
TEST(GpuTime, TimelineCounters) {
  PinDir d;
  StandinFile f;
  f.write(
      "device 0 util 37 memutil 5 mem_total 17179869184 mem_free 1 mem_used 1073741824 mem_reserved 0 temp 40 "
      "power 100000 smclk 1980 memclk 1593 throttle 0 pcie_tx 0 pcie_rx 0 enc 0 dec 0 fan 0 compute_mode 0 "
      "ecc_corr 0 ecc_uncorr 0\n");
  Process b({gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path}, {f.env()});
  ASSERT_TRUE(b.wait_for("bridge publishing", 10, true)) << b.err();
  Process w({calls_shared(), "3", "5", "3000"});
  pid_t pid = ready_pid(w);
  std::string out = tmp_file("counters.json");
  auto r = run({gpuscope_bin(), "timeline", "-d", "1.5", "-p", std::to_string(pid), "-o", out, "--pin-dir", d.path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  b.signal(SIGINT);
  EXPECT_EQ(b.wait(20), 0);
  w.wait(20);
  auto c = run({"python3", TIMELINE_CHECKER, out, "--counters", "--min-cpu", "0"});
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  json doc = json::parse(slurp(out));
  int util = 0, mem = 0;
  for (auto& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    if (e["name"] == "GPU 0 utilization %") {
      util++;
      EXPECT_EQ(e["args"]["sm_util_pct"], 37);
    }
    if (e["name"] == "GPU 0 memory used MiB") {
      mem++;
      EXPECT_DOUBLE_EQ(e["args"]["mem_used_mib"].get<double>(), 1024.0);
    }
  }
  EXPECT_GE(util, 5);  // the bridge ticks every 0.1 s
  EXPECT_EQ(util, mem);
  EXPECT_EQ(doc["metadata"]["counters"], "present");
  unlink(out.c_str());
}

// A full filesystem at the end of a recording: the reason is named, the old file stays whole
// and no partial or temporary file is left. A symlink into /proc is refused before recording.
TEST(GpuTime, TimelineOnAFullDiskKeepsTheOldFile) {
  std::string dir = tmp_file("fulldisk");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << strerror(errno);
  ASSERT_EQ(run({"mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir}).exit_code, 0);
  std::ofstream(dir + "/t.json") << "old\n";
  run({"sh", "-c", "cat /dev/zero > " + dir + "/fill"});  // until the disk is full
  Process w({calls_shared(), "3", "5", "500"});
  pid_t pid = ready_pid(w);
  auto r = run({gpuscope_bin(), "timeline", "-d", "1.5", "-p", std::to_string(pid), "-o", dir + "/t.json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write " + dir + "/t.json: No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir + "/t.json"), "old\n");
  auto ls = run({"ls", "-A", dir});
  EXPECT_EQ(ls.out, "fill\nt.json\n");
  w.wait(20);
  std::string link = dir + "-link";
  unlink(link.c_str());
  ASSERT_EQ(symlink("/proc/self/status", link.c_str()), 0);
  auto p = run({gpuscope_bin(), "timeline", "-d", "1", "-o", link});
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_EQ(p.err, "gpuscope: -o " + link + ": /proc and /sys take no output file\n");
  unlink(link.c_str());
  EXPECT_EQ(run({"umount", dir}).exit_code, 0);
  rmdir(dir.c_str());
}

TEST(GpuTime, BadInput) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"timeline", "-p", "999999999"},
           {"timeline", "-o", "/nonexistent/dir/t.json", "-d", "1"},
           {"timeline", "-o", "/proc/version", "-d", "1"},  // opens for writing; every write fails
           {"timeline", "-o", "/tmp", "-d", "1"},
           {"timeline", "--pin-dir", "", "-d", "1"},
           {"timeline", "--pin-dir", "/tmp", "-d", "1"},
           {"timeline", "--max-calls", "0"},
           {"kernels", "--cupti-lib", "/nonexistent/libgpuscope-cupti.so", "-d", "1"},
           {"run"},
           {"run", "--flush-ms", "0", "--", "true"},
           {"run", "--cupti-lib", "/nonexistent.so", "--", "true"},
       }) {
    args.insert(args.begin(), gpuscope_bin());
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 2) << testing::PrintToString(args) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << testing::PrintToString(args) << r.err;
  }
}

// The timeline is written when it ends: kernel names and the process's name must outlive a
// process that exited well before then (exited processes' state goes at each full rescan, every 5 s).
TEST(GpuTime, TimelineNamesOutliveTheProcess) {
  std::string out = tmp_file("exited.json");
  // By name, so that the timeline outlives the process (-p ends it when its process exits).
  PinDir no_bridge;
  Process g({gpuscope_bin(), "timeline", "-d", "7", "-c", "gputime_feeder", "-o", out, "--pin-dir", no_bridge.path});
  ASSERT_TRUE(g.wait_for("recording a timeline", 30, true)) << g.err();
  Process w({GT_FEEDER, CUPTI_LIB});
  pid_t pid = ready_pid(w);
  EXPECT_EQ(w.wait(30), 0) << w.out() << w.err();
  auto exited = std::chrono::steady_clock::now();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  EXPECT_GE(std::chrono::steady_clock::now() - exited, std::chrono::seconds(5));
  json doc = json::parse(slurp(out));
  size_t named = 0, spans = 0;
  std::string process;
  for (auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid) process = e["args"]["name"];
    if (e["ph"] != "X" || e["cat"] != "gpu_kernel") continue;
    spans++;
    named += e["name"] == "alpha_kernel(float*)";
  }
  EXPECT_EQ(spans, kKernels);
  EXPECT_EQ(named, kKernels);
  EXPECT_NE(process.find("gputime_feeder"), std::string::npos) << process;
  unlink(out.c_str());
}

namespace {

// cupti_app (libgpuscope-cupti.so over the stand-in libcupti) running PHASES, its stand-in's
// log of enables and records in `log`.
std::unique_ptr<Process> cupti_app(const std::vector<std::string>& phases, const std::string& log,
                                   const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {CUPTI_APP, CUPTI_LIB, CUPTI_STANDIN};
  argv.insert(argv.end(), phases.begin(), phases.end());
  unlink(log.c_str());
  std::vector<std::string> e{"GPUSCOPE_CUPTI_PATH=" CUPTI_STANDIN, "GS_CUPTI_STANDIN_LOG=" + log};
  e.insert(e.end(), env.begin(), env.end());
  return std::make_unique<Process>(argv, e);
}

// The summary line of a timeline stopped with SIGINT (an empty object when it printed none).
json timeline_summary(Process& t) {
  t.signal(SIGINT);
  EXPECT_EQ(t.wait(30), 0) << t.err();
  auto lines = parse_lines(t.out());
  return lines.empty() ? json::object() : lines.back();
}

// "phase NAME launched N kernels K api A dropped D" of the app's output.
struct Phase {
  bool found = false;
  uint64_t launched = 0, kernels = 0, api = 0, dropped = 0;
};

Phase phase_of(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string tag, n, x;
    Phase p;
    if (!(w >> tag >> n) || tag != "phase" || n != name) continue;
    w >> x >> p.launched >> x >> p.kernels >> x >> p.api >> x >> p.dropped;
    p.found = true;
    return p;
  }
  return {};
}

// The app's "slept MS calls C kinds K apis A recording R" lines, in order.
struct Slept {
  uint64_t calls = 0;
  unsigned kinds = 0, apis = 0, recording = 0;
};

std::vector<Slept> slept_of(const std::string& out) {
  std::vector<Slept> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string tag, ms, x;
    Slept s;
    if (!(w >> tag >> ms) || tag != "slept") continue;
    w >> x >> s.calls >> x >> s.kinds >> x >> s.apis >> x >> s.recording;
    v.push_back(s);
  }
  return v;
}

size_t log_count(const std::string& log, const std::string& type, const std::string& name = "") {
  std::istringstream in(slurp(log));
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string t, a, b, nm;
    w >> t >> a >> b >> nm;
    n += t == type && (name.empty() || nm == name);
  }
  return n;
}

}  // namespace

// CUPTI hands over a buffer that is not full only once all its records are complete, which
// the buffer of a process launching all the time seldom is (the stand-in holds it with
// GS_CUPTI_STANDIN_HOLD=1, as the H200's CUPTI did): a timeline attached to a running process
// asks the library for a forced flush as it stops, and gets every kernel and launch arrow.
TEST(GpuTime, TimelineStoppingGetsTheBufferStillBeingFilled) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  std::string log = tmp_file("hold.log"), out = tmp_file("hold.json");
  auto app = cupti_app({"wait:api", "late_kernel:300:1000:50000", "usr1"}, log, {"GS_CUPTI_STANDIN_HOLD=1"});
  std::string pid = std::to_string(ready_pid(*app));
  PinDir no_bridge;
  Process t({gpuscope_bin(), "timeline", "--json", "-p", pid, "-o", out, "--pin-dir", no_bridge.path});
  ASSERT_TRUE(t.wait_for("recording a timeline", 30, true)) << t.err();
  ASSERT_TRUE(app->wait_for("waiting 1", 40)) << app->out();
  Phase p = phase_of(app->out(), "late_kernel");
  ASSERT_TRUE(p.found) << app->out();
  EXPECT_EQ(p.kernels, 300u);
  EXPECT_EQ(p.api, 300u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // flushes that hand over nothing
  json sum = timeline_summary(t);
  EXPECT_EQ(sum.value("gpu_spans", 0u), 300u) << t.out();
  EXPECT_EQ(sum.value("flows", 0u), 300u) << t.out();
  EXPECT_EQ(sum.value("gpu_lost", 1u), 0u) << t.out();
  app->signal(SIGUSR1);
  EXPECT_EQ(app->wait(30), 0) << app->out();
  unlink(out.c_str());
}

// A timeline attached to a process whose CUDA started long before: CUPTI, set up only then, gave
// the H200 no launch-call activity records (the stand-in does the same with
// GS_CUPTI_STANDIN_LATE_API=1), so the library makes them from CUPTI's launch callbacks, and
// every kernel gets its arrow. With the callbacks off (GPUSCOPE_CUPTI_API_CALLBACKS=0) none does;
// with them on where CUPTI gives both (=1, no late stand-in), each kernel still gets one.
TEST(GpuTime, TimelineAttachedLateDrawsEveryArrowFromCallbacks) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  struct Arm {
    std::vector<std::string> env;
    uint64_t api_records, flows;
  };
  const Arm arms[] = {{{"GS_CUPTI_STANDIN_LATE_API=1"}, 0, 300},
                      {{"GS_CUPTI_STANDIN_LATE_API=1", "GPUSCOPE_CUPTI_API_CALLBACKS=0"}, 0, 0},
                      {{"GPUSCOPE_CUPTI_API_CALLBACKS=1"}, 300, 300}};
  for (const Arm& arm : arms) {
    SCOPED_TRACE(arm.env.back());
    std::string log = tmp_file("late.log"), out = tmp_file("late.json");
    auto app = cupti_app({"before_kernel:50:1000:1000", "usr1", "wait:api", "late_kernel:300:1000:50000", "usr1"}, log,
                         arm.env);
    std::string pid = std::to_string(ready_pid(*app));
    ASSERT_TRUE(app->wait_for("waiting 1", 30)) << app->out();
    PinDir no_bridge;
    Process t({gpuscope_bin(), "timeline", "--json", "-p", pid, "-o", out, "--pin-dir", no_bridge.path});
    ASSERT_TRUE(t.wait_for("recording a timeline", 30, true)) << t.err();
    app->signal(SIGUSR1);
    ASSERT_TRUE(app->wait_for("waiting 2", 40)) << app->out();
    Phase p = phase_of(app->out(), "late_kernel");
    ASSERT_TRUE(p.found) << app->out();
    EXPECT_EQ(p.kernels, 300u);
    EXPECT_EQ(p.api, arm.api_records) << "launch-call activity records the stand-in gave";
    json sum = timeline_summary(t);
    EXPECT_EQ(sum.value("gpu_spans", 0u), 300u) << t.out();
    EXPECT_EQ(sum.value("flows", 0u), arm.flows) << t.out();
    app->signal(SIGUSR1);
    EXPECT_EQ(app->wait(30), 0) << app->out();
    if (arm.flows) {
      // Each arrow leaves the launch that made its kernel: from inside the launch's own record
      // (the app is not traced, it has no cudart), on the app's one thread, to the kernel of the
      // same correlation id, which started after the launch was entered.
      json doc = json::parse(slurp(out));
      std::map<uint64_t, json> starts, ends, launches, kernels;
      for (auto& e : doc["traceEvents"]) {
        if (e["ph"] == "s") starts[e["id"].get<uint64_t>()] = e;
        if (e["ph"] == "f") ends[e["id"].get<uint64_t>()] = e;
        if (e["ph"] == "X" && e["cat"] == "cupti_api") launches[e["args"]["correlation"].get<uint64_t>()] = e;
        if (e["ph"] == "X" && e["cat"] == "gpu_kernel") kernels[e["args"]["correlation"].get<uint64_t>()] = e;
      }
      ASSERT_EQ(starts.size(), 300u);
      ASSERT_EQ(ends.size(), 300u);
      ASSERT_EQ(launches.size(), 300u);
      for (auto& [id, s] : starts) {
        const uint64_t corr = id & 0xffffffffu;
        ASSERT_TRUE(launches.count(corr) && kernels.count(corr)) << id;
        const json &l = launches[corr], &k = kernels[corr];
        EXPECT_EQ(s["tid"], app->pid());
        EXPECT_EQ(l["tid"], app->pid());
        EXPECT_GE(s["ts"].get<double>(), l["ts"].get<double>());
        EXPECT_LE(s["ts"].get<double>(), l["ts"].get<double>() + l["dur"].get<double>());
        EXPECT_EQ(ends[id]["ts"], k["ts"]);
        EXPECT_GE(k["ts"].get<double>(), l["ts"].get<double>());
      }
    }
    unlink(out.c_str());
    unlink(log.c_str());
  }
}

// kernels and timeline get every record while an agent records 0.2 s in every 1 s beside them;
// launch-call (API) records are on only while the timeline records.
TEST(GpuTime, ExactBesideADutyCycledAgent) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  std::string log = tmp_file("merge.log"), out = tmp_file("merge.json");
  auto app = cupti_app({"wait:window", "usr1", "wait:exact", "wait:noapi", "exact_kernel:500:1000:50000", "usr1",
                        "wait:api", "timeline_kernel:300:1000:50000", "usr1", "wait:noapi", "sleep:300", "usr1"},
                       log);
  std::string pid = std::to_string(ready_pid(*app));
  Process agent({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-p", pid, "--collectors", "gputime",
                 "--gputime-duty", "0.2/1", "--max-cpu-percent", "0", "--interval", "0.2"});
  ASSERT_TRUE(app->wait_for("state window ok", 40)) << app->out() << agent.err();
  ASSERT_TRUE(app->wait_for("waiting 1", 5)) << app->out();

  Process k({gpuscope_bin(), "kernels", "--json", "--interval", "0.5", "-p", pid});
  ASSERT_TRUE(k.wait_for("gpuscope: counting", 30, true)) << k.err();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 2", 30)) << app->out();
  EXPECT_NE(app->out().find("state exact ok"), std::string::npos) << app->out();
  EXPECT_NE(app->out().find("state noapi ok"), std::string::npos) << app->out();
  Phase e = phase_of(app->out(), "exact_kernel");
  ASSERT_TRUE(e.found) << app->out();
  EXPECT_EQ(e.kernels, 500u);
  EXPECT_EQ(e.api, 0u);
  EXPECT_EQ(e.dropped, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // a flush and an interval
  k.signal(SIGINT);
  ASSERT_EQ(k.wait(30), 0) << k.err();
  uint64_t gpu_kernels = 0;
  for (auto& l : parse_lines(k.out()))
    if (l["type"] == "kernel" && l["kernel"] == "exact_kernel" && l.contains("gpu_kernels"))
      gpu_kernels = l["gpu_kernels"].get<uint64_t>();
  EXPECT_EQ(gpu_kernels, 500u) << k.out();

  PinDir no_bridge;
  Process t({gpuscope_bin(), "timeline", "--json", "-p", pid, "-o", out, "--pin-dir", no_bridge.path});
  ASSERT_TRUE(t.wait_for("recording a timeline", 30, true)) << t.err();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 3", 30)) << app->out();
  Phase tl = phase_of(app->out(), "timeline_kernel");
  ASSERT_TRUE(tl.found) << app->out();
  EXPECT_EQ(tl.kernels, 300u);
  EXPECT_EQ(tl.api, 300u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  json sum = timeline_summary(t);
  EXPECT_EQ(sum.value("gpu_spans", 0u), 300u) << t.out();
  EXPECT_EQ(sum.value("flows", 0u), 300u) << t.out();

  // The timeline gone, the agent's duty cycle alone again: launch calls off.
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 4", 30)) << app->out();
  auto s = slept_of(app->out());
  ASSERT_EQ(s.size(), 1u) << app->out();
  EXPECT_EQ(s[0].apis, 0u);
  EXPECT_EQ(log_count(log, "api"), 300u);
  EXPECT_EQ(log_count(log, "missed", "exact_kernel"), 0u);
  EXPECT_EQ(log_count(log, "missed", "timeline_kernel"), 0u);
  app->signal(SIGUSR1);
  EXPECT_EQ(app->wait(20), 0) << app->err();
  agent.signal(SIGINT);
  EXPECT_EQ(agent.wait(30), 0) << agent.err();
  unlink(log.c_str());
  unlink(out.c_str());
}

// With no gpuscope the library makes no call into CUPTI at all; a gpuscope that ends, even by
// SIGKILL (its lease runs out), leaves CUPTI's activity off again.
TEST(GpuTime, IdleLibraryCallsNothing) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  std::string log = tmp_file("idle.log");
  auto app = cupti_app({"sleep:1000", "usr1", "wait:exact", "sleep:300", "usr1", "wait:off", "sleep:1000", "usr1",
                        "wait:exact", "usr1", "wait:off"},
                       log);
  std::string pid = std::to_string(ready_pid(*app));
  ASSERT_TRUE(app->wait_for("waiting 1", 10)) << app->out();
  Process k({gpuscope_bin(), "kernels", "--json", "-p", pid});
  ASSERT_TRUE(k.wait_for("gpuscope: counting", 30, true)) << k.err();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 2", 30)) << app->out();
  k.signal(SIGINT);
  ASSERT_EQ(k.wait(30), 0) << k.err();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 3", 30)) << app->out();
  auto s = slept_of(app->out());
  ASSERT_EQ(s.size(), 3u) << app->out();
  EXPECT_EQ(s[0].calls, 0u);
  EXPECT_EQ(s[0].kinds, 0u);
  EXPECT_EQ(s[0].recording, 0u);
  EXPECT_GT(s[1].calls, 0u);  // flushes while recording
  EXPECT_NE(s[1].kinds, 0u);
  EXPECT_EQ(s[1].recording, 2u);  // GS_GT_REC_EXACT
  EXPECT_EQ(s[2].calls, 0u);
  EXPECT_EQ(s[2].kinds, 0u);
  EXPECT_EQ(s[2].apis, 0u);
  EXPECT_EQ(s[2].recording, 0u);

  Process k2({gpuscope_bin(), "kernels", "--json", "-p", pid});
  ASSERT_TRUE(k2.wait_for("gpuscope: counting", 30, true)) << k2.err();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 4", 30)) << app->out();
  EXPECT_NE(app->out().find("state exact ok"), std::string::npos);
  k2.signal(SIGKILL);
  k2.wait(10);
  auto killed = std::chrono::steady_clock::now();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("done", 40)) << app->out();
  double s_off = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::string o = app->out();
  EXPECT_EQ(o.find("timeout"), std::string::npos) << o;
  EXPECT_NE(o.find("state off ok", o.find("waiting 4")), std::string::npos) << o;
  EXPECT_GE(s_off, 4.0);  // the lease (5 s after the last beat), not something sooner
  EXPECT_LE(s_off, 12.0);
  EXPECT_EQ(app->wait(20), 0) << app->err();
  unlink(log.c_str());
}

// tests/gpu's floor library (check 82) over the stand-in: only the concurrent-kernel kind
// enabled, from InitializeInjection on, every kernel record counted.
TEST(GpuTime, CuptiFloorLibrary) {
  std::string log = tmp_file("floor.log");
  Process app({CUPTI_APP, CUPTI_FLOOR, CUPTI_STANDIN, "floor_kernel:100:1000:1000", "sleep:300"},
              {"GPUSCOPE_CUPTI_PATH=" CUPTI_STANDIN, "GS_CUPTI_STANDIN_LOG=" + log});
  EXPECT_EQ(app.wait(30), 0) << app.out() << app.err();
  Phase p = phase_of(app.out(), "floor_kernel");
  EXPECT_EQ(p.kernels, 100u) << app.out();
  EXPECT_EQ(p.api, 0u);
  EXPECT_NE(app.err().find("gpuscope-cupti-floor: 100 kernel records, 0 dropped"), std::string::npos) << app.err();
  EXPECT_EQ(log_count(log, "enable"), 1u);
  std::istringstream first(slurp(log));
  std::string type;
  uint64_t ts = 0, kind = 0;
  first >> type >> ts >> kind;
  EXPECT_EQ(type, "enable");
  EXPECT_EQ(kind, 10u);  // CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
  EXPECT_EQ(slurp(log).find("api_enable"), std::string::npos);
  unlink(log.c_str());
}

// A version-1 gpuscope writes only the word `attached`: it gets what it always got, every
// kernel and the launch calls, and nothing once it clears the word.
TEST(GpuTime, VersionOneClientGetsEverything) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  std::string log = tmp_file("v1.log");
  auto app = cupti_app({"attach1:7", "wait:exact", "wait:api", "v1_kernel:50:1000:1000", "attach1:0", "wait:off",
                        "wait:noapi", "after_kernel:20:1000:1000"},
                       log);
  EXPECT_EQ(app->wait(40), 0) << app->out() << app->err();
  EXPECT_EQ(app->out().find("timeout"), std::string::npos) << app->out();
  Phase v1 = phase_of(app->out(), "v1_kernel"), after = phase_of(app->out(), "after_kernel");
  EXPECT_EQ(v1.kernels, 50u) << app->out();
  EXPECT_EQ(v1.api, 50u);
  ASSERT_TRUE(after.found) << app->out();
  EXPECT_EQ(after.kernels, 0u);
  EXPECT_EQ(after.api, 0u);
  unlink(log.c_str());
}

namespace {

// Kernel records of `name` in the stand-in's log: their start times, and the launches missed.
struct Logged {
  std::vector<uint64_t> starts, missed;
  std::map<uint64_t, bool> kernel_kind;  // time -> enabled, of the concurrent-kernel kind (10)
  // What the library had done last before `t`, for a failure's message.
  std::string before(uint64_t t) const {
    auto it = kernel_kind.upper_bound(t);
    if (it == kernel_kind.begin()) return "never enabled before";
    --it;
    return (it->second ? "enabled " : "disabled ") + std::to_string((t - it->first) / 1000000) + " ms before";
  }
};

Logged logged(const std::string& log, const std::string& name) {
  Logged out;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string type, nm;
    uint64_t t = 0, x = 0;
    w >> type >> t >> x >> nm;
    if ((type == "enable" || type == "disable") && x == 10) out.kernel_kind[t] = type == "enable";
    if (nm != name) continue;
    if (type == "kernel") out.starts.push_back(t);
    if (type == "missed") out.missed.push_back(t);
  }
  return out;
}

}  // namespace

// Two agents with different duties on one process: the larger share's windows are recorded.
// The one that asked for it killed (no goodbye), its lease runs out and the other's duty holds.
TEST(GpuTime, TwoAgentsTheLargerDutyWins) {
  if (auto p = other_gpuscope(); !p.empty()) GTEST_SKIP() << "another gpuscope runs (pid " << p << ")";
  std::string log = tmp_file("two.log");
  // sleep:500: the library reads the slots every 100 ms; by then it goes by both.
  auto app = cupti_app({"clients:2", "sleep:500", "usr1", "wide_kernel:2000:1000:50000", "usr1", "clients:1",
                        "narrow_kernel:2000:1000:50000"},
                       log);
  std::string pid = std::to_string(ready_pid(*app));
  auto agent = [&](const char* duty) {
    return std::make_unique<Process>(std::vector<std::string>{gpuscope_bin(), "agent", "--listen", "127.0.0.1:0", "-p",
                                                              pid, "--collectors", "gputime", "--gputime-duty", duty,
                                                              "--max-cpu-percent", "0"});
  };
  auto narrow = agent("0.2/1"), wide = agent("0.5/1");
  ASSERT_TRUE(app->wait_for("waiting 1", 40)) << app->out() << narrow->err() << wide->err();
  ASSERT_NE(app->out().find("clients 2 ok"), std::string::npos) << app->out();
  app->signal(SIGUSR1);
  ASSERT_TRUE(app->wait_for("waiting 2", 30)) << app->out();
  wide->signal(SIGKILL);
  wide->wait(10);
  app->signal(SIGUSR1);
  EXPECT_EQ(app->wait(60), 0) << app->out() << app->err();
  EXPECT_NE(app->out().find("clients 1 ok"), std::string::npos) << app->out();
  // slack: the library's thread wakes at a window's edge, late by up to this on a loaded machine.
  const uint64_t period = 1000000000, slack = 150000000;
  auto check = [&](const std::string& name, uint64_t on) {
    Logged l = logged(log, name);
    EXPECT_EQ(l.starts.size() + l.missed.size(), 2000u) << name;
    size_t late = 0;  // recorded past the narrow window: only the wide one holds them
    for (uint64_t t : l.starts) {
      EXPECT_LT(t % period, on + slack) << name;
      late += t % period > 200000000 + slack;
    }
    for (uint64_t t : l.missed)
      EXPECT_TRUE(t % period < slack || t % period >= on)
          << name << " missed at phase " << t % period / 1000000 << " ms, kernels " << l.before(t);
    return late;
  };
  EXPECT_GT(check("wide_kernel", 500000000), 100u);  // about 300: (0.35, 0.5) s of 2 periods
  EXPECT_EQ(check("narrow_kernel", 200000000), 0u);
  narrow->signal(SIGINT);
  EXPECT_EQ(narrow->wait(30), 0) << narrow->err();
  unlink(log.c_str());
}

namespace {

// A timeline's trace events of one category and process.
std::vector<json> events_of(const json& doc, const std::string& cat, pid_t pid) {
  std::vector<json> r;
  for (auto& e : doc["traceEvents"])
    if (e.value("cat", "") == cat && e["pid"] == pid) r.push_back(e);
  return r;
}

// gpuscope timeline --json -c COMM, stopped by SIGINT once `until` has happened.
json timeline_of(const std::string& comm, const std::vector<std::string>& extra, const std::function<void()>& until,
                 json* summary) {
  std::string out = tmp_file(comm + ".json");
  PinDir no_bridge;
  std::vector<std::string> argv{gpuscope_bin(), "timeline", "--json",    "-c",          comm,
                                "-o",           out,        "--pin-dir", no_bridge.path};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process g(argv);
  EXPECT_TRUE(g.wait_for("recording a timeline", 30, true)) << g.err();
  until();
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  auto lines = parse_lines(g.out());
  if (!lines.empty()) *summary = lines.back();
  json doc = json::parse(slurp(out));
  unlink(out.c_str());
  return doc;
}

}  // namespace

// Copy and memset spans carry their direction and bytes (the entry's arguments, on the span made
// at the exit): the stand-in app's copies scenario through the traced rows, the runtime's copies
// with their kind, the driver's copy inside each with the direction its name or pointers give.
TEST(GpuTime, TimelineCopySpansCarryDirectionAndBytes) {
  Workload w("tlcopy", "gsc");
  const std::string lib = standin_lib_dir();
  pid_t pid = 0;
  json summary;
  json doc = timeline_of(
      w.comm(), {"--lib", lib + "/libcuda.so.1", "--lib", lib + "/libcudart.so.13"},
      [&] {
        Process app({w.path(), "copies"});
        pid = ready_pid(app);
        EXPECT_EQ(app.wait(30), 0) << app.err();
      },
      &summary);
  std::map<std::tuple<std::string, std::string, uint64_t, int>, int> spans;  // (name, direction, bytes, ret)
  for (auto& e : events_of(doc, "cuda_api", pid))
    if (e["args"].contains("direction"))
      spans[{e["name"], e["args"]["direction"], e["args"]["bytes"], e["args"]["ret"]}]++;
    else
      EXPECT_FALSE(e["args"].contains("bytes")) << e.dump();
  using K = std::tuple<std::string, std::string, uint64_t, int>;
  EXPECT_EQ(spans, (std::map<K, int>{{K{"cudaMemcpy", "H2D", 4096, 0}, 3},
                                     {K{"cuMemcpyHtoD_v2", "H2D", 4096, 0}, 3},
                                     {K{"cudaMemcpyAsync", "D2H", 1000, 0}, 2},
                                     {K{"cuMemcpyAsync", "default", 1000, 0}, 2},
                                     {K{"cudaMemset", "memset", 100, 0}, 1},
                                     {K{"cudaMemcpy", "default", 4096, 21}, 1}}))
      << testing::PrintToString(spans);
}

// The stand-in driver's sticky error after named kernels, and a kernel-log Xid naming its pid: an
// instant on the failing thread, an instant on the process's track, joined both ways (issue 44).
TEST(GpuTime, TimelineMarksStickyErrorAndXid) {
  Workload w("tlerr", "gst");
  const std::string kmsg = tmp_file("kmsg");
  std::ofstream(kmsg).flush();
  const std::string lib = standin_lib_dir();
  pid_t pid = 0;
  json summary;
  json doc = timeline_of(
      w.comm(), {"--kmsg", kmsg, "--lib", lib + "/libcuda.so.1", "--lib", lib + "/libcudart.so.13"},
      [&] {
        Process app({w.path(), "sticky", "3000"}, {"GPUSCOPE_STANDIN_STICKY_AFTER=4"});
        pid = ready_pid(app);
        EXPECT_TRUE(app.wait_for("sync rc=700")) << app.out() << app.err();
        std::ofstream(kmsg, std::ios::app) << "3,77001,9000000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=" << pid
                                           << ", name=" << w.comm() << ", Ch 00000008, intr 10000000.\n"
                                           << "6,77002,9000000100,-;NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', "
                                              "name=<unknown>, GPU has fallen off the bus.\n";
        EXPECT_EQ(app.wait(30), 0) << app.err();
      },
      &summary);
  unlink(kmsg.c_str());
  EXPECT_EQ(summary["errors"], 3) << summary.dump();
  EXPECT_EQ(doc["metadata"]["error_count"], 3);

  auto sticky = events_of(doc, "cuda_error", pid);
  auto xid = events_of(doc, "gpu_error", pid);
  ASSERT_EQ(sticky.size(), 1u) << doc["metadata"].dump();
  ASSERT_EQ(xid.size(), 1u) << doc["metadata"].dump();
  const json& s = sticky[0];
  const json& x = xid[0];
  EXPECT_EQ(s["ph"], "i");
  EXPECT_EQ(s["s"], "t");
  EXPECT_EQ(s["tid"], pid);
  EXPECT_EQ(s["name"], "CUDA_ERROR_ILLEGAL_ADDRESS at cuCtxSynchronize");
  EXPECT_EQ(s["args"]["code"], 700);
  EXPECT_EQ(s["args"]["code_name"], "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(s["args"]["api"], "cuCtxSynchronize");
  EXPECT_EQ(s["args"]["layer"], "driver");
  EXPECT_EQ(s["args"]["kernels_since_sync"], json::array({"kern_faulting", "kern_second"}));
  EXPECT_EQ(s["args"]["kernels_truncated"], false);
  EXPECT_EQ(s["args"]["xid"], 31);
  EXPECT_EQ(s["args"]["joined_error_id"], x["args"]["error_id"]);

  EXPECT_EQ(x["ph"], "i");
  EXPECT_EQ(x["s"], "p");
  EXPECT_EQ(x["tid"], pid);
  EXPECT_EQ(x["name"], "Xid 31");
  EXPECT_EQ(x["args"]["xid"], 31);
  EXPECT_EQ(x["args"]["meaning"], "GPU memory page fault: the MMU refused an access, usually an application bug");
  EXPECT_EQ(x["args"]["class"], "application");
  EXPECT_EQ(x["args"]["action"], "restart_app");
  EXPECT_EQ(x["args"]["device"], -1);
  EXPECT_EQ(x["args"]["uuid"], "");
  EXPECT_EQ(x["args"]["pci_bus_id"], "0000:3b:00.0");
  EXPECT_EQ(x["args"]["source"], "kmsg");
  EXPECT_EQ(x["args"]["joined_error_id"], s["args"]["error_id"]);
  // The Xid came after the error, both inside the recording.
  EXPECT_GE(x["ts"].get<double>(), s["ts"].get<double>());
  bool named = false;
  for (auto& e : doc["traceEvents"])
    named = named || (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid &&
                      e["args"]["name"] == w.comm() + " " + std::to_string(pid));
  EXPECT_TRUE(named);

  // An Xid of no process: on its GPU's track.
  constexpr pid_t kGpuErrorsPid = (1u << 31) - 2;
  auto gpu = events_of(doc, "gpu_error", kGpuErrorsPid);
  ASSERT_EQ(gpu.size(), 1u);
  EXPECT_EQ(gpu[0]["name"], "Xid 79");
  EXPECT_EQ(gpu[0]["s"], "t");
  EXPECT_EQ(gpu[0]["args"]["xid"], 79);
  EXPECT_EQ(gpu[0]["args"]["class"], "hardware");
  EXPECT_EQ(gpu[0]["args"]["action"], "drain_node");
  EXPECT_EQ(gpu[0]["args"]["pci_bus_id"], "0000:2b:00.0");
  EXPECT_EQ(gpu[0]["args"]["message"], "GPU has fallen off the bus.");
  EXPECT_TRUE(gpu[0]["args"]["joined_error_id"].is_null());
  std::map<std::string, std::string> names;  // "pid tid" -> its name
  for (auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["pid"] == kGpuErrorsPid)
      names[e["name"].get<std::string>() + " " + e.value("tid", json(0)).dump()] = e["args"]["name"];
  EXPECT_EQ(names["process_name 0"], "GPU errors (no process)");
  EXPECT_EQ(names["thread_name " + gpu[0]["tid"].dump()], "GPU 0000:2b:00.0");
}

// Two stand-in NCCL ranks of one communicator: each rank's calls as spans on its thread, counted
// exactly per op, with their bytes, communicator, rank and sequence numbers (issue 43).
TEST(GpuTime, TimelineNcclSpansPerRank) {
  const std::string id = tmp_file("nccl-id");
  unlink(id.c_str());
  const int iters = 5;
  auto rank = [&](int r) {
    return std::make_unique<Process>(std::vector<std::string>{NCCL_RANK, "--ranks", "2", "--rank", std::to_string(r),
                                                              "--id-file", id, "--iters", std::to_string(iters)});
  };
  std::unique_ptr<Process> r1 = rank(1), r0;  // rank 1 waits for rank 0's id, mapped before the timeline starts
  ASSERT_EQ(ready_pid(*r1), r1->pid());
  json summary;
  // Other tests' ranks share the name: only these two are checked.
  json doc = timeline_of(
      "nccl_rank", {},
      [&] {
        r0 = rank(0);
        EXPECT_EQ(r0->wait(30), 0) << r0->err();
        EXPECT_EQ(r1->wait(30), 0) << r1->err();
      },
      &summary);
  unlink(id.c_str());
  EXPECT_EQ(doc["metadata"]["nccl_span_count"], summary["nccl_spans"]);

  const std::map<std::string, uint64_t> bytes{{"ncclAllReduce", 4096}, {"ncclBroadcast", 4096},
                                              {"ncclAllGather", 2048}, {"ncclReduceScatter", 2048},
                                              {"ncclSend", 4096},      {"ncclRecv", 4096}};
  std::set<std::string> comm_ids;
  for (int r = 0; r < 2; r++) {
    const pid_t pid = (r ? r1 : r0)->pid();
    std::map<std::string, uint64_t> calls;
    std::set<uint64_t> seqs;
    for (auto& e : events_of(doc, "nccl", pid)) {
      const std::string op = e["name"];
      calls[op]++;
      EXPECT_EQ(e["ph"], "X");
      EXPECT_EQ(e["tid"], pid);
      EXPECT_GT(e["dur"].get<double>(), 0);
      EXPECT_EQ(e["args"]["bytes"], bytes.count(op) ? bytes.at(op) : 0) << e.dump();
      EXPECT_EQ(e["args"]["rank"], r);
      EXPECT_EQ(e["args"]["nranks"], 2);
      EXPECT_FALSE(e["args"].contains("error")) << e.dump();
      comm_ids.insert(e["args"]["comm_id"].get<std::string>());
      if (op == "ncclSend" || op == "ncclRecv") {
        EXPECT_TRUE(e["args"]["seq"].is_null()) << e.dump();
        EXPECT_EQ(e["args"]["peer"], 1 - r);
      } else {
        seqs.insert(e["args"]["seq"].get<uint64_t>());
      }
    }
    std::map<std::string, uint64_t> want;
    for (auto& [op, _] : bytes) want[op] = iters;
    EXPECT_EQ(calls, want) << "rank " << r;
    EXPECT_EQ(seqs.size(), 4u * iters);
    EXPECT_EQ(*seqs.rbegin(), 4u * iters - 1);
  }
  ASSERT_EQ(comm_ids.size(), 1u);
  EXPECT_EQ(comm_ids.begin()->size(), 16u);
  EXPECT_NE(*comm_ids.begin(), "0000000000000000");
}

// A kernel log it cannot read is said once; the trace is still written.
TEST(GpuTime, TimelineUnreadableKmsgSaidOnce) {
  std::string out = tmp_file("nokmsg.json");
  PinDir no_bridge;
  auto r = run({gpuscope_bin(), "timeline", "-d", "1", "-c", "gs-no-such", "-o", out, "--pin-dir", no_bridge.path,
                "--kmsg", "/nonexistent/kmsg"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string said =
      "gpuscope: cannot read /nonexistent/kmsg: No such file or directory: no Xids in the timeline; sticky CUDA "
      "errors are still marked\n";
  EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(said), r.err.rfind(said)) << r.err;
  EXPECT_EQ(json::parse(slurp(out))["metadata"]["error_count"], 0);
  unlink(out.c_str());
}

// GPU time without a GPU: libgpuscope-cupti.so loads and initializes where there is no driver,
// and the records a fixture hands to its exported function come out of gpuscope kernels (GPU
// columns joined with the launches it counted) and gpuscope timeline (tracks, spans, flows).
#include <gtest/gtest.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <fstream>
#include <sstream>

#include "bridge_fixture.h"
#include "harness.h"

using namespace gstest;

namespace {

// Durations the feeder gives its 40 kernels: 50 us + i us.
constexpr uint64_t kKernels = 40;
constexpr uint64_t kTotalNs = kKernels * 50000 + 1000 * (kKernels * (kKernels - 1) / 2);
constexpr uint64_t kMaxNs = 50000 + 1000 * (kKernels - 1);

std::string tmp_file(const std::string& name) {
  return "/tmp/gputime_test_" + std::to_string(getpid()) + "_" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
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
  std::string p, comm, launches, rate, total, mean, max;
  cells >> p >> comm >> launches >> rate >> total >> mean >> max;
  EXPECT_EQ(p, std::to_string(pid));
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
    if (l["type"] == "kernel" && l["pid"] == pid && l["kernel"] == "alpha_kernel(float*)" && l.contains("gpu_time_ns")) {
      EXPECT_EQ(l["gpu_time_ns"].get<uint64_t>(), kTotalNs);
      found = true;
    }
  EXPECT_TRUE(found) << g.out();
}

TEST(GpuTime, TimelineTracksSpansFlows) {
  Process w({GT_FEEDER, CUPTI_LIB, "wait-detach"});
  pid_t pid = ready_pid(w);
  std::string out = tmp_file("timeline.json");
  Process g({gpuscope_bin(), "timeline", "--json", "-d", "3", "-p", std::to_string(pid), "-o", out,
             "--pin-dir", "/nonexistent"});
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
                std::to_string(kKernels), "--min-kernels", std::to_string(kKernels), "--kernel",
                "alpha_kernel(float*)", "--min-flows", std::to_string(kKernels)});
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

TEST(GpuTime, BadInput) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"timeline", "-p", "999999999"},
           {"timeline", "-o", "/nonexistent/dir/t.json", "-d", "1"},
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
  Process g({gpuscope_bin(), "timeline", "-d", "7", "-c", "gputime_feeder", "-o", out, "--pin-dir", "/nonexistent"});
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

// gpuscope latency against real processes: stand-in calls that busy-wait known times, the
// real libcudart without a GPU, and bad input.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <thread>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

std::string standin_drv() { return standin_lib_dir() + "/libcuda.so.1"; }

// Runs `gpuscope latency ARGS` around one workload run; returns stdout.
std::string latency_around(std::vector<std::string> args, const std::vector<std::string>& workload, pid_t* pid,
                           const std::vector<std::string>& env = {}, std::string* err = nullptr) {
  args.insert(args.begin(), {gpuscope_bin(), "latency"});
  Process g(args, env);
  EXPECT_TRUE(g.wait_for("gpuscope: timing", 30, true)) << g.err();
  // SCHED_FIFO keeps the build jobs sharing this VM from preempting the busy-waits.
  std::vector<std::string> argv{"chrt", "-f", "10"};
  argv.insert(argv.end(), workload.begin(), workload.end());
  Process w(argv);
  *pid = ready_pid(w);
  EXPECT_EQ(w.wait(60), 0) << w.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  if (err) *err = g.err();
  return g.out();
}

// The probes line of one API (entries and why calls were not timed), host-wide.
json probes_of(const std::vector<json>& lines, const std::string& api) {
  for (auto& l : lines)
    if (l["type"] == "probes" && l["api"] == api) return l;
  return json();
}

std::vector<json> of(const std::vector<json>& lines, const std::string& type, pid_t pid, const std::string& api) {
  std::vector<json> r;
  for (auto& l : lines)
    if (l["type"] == type && l["pid"] == pid && l["api"] == api) r.push_back(l);
  return r;
}

}  // namespace

TEST(Latency, BusyWaitsLandInTheirBuckets) {
  pid_t pid;
  auto lines = parse_lines(latency_around({"--json", "--per-process", "--api", "cuMemAlloc_v2", "--lib", standin_drv()},
                                          {standin_app(), "latency", "20", "5"}, &pid));
  auto h = of(lines, "latency", pid, "cuMemAlloc_v2");
  ASSERT_EQ(h.size(), 1u) << lines.size();
  auto& l = h[0];
  EXPECT_EQ(l["layer"], "driver");
  EXPECT_EQ(l["count"], 25);
  // A busy-wait never ends early, so nothing lands below its bucket, and the 2 ms calls sit
  // alone above 1 ms. A vCPU stall or the first call's lazy binding can push a 50 µs call into
  // the next bucket on this shared VM, so bucket 15 must hold at least 16 of the 20.
  uint64_t below = 0, fast = 0, mid = 0, slow_bucket = 0, slow = 0;
  for (auto& b : l["buckets"]) {
    uint64_t le = b["le_ns"], n = b["count"];
    if (le < 65535)
      below += n;
    else if (le == 65535)
      fast += n;
    else if (le < 2097151)
      mid += n;
    else
      slow += n, slow_bucket += le == 2097151 ? n : 0;
  }
  EXPECT_EQ(below, 0u);
  EXPECT_GE(fast, 16u) << l["buckets"].dump();
  EXPECT_EQ(fast + mid, 20u) << l["buckets"].dump();
  EXPECT_EQ(slow, 5u);
  EXPECT_GE(slow_bucket, 4u);
  EXPECT_EQ(l["buckets"][0]["le_ns"], 65535) << "the first bucket listed is the first non-empty one";
  // Percentiles are the log2 bucket their rank falls in (the calls are counted in BPF by bucket),
  // the top one capped by the maximum: not a number made up inside the bucket.
  const uint64_t mx = l["max_ns"];
  EXPECT_GE(mx, 2000000u);
  EXPECT_FALSE(l.contains("p50_ns")) << l.dump();
  EXPECT_EQ(l["p50_lo_ns"], 32768) << l.dump();  // rank 13: the 50 µs calls
  EXPECT_EQ(l["p50_hi_ns"], 65535);
  EXPECT_EQ(l["p95_lo_ns"], 1048576);  // rank 24: a 2 ms call, at most one of them above 2^21 ns
  EXPECT_EQ(l["p95_hi_ns"], std::min<uint64_t>(mx, 2097151));
  EXPECT_EQ(l["p99_lo_ns"], uint64_t{1} << (63 - __builtin_clzll(mx)));  // rank 25: the maximum's bucket
  EXPECT_EQ(l["p99_hi_ns"], mx);
  auto e = of(lines, "errors", pid, "cuMemAlloc_v2");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["ret_name"], "CUDA_SUCCESS");
  EXPECT_EQ(e[0]["ret"], 0);
  EXPECT_EQ(e[0]["count"], 25);
}

TEST(Latency, ReturnCodesAndTextOutput) {
  pid_t pid;
  std::string out = latency_around({"--per-process", "--api", "cuMemAlloc_v2,cuLaunchKernel", "--lib", standin_drv()},
                                   {standin_app(), "--result", "2", "latency", "3", "0"}, &pid);
  auto at = out.find("cuMemAlloc_v2 (driver) pid " + std::to_string(pid));
  ASSERT_NE(at, std::string::npos) << out;
  std::string block = out.substr(at, out.find("\n\n", at) - at);
  EXPECT_NE(block.find("\n          32.768 -> 65.536 : "), std::string::npos) << block;
  EXPECT_NE(block.find(" : count     distribution\n"), std::string::npos) << block;
  // Each percentile the range of its bucket as the rows print it; the last (rank 3) ends at the max.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(block, m,
                                std::regex("\n  count 3  p50 ([0-9.]+)-[0-9.]+ µs  p95 [0-9.]+-[0-9.]+ µs  p99 "
                                           "[0-9.]+-([0-9.]+) µs  max ([0-9.]+) µs  \\(percentiles: the log2 "
                                           "bucket each falls in\\)\n")))
      << block;
  EXPECT_GE(std::stod(m[1]), 32.768) << block;
  EXPECT_EQ(m[2], m[3]) << block;
  EXPECT_NE(block.find("  return codes:\n    CUDA_ERROR_OUT_OF_MEMORY                 3"), std::string::npos) << block;
  EXPECT_EQ(block.find("CUDA_SUCCESS"), std::string::npos) << block;
  EXPECT_EQ(out.find("cuLaunchKernel (driver) pid " + std::to_string(pid)), std::string::npos)
      << "an API never called prints nothing";
}

TEST(Latency, RealCudartWithoutGpu) {
  pid_t pid;
  auto lines = parse_lines(
      latency_around({"--json", "--per-process", "--api", "cudaMalloc,cudaFree"}, {calls_shared(), "4", "3"}, &pid));
  auto e = of(lines, "errors", pid, "cudaMalloc");
  ASSERT_EQ(e.size(), 1u) << lines.size();
  EXPECT_EQ(e[0]["ret_name"], "cudaErrorInsufficientDriver");
  EXPECT_EQ(e[0]["ret"], 35);
  EXPECT_EQ(e[0]["count"], 4);
  auto h = of(lines, "latency", pid, "cudaMalloc");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0]["count"], 4);
  EXPECT_EQ(h[0]["layer"], "runtime");
  EXPECT_GT(h[0]["max_ns"].get<uint64_t>(), 0u);
}

TEST(Latency, BadInputOneLineExit2) {
  for (std::vector<std::string> a : {std::vector<std::string>{"--bogus"},
                                     {"--api", "cudaNope"},
                                     {"--interval", "0"},
                                     {"--sample-launches", "0"},
                                     {"--sample-launches", "1.5"},
                                     {"-p", "999999999"}}) {
    auto r = expect_usage_error("latency", a);
    EXPECT_EQ(r.err.rfind("gpuscope: ", 0), 0u) << r.err;
  }
}

TEST(Latency, IntervalsPrintDeltas) {
  pid_t pid;
  auto lines = parse_lines(
      latency_around({"--json", "--per-process", "--interval", "0.2", "--api", "cuMemAlloc_v2", "--lib", standin_drv()},
                     {standin_app(), "--delay-ms", "300", "latency", "6", "0"}, &pid));
  uint64_t total = 0, reports = 0, errors = 0;
  for (auto& l : of(lines, "latency", pid, "cuMemAlloc_v2")) total += l["count"].get<uint64_t>(), reports++;
  for (auto& l : of(lines, "errors", pid, "cuMemAlloc_v2")) errors += l["count"].get<uint64_t>();
  EXPECT_EQ(total, 6u) << "each call is reported in exactly one interval";
  EXPECT_EQ(errors, 6u);
  EXPECT_GE(reports, 1u);
}

// 200 runtime launches, each reaching the driver's cuLaunchKernel, timed one in 4 at random on
// each layer (uprobe sessions: the others take no return probe); 2 cudaMalloc calls, all timed.
TEST(Latency, LaunchSampleAndProbeCounts) {
  pid_t pid;
  std::string err;
  const std::vector<std::string> args = {"--json",
                                         "--per-process",
                                         "--api",
                                         "cudaLaunchKernel,cuLaunchKernel,cudaMalloc",
                                         "--sample-launches",
                                         "4",
                                         "-c",
                                         "standin_app",
                                         "--lib",
                                         standin_drv(),
                                         "--lib",
                                         standin_lib_dir() + "/libcudart.so.13"};
  auto lines = parse_lines(latency_around(args, {standin_app(), "calls", "2", "200"}, &pid, {}, &err));
  EXPECT_NE(err.find("uprobe sessions, 1 launch in 4 timed"), std::string::npos) << err;
  for (const char* api : {"cudaLaunchKernel", "cuLaunchKernel"}) {
    json p = probes_of(lines, api);
    ASSERT_FALSE(p.is_null()) << api;
    EXPECT_EQ(p["entries"], 200) << p.dump();
    const uint64_t timed = p["timed"];
    // Binomial(200, 1/4): mean 50, standard deviation 6.1; outside 20..80 once in ~10^6 runs.
    EXPECT_GE(timed, 20u) << p.dump();
    EXPECT_LE(timed, 80u) << p.dump();
    EXPECT_EQ(p["unsampled"].get<uint64_t>(), 200 - timed) << p.dump();
    EXPECT_EQ(p["nested"], 0) << p.dump();
    EXPECT_EQ(p["filtered"], 0) << p.dump();
    auto h = of(lines, "latency", pid, api);
    ASSERT_EQ(h.size(), 1u) << api;
    EXPECT_EQ(h[0]["count"].get<uint64_t>(), timed) << api;
  }
  EXPECT_EQ(probes_of(lines, "cuLaunchKernel")["layer"], "driver");
  json m = probes_of(lines, "cudaMalloc");
  EXPECT_EQ(m["entries"], 2);
  EXPECT_EQ(m["timed"], 2);
  EXPECT_EQ(m["unsampled"], 0);
  auto h = of(lines, "latency", pid, "cudaMalloc");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0]["count"], 2);
}

// Without uprobe sessions (GPUSCOPE_UPROBE_SESSION=0, as on kernels before 6.12) every call
// takes its return probe anyway, so every launch is timed; -c that matches nothing times none.
TEST(Latency, EntryAndReturnProbesWithoutSessions) {
  pid_t pid;
  std::string err;
  const std::string rt = standin_lib_dir() + "/libcudart.so.13";
  auto lines =
      parse_lines(latency_around({"--json", "--per-process", "--api", "cudaLaunchKernel", "--sample-launches", "4",
                                  "-c", "standin_app", "--lib", rt},
                                 {standin_app(), "calls", "0", "12"}, &pid, {"GPUSCOPE_UPROBE_SESSION=0"}, &err));
  EXPECT_NE(err.find("(entry and return probes)"), std::string::npos) << err;
  json p = probes_of(lines, "cudaLaunchKernel");
  EXPECT_EQ(p["entries"], 12) << p.dump();
  EXPECT_EQ(p["timed"], 12) << p.dump();
  EXPECT_EQ(p["unsampled"], 0) << p.dump();
  auto h = of(lines, "latency", pid, "cudaLaunchKernel");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0]["count"], 12);

  lines = parse_lines(
      latency_around({"--json", "--per-process", "--api", "cudaLaunchKernel", "-c", "nosuchcomm", "--lib", rt},
                     {standin_app(), "calls", "0", "7"}, &pid));
  p = probes_of(lines, "cudaLaunchKernel");
  EXPECT_EQ(p["entries"], 7) << p.dump();
  EXPECT_EQ(p["filtered"], 7) << p.dump();
  EXPECT_EQ(p["timed"], 0) << p.dump();
  EXPECT_TRUE(of(lines, "latency", pid, "cudaLaunchKernel").empty());
}

// gpuscope copies against real processes: the stand-in libraries' known copies by direction (the
// subcommand's JSON lines and table, the agent's series), the real libcudart without a GPU (every
// copy fails), bad input.
#include <signal.h>
#include <unistd.h>

#include <cuda.h>
#include <driver_types.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <map>
#include <regex>
#include <thread>
#include <tuple>

#include "copies/copies.h"
#include "harness.h"
#include "usage_error.h"

using namespace gstest;

// Where copies.bpf.c reads the parameter structs.
static_assert(offsetof(cudaMemcpy3DParms, extent) == GS_CP_RT3D_EXTENT);
static_assert(offsetof(cudaMemcpy3DParms, kind) == GS_CP_RT3D_KIND);
static_assert(offsetof(CUDA_MEMCPY2D, srcMemoryType) == GS_CP_CU2D_SRC_TYPE);
static_assert(offsetof(CUDA_MEMCPY2D, dstMemoryType) == GS_CP_CU2D_DST_TYPE);
static_assert(offsetof(CUDA_MEMCPY2D, WidthInBytes) == GS_CP_CU2D_WIDTH);
static_assert(offsetof(CUDA_MEMCPY2D, Height) == GS_CP_CU2D_WIDTH + 8);
static_assert(offsetof(CUDA_MEMCPY3D, srcMemoryType) == GS_CP_CU3D_SRC_TYPE);
static_assert(offsetof(CUDA_MEMCPY3D, dstMemoryType) == GS_CP_CU3D_DST_TYPE);
static_assert(offsetof(CUDA_MEMCPY3D, WidthInBytes) == GS_CP_CU3D_WIDTH);
static_assert(offsetof(CUDA_MEMCPY3D, Height) == GS_CP_CU3D_WIDTH + 8);
static_assert(offsetof(CUDA_MEMCPY3D, Depth) == GS_CP_CU3D_WIDTH + 16);

namespace {

struct Counts {
  uint64_t calls, bytes, failed;
  bool operator==(const Counts&) const = default;
};
void PrintTo(const Counts& c, std::ostream* os) {
  *os << "{calls " << c.calls << ", bytes " << c.bytes << ", failed " << c.failed << "}";
}

// standin_app's `copies` scenario: 3 cudaMemcpy H2D of 4096 B, 2 cudaMemcpyAsync D2H of 1000 B,
// cudaMemcpy2D D2D of 64 B x 8 rows, cudaMemset of 100 B and cuMemsetD32 of 10 words,
// cuMemcpy2D H2H of 16 B x 4 rows, cudaMemcpyPeer of 256 B, cudaMemcpy3D D2H of 16 x 4 x 2,
// cuMemcpy3D device to array of 8 x 2 x 2, and a cudaMemcpy of an invalid kind (fails; counted as
// default). Runtime copies reach the driver's: each counts once.
const std::map<std::string, Counts> kStandinCopies = {
    {"H2D", {3, 12288, 0}}, {"D2H", {3, 2128, 0}},   {"D2D", {2, 544, 0}},   {"H2H", {1, 64, 0}},
    {"peer", {1, 256, 0}},  {"memset", {2, 140, 0}}, {"default", {0, 0, 1}},
};

std::vector<std::string> standin_libs() {
  return {"--lib", standin_lib_dir() + "/libcuda.so.1", "--lib", standin_lib_dir() + "/libcudart.so.13"};
}

// `gpuscope copies ARGS` around one run of `workload` (which waits for SIGUSR1 when
// `wait_usr1`); its stdout once stopped, and the workload's pid.
std::string copies_around(std::vector<std::string> args, const std::vector<std::string>& workload, pid_t* pid,
                          bool wait_usr1 = true) {
  args.insert(args.begin(), {gpuscope_bin(), "copies"});
  Process g(args);
  EXPECT_TRUE(g.wait_for("gpuscope: counting copies", 30, true)) << g.err();
  Process w(workload);
  *pid = ready_pid(w);
  if (wait_usr1) w.signal(SIGUSR1);
  EXPECT_EQ(w.wait(60), 0) << w.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  return g.out();
}

// The last line of each direction about `pid`.
std::map<std::string, json> last_by_direction(const std::vector<json>& lines, pid_t pid) {
  std::map<std::string, json> r;
  for (auto& l : lines)
    if (l["type"] == "copy" && l["pid"] == pid) r[l["direction"].get<std::string>()] = l;
  return r;
}

}  // namespace

TEST(Copies, StandinCopiesByDirectionExactly) {
  Workload wl("copies", "gscopies");
  pid_t pid;
  std::vector<std::string> args{"--json", "-c", wl.comm(), "-i", "0.2"};
  for (auto& l : standin_libs()) args.push_back(l);
  auto lines = parse_lines(copies_around(args, {wl.path(), "--wait-usr1", "1", "copies"}, &pid));
  auto last = last_by_direction(lines, pid);
  std::map<std::string, Counts> got;
  for (auto& [dir, l] : last) {
    got[dir] = {l["calls"].get<uint64_t>(), l["bytes"].get<uint64_t>(), l["failed"].get<uint64_t>()};
    EXPECT_EQ(l["comm"], wl.comm()) << l.dump();
    EXPECT_EQ(l["container"], "host") << l.dump();
    EXPECT_EQ(l["exited"], true) << "the final line of an exited process says so: " << l.dump();
  }
  EXPECT_EQ(got, kStandinCopies);
  // An exited process's rows come once, then go.
  size_t exited = 0;
  for (auto& l : lines)
    if (l["type"] == "copy" && l["pid"] == pid && l.value("exited", false)) exited++;
  EXPECT_EQ(exited, kStandinCopies.size());
}

// A process's rows go with its final lines: from gpuscope's maps too.
TEST(Copies, ExitedProcessLeavesNoRowsBehind) {
  Workload wl("copies-exit", "gscpexit");
  std::vector<std::string> args{gpuscope_bin(), "copies", "--json", "-c", wl.comm(), "-i", "0.2"};
  for (auto& l : standin_libs()) args.push_back(l);
  Process g(args);
  ASSERT_TRUE(g.wait_for("gpuscope: counting copies", 30, true)) << g.err();
  Process w({wl.path(), "copies"});
  pid_t pid = ready_pid(w);
  // Until the snapshot that prints them, its rows stay in `counts` (one per direction and layer).
  ASSERT_EQ(w.wait(30), 0) << w.err();
  ASSERT_TRUE(g.wait_for("\"direction\":\"memset\",\"calls\":2,\"bytes\":140,\"failed\":0,\"exited\":true", 10))
      << g.out();
  auto maps = pids_in_maps(g.pid());
  for (const char* m : {"counts", "copied"}) {
    ASSERT_TRUE(maps.count(m)) << m << " is not among gpuscope's maps";
    auto& pids = maps[m];
    EXPECT_EQ(std::count(pids.begin(), pids.end(), static_cast<uint32_t>(pid)), 0) << m;
  }
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

TEST(Copies, TableHasOneRowPerDirection) {
  Workload wl("copies-table", "gscptab");
  pid_t pid;
  std::vector<std::string> args{"-c", wl.comm(), "-i", "0.2"};
  for (auto& l : standin_libs()) args.push_back(l);
  std::string out = copies_around(args, {wl.path(), "--wait-usr1", "1", "copies"}, &pid);
  EXPECT_NE(out.find("    PID COMM             CONTAINER        DIRECTION        CALLS            BYTES FAILED\n"),
            std::string::npos)
      << out;
  // Each direction's row of the process, once: an exited process's final rows are printed once.
  for (auto& [dir, c] : kStandinCopies) {
    std::regex row(std::to_string(pid) + " +" + wl.comm() + " +host +" + dir + " +" + std::to_string(c.calls) + " +" +
                   std::to_string(c.bytes) + " +" + std::to_string(c.failed) + "\n");
    auto n = std::distance(std::sregex_iterator(out.begin(), out.end(), row), std::sregex_iterator());
    EXPECT_EQ(n, 1) << dir << ":\n" << out;
  }
}

TEST(Copies, RealCudartWithoutGpuCountsFailedCopies) {
  pid_t pid;
  // calls_shared: one cudaMemcpy per kind 0..4, each failing with cudaErrorInsufficientDriver.
  auto lines = parse_lines(copies_around(
      {"--json", "-i", "0.2"}, {"sh", "-c", "echo ready pid=$$; exec " + calls_shared() + " 1 1 300"}, &pid, false));
  auto last = last_by_direction(lines, pid);
  std::map<std::string, Counts> got;
  for (auto& [dir, l] : last)
    got[dir] = {l["calls"].get<uint64_t>(), l["bytes"].get<uint64_t>(), l["failed"].get<uint64_t>()};
  EXPECT_EQ(
      got,
      (std::map<std::string, Counts>{
          {"H2H", {0, 0, 1}}, {"H2D", {0, 0, 1}}, {"D2H", {0, 0, 1}}, {"D2D", {0, 0, 1}}, {"default", {0, 0, 1}}}));
}

// What the CUPTI library timed: the feeder hands it an H2D copy of 4096 B in 20 us and a memset
// of 512 B in 10 us, and makes no copy call itself. Each is a row of 0 calls with its GPU time and
// achieved bandwidth (bytes per ns = GB/s), named after the process after it exited.
TEST(Copies, GpuTimeAndBandwidthFromTheCuptiLibrary) {
  pid_t pid;
  auto lines =
      parse_lines(copies_around({"--json", "-i", "0.2", "-c", "gputime_feeder"}, {GT_FEEDER, CUPTI_LIB}, &pid, false));
  auto last = last_by_direction(lines, pid);
  ASSERT_EQ(last.size(), 2u) << testing::PrintToString(lines);
  for (auto [dir, bytes, ns, gbps] : {std::tuple<std::string, uint64_t, uint64_t, double>{"H2D", 4096, 20000, 0.205},
                                      {"memset", 512, 10000, 0.051}}) {
    const json& l = last[dir];
    EXPECT_EQ(l["comm"], "gputime_feeder") << l.dump();
    EXPECT_EQ(l["calls"], 0) << l.dump();
    EXPECT_EQ(l["bytes"], 0) << l.dump();
    EXPECT_EQ(l["failed"], 0) << l.dump();
    EXPECT_EQ(l["gpu_copies"], 1) << l.dump();
    EXPECT_EQ(l["gpu_bytes"], bytes) << l.dump();
    EXPECT_EQ(l["gpu_ns"], ns) << l.dump();
    EXPECT_DOUBLE_EQ(l["gbps"].get<double>(), gbps) << l.dump();
  }
}

TEST(Copies, AgentSeriesByDirection) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool not installed (scripts/deps.sh installs it)";
  Workload wl("copies-agent", "gscpagent");
  Agent a(wl, {"--collectors", "copies"});
  Process w({wl.path(), "copies"});
  pid_t pid = ready_pid(w);
  ASSERT_EQ(w.wait(30), 0) << w.err();
  const std::string ps = std::to_string(pid);
  std::string m = a.until([&](const std::string& t) {
    return where(samples(t, "gpuscope_memory_copies_total"), {{"pid", ps}}).size() == kStandinCopies.size();
  });
  ASSERT_NE(m, "") << a.metrics();
  for (auto& [dir, c] : kStandinCopies) {
    std::map<std::string, std::string> want{
        {"pid", ps}, {"comm", wl.comm()}, {"container", "host"}, {"direction", dir}};
    EXPECT_EQ(value_of(m, "gpuscope_memory_copies_total", want), static_cast<double>(c.calls)) << dir;
    EXPECT_EQ(value_of(m, "gpuscope_memory_copy_bytes_total", want), static_cast<double>(c.bytes)) << dir;
    EXPECT_EQ(value_of(m, "gpuscope_memory_copy_failures_total", want), c.failed ? static_cast<double>(c.failed) : -1)
        << dir;
  }
  std::string file = wl.dir() + "/scrape.txt";
  std::ofstream(file) << m;
  auto r = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "") << r.out;
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

TEST(Copies, BadInputOneLineExit2) {
  for (std::vector<std::string> args : {std::vector<std::string>{"-p", "999999999"},
                                        {"-p", "abc"},
                                        {"-i", "0"},
                                        {"--interval", "-1"},
                                        {"-i", "nan"},
                                        {"--bogus"}})
    expect_usage_error("copies", args);
  auto r = expect_usage_error("copies", {"-i", "0"});
  EXPECT_NE(r.err.find("--interval"), std::string::npos) << r.err;
}

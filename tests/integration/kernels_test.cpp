// gpuscope kernels against real processes: nvcc programs on the real libcudart (shared and
// static) and on the stand-in runtime with opaque handles, the stand-in driver, bad input.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness.h"

using namespace gstest;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// A process's final rows, printed when it exited: kernel -> (launches, module).
std::map<std::string, std::pair<uint64_t, std::string>> final_rows(const std::vector<json>& lines, pid_t pid) {
  std::map<std::string, std::pair<uint64_t, std::string>> r;
  for (auto& l : lines)
    if (l["type"] == "kernel" && l["pid"] == pid && l.value("exited", false))
      r[l["kernel"]] = {l["launches"].get<uint64_t>(), l["module"].get<std::string>()};
  return r;
}

// kernels_app of one build variant. With `pre` it launches once before gpuscope starts.
std::vector<json> run_app(const std::string& variant, bool pre, pid_t* pid) {
  std::string app = std::string(KERNELS_FIXTURE_DIR) + "/" + variant + "/kernels_app";
  std::unique_ptr<Process> w;
  if (pre) {
    w = std::make_unique<Process>(std::vector<std::string>{app, "pre"});
    *pid = ready_pid(*w);
  }
  Process g({gpuscope_bin(), "kernels", "--json", "--interval", "0.5"});
  EXPECT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  if (!pre) {
    w = std::make_unique<Process>(std::vector<std::string>{app, "wait"});
    *pid = ready_pid(*w);
  }
  sleep_s(1.0);  // gpuscope rescans processes every 0.4 s: the static runtime is found then
  w->signal(SIGUSR1);
  EXPECT_TRUE(w->wait_for("launched", 20)) << w->err();
  sleep_s(0.3);
  w->signal(SIGUSR1);
  EXPECT_EQ(w->wait(20), 0) << w->err();
  sleep_s(0.5);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  return parse_lines(g.out());
}

// nvcc names the stub after the kernel's mangled name (_Z12alpha_kernelPf,
// _Z11beta_kernelIfEvPT_); __cxa_demangle gives these strings, as CUPTI shows them.
void expect_named(const std::vector<json>& lines, pid_t pid) {
  auto rows = final_rows(lines, pid);
  ASSERT_EQ(rows.size(), 2u) << testing::PrintToString(rows);
  ASSERT_TRUE(rows.count("alpha_kernel(float*)")) << testing::PrintToString(rows);
  ASSERT_TRUE(rows.count("void beta_kernel<float>(float*)")) << testing::PrintToString(rows);
  EXPECT_EQ(rows["alpha_kernel(float*)"], std::make_pair(uint64_t{37}, std::string("kernels_app")));
  EXPECT_EQ(rows["void beta_kernel<float>(float*)"], std::make_pair(uint64_t{13}, std::string("libbeta.so")));
}

}  // namespace

TEST(Kernels, RealRuntimeShared) {
  pid_t pid;
  auto lines = run_app("shared", false, &pid);
  expect_named(lines, pid);
}

TEST(Kernels, RealRuntimeStatic) {
  pid_t pid;
  auto lines = run_app("static", false, &pid);
  expect_named(lines, pid);
}

// The stand-in hands out heap handles, as a GPU host does, and the process has made its
// __cudaGetKernel calls before gpuscope starts: names come from the stubs' handle variables.
TEST(Kernels, OpaqueHandlesAttachAfterStart) {
  pid_t pid;
  auto lines = run_app("standin", true, &pid);
  expect_named(lines, pid);
}

TEST(Kernels, DriverNames) {
  std::string drv = standin_lib_dir() + "/libcuda.so.1";
  Process g({gpuscope_bin(), "kernels", "--json", "--lib", drv});
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  Process w({standin_app(), "driver", "2"});
  pid_t pid = ready_pid(w);
  EXPECT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.5);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  auto rows = final_rows(parse_lines(g.out()), pid);
  ASSERT_EQ(rows.size(), 2u) << g.out();
  EXPECT_EQ(rows["kern_a"].first, 5u);
  EXPECT_EQ(rows["kern_b"].first, 3u);
}

// Launches recorded in stream capture are not runs; graph launches get their own row, and
// the runtime launch's nested driver launch is not counted again.
TEST(Kernels, CaptureAndGraphs) {
  std::string lib = standin_lib_dir();
  Process g({gpuscope_bin(), "kernels", "--json", "--lib", lib + "/libcuda.so.1", "--lib", lib + "/libcudart.so.13"});
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  Process w({standin_app(), "capture"});
  pid_t pid = ready_pid(w);
  EXPECT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.5);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  uint64_t graph = 0, other = 0;
  for (auto& [k, v] : final_rows(parse_lines(g.out()), pid)) (k.starts_with("[graph") ? graph : other) += v.first;
  EXPECT_EQ(graph, 2u) << g.out();
  EXPECT_EQ(other, 1u) << g.out();
}

TEST(Kernels, BadInput) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--interval", "0"}, {"--top", "-3"},
                                        {"-p", "999999999"}, {"--lib", "/etc/passwd"}, {"--bogus"}}) {
    args.insert(args.begin(), {gpuscope_bin(), "kernels"});
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

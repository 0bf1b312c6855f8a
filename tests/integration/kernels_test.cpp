// gpuscope kernels against real processes: nvcc programs on the real libcudart (shared and
// static) and on the stand-in runtime with opaque handles, the stand-in driver, bad input.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>

#include "harness.h"
#include "usage_error.h"

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

// kernels_app of one build variant. With `pre` it launches once before gpuscope starts. `env`
// goes to kernels_app, its GPUSCOPE_* entries to gpuscope.
std::vector<json> run_app(const std::string& variant, bool pre, pid_t* pid, std::vector<std::string> flags = {},
                          std::vector<std::string> env = {}, std::string* err = nullptr) {
  std::string app = std::string(KERNELS_FIXTURE_DIR) + "/" + variant + "/kernels_app";
  std::vector<std::string> wargs{"/usr/bin/env"}, genv;
  for (auto& e : env) (e.starts_with("GPUSCOPE_") ? genv : wargs).push_back(e);
  wargs.push_back(app);
  std::unique_ptr<Process> w;
  if (pre) {
    wargs.push_back("pre");
    w = std::make_unique<Process>(wargs);
    *pid = ready_pid(*w);
  }
  std::vector<std::string> gargs{gpuscope_bin(), "kernels", "--json", "--interval", "0.5"};
  gargs.insert(gargs.end(), flags.begin(), flags.end());
  Process g(gargs, genv);
  EXPECT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  if (!pre) {
    wargs.push_back("wait");
    w = std::make_unique<Process>(wargs);
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
  if (err) *err = g.err();
  return parse_lines(g.out());
}

// nvcc names the stub after the kernel's mangled name (_Z12alpha_kernelPf,
// _Z11beta_kernelIfEvPT_); __cxa_demangle gives these strings, as CUPTI shows them.
// Cooperative launches are kernels like any other; a host function in a stream is listed as such.
void expect_named(const std::vector<json>& lines, pid_t pid, size_t extra = 0) {
  auto rows = final_rows(lines, pid);
  ASSERT_EQ(rows.size(), 4u + extra) << testing::PrintToString(rows);
  using R = std::pair<uint64_t, std::string>;
  EXPECT_EQ(rows["alpha_kernel(float*)"], R(37, "kernels_app")) << testing::PrintToString(rows);
  EXPECT_EQ(rows["void beta_kernel<float>(float*)"], R(13, "libbeta.so")) << testing::PrintToString(rows);
  EXPECT_EQ(rows["coop_kernel(float*)"], R(3, "kernels_app")) << testing::PrintToString(rows);
  EXPECT_EQ(rows["[host fn] host_cb(void*)"], R(2, "kernels_app")) << testing::PrintToString(rows);
  for (auto& l : lines)
    if (l["type"] == "kernel" && l["pid"] == pid) {
      EXPECT_EQ(l["kind"], l["kernel"].get<std::string>().starts_with("[host fn]") ? "host_function" : "kernel");
    }
}

// gpuscope kernels --json probing `libs` while standin_app runs `args` to its end: its pid and
// gpuscope's output.
void count_run(const std::vector<std::string>& libs, const std::vector<std::string>& args, pid_t* pid,
               std::string* out) {
  std::vector<std::string> gargs{gpuscope_bin(), "kernels", "--json"};
  for (auto& l : libs) gargs.insert(gargs.end(), {"--lib", l});
  Process g(gargs);
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  std::vector<std::string> wargs{standin_app()};
  wargs.insert(wargs.end(), args.begin(), args.end());
  Process w(wargs);
  *pid = ready_pid(w);
  EXPECT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.5);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  *out = g.out();
}

// kernels_app on the stand-in with a module-loaded kernel (STANDIN_FUNC_LAYOUT=`layout` where
// given), counted at the driver layer alone (-v): every launch named as expect_named says, the
// module's 7 launches under `module_row`. gpuscope's lines and stderr.
std::vector<json> driver_layer_run(bool pre, const std::string& layout, const std::string& module_row,
                                   std::string* err) {
  pid_t pid;
  std::vector<std::string> env = {"KERNELS_APP_DRIVER_MODULE=1"};
  if (!layout.empty()) env.push_back("STANDIN_FUNC_LAYOUT=" + layout);
  auto lines = run_app("standin", pre, &pid, {"--count-layer", "driver", "-v"}, env, err);
  expect_named(lines, pid, 1);
  EXPECT_EQ(final_rows(lines, pid)[module_row], std::make_pair(uint64_t{7}, std::string("kernels_app")));
  return lines;
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

// One probe per launch: at the driver layer alone every launch (runtime, cooperative, host
// function, driver API) is counted once and named from the naming calls it saw.
TEST(Kernels, DriverLayerOnlyCountsEachLaunchOnce) {
  std::string err;
  driver_layer_run(false, "", "gemm_drv_kernel", &err);
  EXPECT_NE(err.find("counting at the driver layer alone"), std::string::npos) << err;
}

// Attached after every handle was handed out (cuBLAS's case): the runtime's handles are named
// by their handle variables, and teach gpuscope where the driver's objects keep their names
// (+24 here, not the real driver's +8: learned, not assumed); the module-loaded kernel is
// named from its object.
TEST(Kernels, AttachAfterStartNamesDriverObjects) {
  std::string err;
  driver_layer_run(true, "24", "gemm_drv_kernel", &err);
  EXPECT_NE(err.find("keeps a kernel's name at +24 of its function objects"), std::string::npos) << err;
}

// Objects that hold another symbol-like string where names were expected: nothing is
// learned, no wrong name is shown, the module-loaded kernel stays unknown, and -v says why.
TEST(Kernels, UnknownDriverLayoutFallsBackWithoutWrongNames) {
  std::string err;
  auto lines = driver_layer_run(true, "noname", "[unknown kernels_app]", &err);
  for (auto& l : lines) EXPECT_EQ(l.dump().find("not_this_kernel"), std::string::npos) << l.dump();
  EXPECT_NE(err.find("hold no name that matches"), std::string::npos) << err;
}

// The linker cache lists libcuda.so.1 and libcuda.so, one file: probed once, counted once.
TEST(Kernels, OneFileUnderTwoNamesIsCountedOnce) {
  std::string drv = standin_lib_dir() + "/libcuda.so.1";
  std::string link = "/tmp/gstest-libcuda-" + std::to_string(getpid()) + ".so";
  unlink(link.c_str());
  ASSERT_EQ(symlink(drv.c_str(), link.c_str()), 0);
  pid_t pid;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(count_run({drv, link}, {"driver", "2"}, &pid, &out));
  unlink(link.c_str());
  auto rows = final_rows(parse_lines(out), pid);
  EXPECT_EQ(rows["kern_a"].first, 5u) << out;
  EXPECT_EQ(rows["kern_b"].first, 3u) << out;
}

TEST(Kernels, DriverNames) {
  pid_t pid;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(count_run({standin_lib_dir() + "/libcuda.so.1"}, {"driver", "2"}, &pid, &out));
  auto rows = final_rows(parse_lines(out), pid);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows["kern_a"].first, 5u);
  EXPECT_EQ(rows["kern_b"].first, 3u);
}

// Launches recorded in stream capture are not runs; graph launches get their own row, and
// the runtime launch's nested driver launch is not counted again.
TEST(Kernels, CaptureAndGraphs) {
  std::string lib = standin_lib_dir();
  pid_t pid;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(count_run({lib + "/libcuda.so.1", lib + "/libcudart.so.13"}, {"capture"}, &pid, &out));
  uint64_t graph = 0, other = 0;
  for (auto& [k, v] : final_rows(parse_lines(out), pid)) (k.starts_with("[graph") ? graph : other) += v.first;
  EXPECT_EQ(graph, 2u) << out;
  EXPECT_EQ(other, 1u) << out;
}

// A naming call repeated with the same inputs and result (PyTorch repeats two every step) is
// read once. With uprobe sessions (kernel 6.12+) the repeats take no return probe; without,
// they take it and send nothing new. Names stay right either way.
TEST(Kernels, RepeatedNamingCallsAreReadOnce) {
  for (bool sessions : {true, false}) {
    SCOPED_TRACE(sessions ? "uprobe sessions" : "entry and return probes");
    pid_t pid;
    std::string err;
    std::vector<std::string> env{"KERNELS_APP_DRIVER_MODULE=1", "KERNELS_APP_NAMING_REPEAT=500"};
    if (!sessions) env.push_back("GPUSCOPE_UPROBE_SESSION=0");
    auto lines = run_app("standin", false, &pid, {"-v"}, env, &err);
    EXPECT_NE(err.find(sessions ? "naming calls as uprobe sessions" : "naming calls at entry and return probes"),
              std::string::npos)
        << err;
    expect_named(lines, pid, 1);
    EXPECT_EQ(final_rows(lines, pid)["gemm_drv_kernel"], std::make_pair(uint64_t{7}, std::string("kernels_app")));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(err, m, std::regex("(\\d+) naming calls read"))) << err;
    EXPECT_GE(std::stoul(m[1]), 1u) << err;
    EXPECT_LE(std::stoul(m[1]), 10u) << "500 repeats of one call, read each time: " << err;
  }
}

// Attached to a process in a tight launch loop: a call entered between the attachment of the
// entry and of the return probes must not leave the thread looking nested for good (it did:
// counting stopped after one launch). The runtime row keeps growing in every later interval.
TEST(Kernels, AttachDuringALaunchLoopKeepsCounting) {
  Process app({standin_app(), "launch_loop", "8000"});
  sleep_s(0.3);
  Process g({gpuscope_bin(), "kernels", "--json", "--interval", "0.5", "-p", std::to_string(app.pid()), "-d", "3"});
  ASSERT_EQ(g.wait(30), 0) << g.err();
  std::vector<uint64_t> counts;  // the runtime row (the stand-in's own stub) per interval
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "kernel" && l["pid"] == app.pid() && l["module"] == "standin_app")
      counts.push_back(l["launches"].get<uint64_t>());
  app.signal(SIGTERM);
  app.wait(20);
  ASSERT_GE(counts.size(), 4u) << g.out();
  for (size_t i = 1; i < counts.size(); i++)
    EXPECT_GT(counts[i], counts[i - 1] + 1000) << testing::PrintToString(counts);
}

TEST(Kernels, BadInput) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--interval", "0"},
                                        {"--top", "-3"},
                                        {"--count-layer", "runtime"},
                                        {"-p", "999999999"},
                                        {"--lib", "/etc/passwd"},
                                        {"--bogus"},
                                        {"-c", ""},
                                        {"-p", "./app"},
                                        {"--pid"},
                                        {"-d", "1d"},
                                        {"--interval", " 1"},
                                        {"--interval", "0x1p-3"},
                                        {"--runtime-root", ""},
                                        {"--runtime-root", "/etc/passwd"},
                                        {"--pods-dir", "/nonexistent"}})
    expect_usage_error("kernels", args);
}

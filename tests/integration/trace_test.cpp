// gpuscope trace against real processes: the real libcudart (no GPU), nvcc programs with
// shared and static cudart, and the stand-in runtime/driver for success paths.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "core/containers.h"
#include "core/elf_symbols.h"
#include "harness.h"

using namespace gstest;
namespace fs = std::filesystem;

namespace {

std::string standin_rt() { return standin_lib_dir() + "/libcudart.so.13"; }
std::string standin_drv() { return standin_lib_dir() + "/libcuda.so.1"; }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Runs a workload to completion while a tracer with `args` runs; returns the events.
std::vector<json> trace_workload(const std::vector<std::string>& args, const std::vector<std::string>& workload,
                                 pid_t* pid_out, const std::vector<std::string>& env = {}) {
  Trace t(args);
  Process w(workload, env);
  *pid_out = ready_pid(w);
  EXPECT_EQ(w.wait(60), 0) << w.err();
  EXPECT_NE(w.out().find("done"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return t.stop();
}

const json& summary_of(const std::vector<json>& ev) {
  static const json empty;
  for (auto& e : ev)
    if (e.value("type", "") == "summary") return e;
  return empty;
}

// A launch's configuration as trace prints it: grid, block, dynamic shared memory, stream,
// cluster and function.
void expect_launch(const json& e, const std::vector<int>& grid, const std::vector<int>& block, int shared_mem,
                   const std::string& stream, const std::vector<int>& cluster, const std::string& func) {
  EXPECT_EQ(e["grid"], json(grid)) << e.dump();
  EXPECT_EQ(e["block"], json(block)) << e.dump();
  EXPECT_EQ(e["shared_mem"], shared_mem) << e.dump();
  EXPECT_EQ(e["stream"], stream) << e.dump();
  EXPECT_EQ(e["cluster"], json(cluster)) << e.dump();
  EXPECT_EQ(e["func"], func) << e.dump();
}

}  // namespace

TEST(TraceRealCudart, SharedRuntimeCallsAndArguments) {
  int64_t t0 = now_ns();
  pid_t pid;
  auto ev = trace_workload({}, {calls_shared(), "4", "3"}, &pid);
  int64_t t1 = now_ns();

  auto mallocs = select(ev, pid, "cudaMalloc", "enter");
  ASSERT_EQ(mallocs.size(), 4u);
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(mallocs[i]["size"], 1000 * (i + 1));
  auto malloc_exits = select(ev, pid, "cudaMalloc", "exit");
  ASSERT_EQ(malloc_exits.size(), 4u);
  for (auto& e : malloc_exits) {
    EXPECT_EQ(e["ret"], 35);
    EXPECT_EQ(e["ret_name"], "cudaErrorInsufficientDriver");
    EXPECT_GT(e["dur_ns"].get<uint64_t>(), 0u);
    EXPECT_FALSE(e.contains("ptr")) << "a failed allocation returns no pointer";
  }

  auto launches = select(ev, pid, "cudaLaunchKernel", "enter");
  ASSERT_EQ(launches.size(), 3u);
  for (auto& e : launches) {
    EXPECT_EQ(e["grid"], json::array({11, 22, 33}));
    EXPECT_EQ(e["block"], json::array({4, 5, 6}));
    EXPECT_EQ(e["shared_mem"], 0);
    EXPECT_EQ(e["captured"], false);
    EXPECT_EQ(e["layer"], "runtime");
    EXPECT_NE(e["func"], "0x0");
  }
  EXPECT_EQ(select(ev, pid, "cudaLaunchKernel", "exit").size(), 3u);
  EXPECT_EQ(select(ev, pid, "cudaLaunchKernelExC", "").size(), 0u);

  auto copies = select(ev, pid, "cudaMemcpy", "enter");
  ASSERT_EQ(copies.size(), 5u);
  const char* kinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                         "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
  for (int k = 0; k < 5; k++) {
    EXPECT_EQ(copies[k]["kind"], kinds[k]);
    EXPECT_EQ(copies[k]["size"], 4096 * (k + 1) / 5);
    EXPECT_EQ(std::stoull(copies[k]["src"].get<std::string>(), nullptr, 16) -
                  std::stoull(copies[k]["dst"].get<std::string>(), nullptr, 16),
              4096u);
  }
  for (const char* api :
       {"cudaStreamCreate", "cudaEventCreate", "cudaEventRecord", "cudaStreamSynchronize", "cudaDeviceSynchronize"}) {
    EXPECT_EQ(select(ev, pid, api, "enter").size(), 1u) << api;
    EXPECT_EQ(select(ev, pid, api, "exit").size(), 1u) << api;
  }
  EXPECT_EQ(select(ev, pid, "cudaFree", "enter").size(), 4u);

  for (auto& e : select(ev, pid, "", "")) {
    EXPECT_EQ(e["comm"], "calls_shared");
    EXPECT_EQ(e["thread"], "calls_shared");
    EXPECT_EQ(e["tid"], pid);
    EXPECT_EQ(e["layer"], "runtime");
    EXPECT_GE(e["ts_ns"].get<int64_t>(), t0);
    EXPECT_LE(e["ts_ns"].get<int64_t>(), t1);
    EXPECT_TRUE(e.contains("cgroup"));
  }
  const auto& s = summary_of(ev);
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["lost"], 0);
  EXPECT_EQ(s["events"].get<size_t>(), ev.size() - 1);
}

// Context calls are traced with their arguments decoded: devices in, contexts in and out, as
// the stand-in driver hands them out (and as the stand-in runtime's cudaSetDevice makes them).
TEST(TraceStandin, ContextCallsDecoded) {
  Trace t({"--lib", standin_rt(), "--lib", standin_drv()});
  Process w({standin_app(), "contexts"});
  pid_t pid = ready_pid(w);
  ASSERT_TRUE(w.wait_for("holding")) << w.err();
  w.signal(SIGUSR1);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto ev = t.stop();
  std::smatch m;
  std::string err = w.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(c0 (0x[0-9a-f]+) c1 (0x[0-9a-f]+) primary1 (0x[0-9a-f]+))")))
      << err;
  std::string c0 = m[1], c1 = m[2], p1 = m[3];
  auto one = [&](const char* api, const char* phase, size_t i = 0, size_t n = 1) {
    auto e = select(ev, pid, api, phase);
    EXPECT_EQ(e.size(), n) << api << " " << phase;
    return i < e.size() ? e[i] : json::object();
  };
  EXPECT_EQ(one("cuCtxCreate_v4", "enter")["device"], 0);
  EXPECT_EQ(one("cuCtxCreate_v4", "exit")["ctx"], c0);
  EXPECT_EQ(one("cuCtxCreate_v2", "enter")["device"], 1);
  EXPECT_EQ(one("cuCtxCreate_v2", "exit")["ctx"], c1);
  EXPECT_EQ(one("cuCtxPopCurrent_v2", "exit", 0, 2)["ctx"], c1);
  EXPECT_EQ(one("cuCtxPopCurrent_v2", "exit", 1, 2)["ctx"], p1);
  for (size_t i = 0; i < 2; i++) {  // the program's own retain, then the runtime's
    EXPECT_EQ(one("cuDevicePrimaryCtxRetain", "enter", i, 2)["device"], 1);
    EXPECT_EQ(one("cuDevicePrimaryCtxRetain", "exit", i, 2)["ctx"], p1);
  }
  EXPECT_EQ(one("cuCtxPushCurrent_v2", "enter")["ctx"], p1);
  EXPECT_EQ(one("cuCtxDestroy_v2", "enter")["ctx"], c1);
  EXPECT_EQ(one("cuCtxDestroy_v2", "exit")["ret_name"], "CUDA_SUCCESS");
  EXPECT_EQ(one("cuDevicePrimaryCtxReset_v2", "enter")["device"], 1);
  EXPECT_EQ(one("cudaSetDevice", "enter")["device"], 1);
  EXPECT_EQ(one("cuCtxSetCurrent", "enter")["ctx"], p1);
  EXPECT_EQ(one("cuCtxSetCurrent", "enter")["layer"], "driver");
}

// The real libcudart without a GPU: cudaDeviceReset is traced, and fails as every call does.
TEST(TraceRealCudart, DeviceReset) {
  pid_t pid;
  auto ev = trace_workload({}, {CUDA_FIXTURE_DIR "/ctx_reset"}, &pid);
  ASSERT_EQ(select(ev, pid, "cudaDeviceReset", "enter").size(), 1u);
  auto ex = select(ev, pid, "cudaDeviceReset", "exit");
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0]["ret_name"], "cudaErrorInsufficientDriver");
  EXPECT_EQ(ex[0]["layer"], "runtime");
  EXPECT_EQ(select(ev, pid, "cudaMalloc", "enter").size(), 2u);
}

TEST(TraceRealCudart, StaticRuntimeFoundWithoutLib) {
  pid_t pid;
  // The executable defines cudaMalloc & co. itself; it is found in /proc/PID/maps and
  // probed before the delay ends.
  auto ev = trace_workload({}, {calls_static(), "2", "5", "1500"}, &pid);
  auto mallocs = select(ev, pid, "cudaMalloc", "enter");
  ASSERT_EQ(mallocs.size(), 2u);
  EXPECT_EQ(mallocs[1]["size"], 2000);
  auto launches = select(ev, pid, "cudaLaunchKernel", "enter");
  ASSERT_EQ(launches.size(), 5u);
  EXPECT_EQ(launches[0]["grid"], json::array({11, 22, 33}));
  EXPECT_EQ(launches[0]["block"], json::array({4, 5, 6}));
  for (auto& e : select(ev, pid, "cudaMalloc", "exit")) EXPECT_EQ(e["ret_name"], "cudaErrorInsufficientDriver");
}

TEST(TraceStandin, SuccessPathsOneEventPerLayer) {
  pid_t pid;
  auto ev = trace_workload({"--lib", standin_rt(), "--lib", standin_drv()}, {standin_app(), "calls", "3", "2"}, &pid);

  auto rt_alloc = select(ev, pid, "cudaMalloc", "exit", "runtime");
  auto drv_alloc = select(ev, pid, "cuMemAlloc_v2", "exit", "driver");
  ASSERT_EQ(select(ev, pid, "cudaMalloc", "enter").size(), 3u);
  ASSERT_EQ(rt_alloc.size(), 3u);
  ASSERT_EQ(drv_alloc.size(), 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(rt_alloc[i]["ret_name"], "cudaSuccess");
    EXPECT_EQ(drv_alloc[i]["ret_name"], "CUDA_SUCCESS");
    EXPECT_EQ(rt_alloc[i]["ptr"], drv_alloc[i]["ptr"]) << "runtime and driver saw the same allocation";
    EXPECT_NE(rt_alloc[i]["ptr"], "0x0");
    EXPECT_EQ(rt_alloc[i]["tid"], drv_alloc[i]["tid"]);
  }
  EXPECT_EQ(select(ev, pid, "cuMemAlloc_v2", "enter")[2]["size"], 3000);

  auto stream = select(ev, pid, "cudaStreamCreate", "exit");
  ASSERT_EQ(stream.size(), 1u);
  ASSERT_TRUE(stream[0].contains("stream"));
  auto rt_launch = select(ev, pid, "cudaLaunchKernel", "enter");
  auto drv_launch = select(ev, pid, "cuLaunchKernel", "enter");
  ASSERT_EQ(rt_launch.size(), 2u);
  ASSERT_EQ(drv_launch.size(), 2u);
  for (auto* v : {&rt_launch, &drv_launch}) {
    for (auto& e : *v) {
      EXPECT_EQ(e["grid"], json::array({11, 22, 33}));
      EXPECT_EQ(e["block"], json::array({4, 5, 6}));
      EXPECT_EQ(e["shared_mem"], 128);
      EXPECT_EQ(e["stream"], stream[0]["stream"]);
      EXPECT_EQ(e["func"], "0x1234");
      EXPECT_EQ(e["captured"], false);
    }
  }
  auto htod = select(ev, pid, "cuMemcpyHtoD_v2", "enter");
  ASSERT_EQ(htod.size(), 1u);
  EXPECT_EQ(htod[0]["kind"], "cudaMemcpyHostToDevice");
  EXPECT_EQ(htod[0]["size"], 8192);
  auto dtoh = select(ev, pid, "cuMemcpyDtoH_v2", "enter");
  ASSERT_EQ(dtoh.size(), 1u);
  EXPECT_EQ(dtoh[0]["size"], 12288);
  EXPECT_EQ(select(ev, pid, "cudaMemcpy", "enter").size(), 5u);
  EXPECT_EQ(select(ev, pid, "cuCtxSynchronize", "exit").size(), 1u);
  EXPECT_EQ(select(ev, pid, "cudaFree", "enter").size(), 3u);
  EXPECT_EQ(select(ev, pid, "cuMemFree_v2", "enter").size(), 3u);
  for (auto& e : select(ev, pid, "", "")) {
    std::string api = e["api"];
    EXPECT_EQ(e["layer"], api.rfind("cuda", 0) == 0 ? "runtime" : "driver") << api;
  }
}

TEST(TraceStandin, LaunchConfigStructsAndClusters) {
  pid_t pid;
  auto ev = trace_workload({"--lib", standin_rt(), "--lib", standin_drv()}, {standin_app(), "launch_ex"}, &pid);
  auto rt = select(ev, pid, "cudaLaunchKernelExC", "enter");
  ASSERT_EQ(rt.size(), 1u);
  expect_launch(rt[0], {8, 4, 2}, {32, 2, 1}, 4096, "0x5000", {2, 1, 1}, "0x1234");
  auto drv = select(ev, pid, "cuLaunchKernelEx", "enter");
  ASSERT_EQ(drv.size(), 2u);
  EXPECT_EQ(drv[0]["grid"], rt[0]["grid"]);  // the runtime's own call into the driver
  EXPECT_EQ(drv[0]["cluster"], json::array({2, 1, 1}));
  EXPECT_EQ(drv[0]["shared_mem"], 4096);
  expect_launch(drv[1], {3, 2, 1}, {64, 1, 1}, 2048, "0x6000", {1, 2, 1}, "0x5678");
  for (auto& e : select(ev, pid, "", "exit")) EXPECT_EQ(e["ret"], 0);
}

TEST(TraceStandin, LaunchesDuringCaptureAreMarked) {
  pid_t pid;
  auto ev = trace_workload({"--lib", standin_rt(), "--lib", standin_drv()}, {standin_app(), "capture"}, &pid);
  for (const char* api : {"cudaLaunchKernel", "cuLaunchKernel"}) {
    auto l = select(ev, pid, api, "enter");
    ASSERT_EQ(l.size(), 4u) << api;
    for (int i = 0; i < 3; i++) EXPECT_EQ(l[i]["captured"], true) << api << i;
    EXPECT_EQ(l[3]["captured"], false) << api;
    EXPECT_EQ(l[3]["grid"], json::array({2, 1, 1}));
  }
  EXPECT_EQ(select(ev, pid, "cudaGraphLaunch", "enter").size(), 2u);
  EXPECT_EQ(select(ev, pid, "cuGraphLaunch", "enter").size(), 2u);
  auto end = select(ev, pid, "cudaStreamEndCapture", "exit");
  ASSERT_EQ(end.size(), 1u);
  ASSERT_TRUE(end[0].contains("graph"));
  auto inst = select(ev, pid, "cudaGraphInstantiate", "enter");
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_EQ(inst[0]["graph"], end[0]["graph"]);
  auto exec = select(ev, pid, "cudaGraphInstantiate", "exit");
  ASSERT_EQ(exec.size(), 1u);
  EXPECT_EQ(select(ev, pid, "cudaGraphLaunch", "enter")[0]["graph"], exec[0]["graph"]);
}

TEST(TraceDiscovery, LateDlopenIsProbedBeforeFirstCall) {
  pid_t pid;
  auto ev = trace_workload({}, {STANDIN_DLOPEN, standin_rt(), "1200"}, &pid);
  auto m = select(ev, pid, "cudaMalloc", "enter");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["size"], 777);
  auto d = select(ev, pid, "cuMemAlloc_v2", "exit");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["ret_name"], "CUDA_SUCCESS");
  EXPECT_EQ(select(ev, pid, "cudaFree", "exit").size(), 1u);
}

TEST(TraceDiscovery, CopiedRuntimeInFreshDirectory) {
  auto dir = fs::path("/tmp") / ("gs-venv-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(cuda_runtime_lib(), dir / "libcudart.so.13", fs::copy_options::overwrite_existing);
  pid_t pid;
  Trace t({});
  Process w({calls_shared(), "1", "2", "1500"}, {"LD_LIBRARY_PATH=" + dir.string()});
  pid = ready_pid(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string maps = run({"cat", "/proc/" + std::to_string(pid) + "/maps"}).out;
  EXPECT_NE(maps.find((dir / "libcudart.so.13").string()), std::string::npos) << "the copy must be the one in use";
  ASSERT_EQ(w.wait(), 0);
  auto ev = t.stop();
  EXPECT_EQ(select(ev, pid, "cudaMalloc", "enter").size(), 1u);
  EXPECT_EQ(select(ev, pid, "cudaLaunchKernel", "enter").size(), 2u);
  fs::remove_all(dir);
}

TEST(TraceDiscovery, ProcessInOwnMountNamespace) {
  // The library exists only inside the process's private tmpfs; gpuscope reaches it
  // through /proc/PID/root.
  std::string dir = "/tmp/gs-mntns-" + std::to_string(getpid());
  fs::create_directories(dir);
  std::string script = "mount -t tmpfs none " + dir + " && cp " + cuda_runtime_lib() + " " + dir +
                       "/ && LD_LIBRARY_PATH=" + dir + " exec " + calls_shared() + " 2 1 1500";
  Trace t({});
  Process w({"unshare", "-m", "--propagation", "private", "sh", "-c", script});
  pid_t pid = ready_pid(w);
  ASSERT_EQ(w.wait(), 0) << w.err();
  auto ev = t.stop();
  EXPECT_FALSE(fs::exists(dir + "/libcudart.so.13")) << "must not be visible outside the namespace";
  auto m = select(ev, pid, "cudaMalloc", "enter");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["size"], 1000);
  fs::remove_all(dir);
}

namespace {
// The first byte of cudaGetDevice as process `pid` sees it: 0xCC where a uprobe is planted.
int first_byte_of(pid_t pid, const std::string& lib, const std::string& sym) {
  auto syms = gpuscope::ElfSymbols::read(lib);
  const auto* s = syms.find(sym);
  if (!s) return -1;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  uint64_t base = 0;
  while (std::getline(maps, line)) {
    if (line.find(fs::path(lib).filename().string()) == std::string::npos) continue;
    unsigned long start, off;
    if (sscanf(line.c_str(), "%lx-%*x %*s %lx", &start, &off) == 2 && off == 0) {
      base = start;
      break;
    }
  }
  if (!base) return -1;
  int fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY);
  unsigned char b = 0;
  ssize_t n = pread(fd, &b, 1, static_cast<off_t>(base + s->vaddr));
  close(fd);
  return n == 1 ? b : -1;
}
}  // namespace

TEST(TraceFilters, PidFilterPlantsNoBreakpointInOtherProcesses) {
  Process a({standin_app(), "--delay-ms", "1500", "loop", "1500"});
  Process b({standin_app(), "--delay-ms", "1500", "loop", "1500"});
  pid_t pa = ready_pid(a), pb = ready_pid(b);
  Trace t({"-p", std::to_string(pa), "--lib", standin_rt()});
  EXPECT_EQ(first_byte_of(pa, standin_rt(), "cudaGetDevice"), 0xCC);
  int other = first_byte_of(pb, standin_rt(), "cudaGetDevice");
  EXPECT_NE(other, -1);
  EXPECT_NE(other, 0xCC) << "the unfiltered process must take no uprobe trap";
  ASSERT_EQ(a.wait(), 0);
  ASSERT_EQ(b.wait(), 0);
  auto ev = t.stop();
  EXPECT_GT(select(ev, pa, "cudaGetDevice", "enter").size(), 100u);
  EXPECT_EQ(select(ev, pb, "", "").size(), 0u);
  for (auto& e : select(ev, 0, "", "")) EXPECT_EQ(e["pid"], pa);
}

TEST(TraceFilters, CommApiAndLayer) {
  {
    Trace t({"-c", "calls_shared", "--lib", standin_rt(), "--lib", standin_drv()});
    Process x({calls_shared(), "1", "1"});
    Process y({standin_app(), "calls", "1", "1"});
    pid_t px = ready_pid(x), py = ready_pid(y);
    x.wait();
    y.wait();
    auto ev = t.stop();
    EXPECT_EQ(select(ev, px, "cudaMalloc", "enter").size(), 1u);
    EXPECT_EQ(select(ev, py, "", "").size(), 0u);
    for (auto& e : select(ev, 0, "", "")) EXPECT_EQ(e["comm"], "calls_shared");
  }
  {
    pid_t pid;
    auto ev = trace_workload({"--api", "cudaMalloc,cuLaunchKernel", "--lib", standin_rt(), "--lib", standin_drv()},
                             {standin_app(), "calls", "2", "3"}, &pid);
    std::set<std::string> apis;
    for (auto& e : select(ev, pid, "", "")) apis.insert(e["api"]);
    EXPECT_EQ(apis, (std::set<std::string>{"cudaMalloc", "cuLaunchKernel"}));
    EXPECT_EQ(select(ev, pid, "cudaMalloc", "enter").size(), 2u);
    EXPECT_EQ(select(ev, pid, "cuLaunchKernel", "enter").size(), 3u);
  }
  {
    pid_t pid;
    auto ev = trace_workload({"--layer", "driver", "--lib", standin_rt(), "--lib", standin_drv()},
                             {standin_app(), "calls", "2", "1"}, &pid);
    auto all = select(ev, pid, "", "");
    ASSERT_FALSE(all.empty());
    for (auto& e : all) EXPECT_EQ(e["layer"], "driver");
    EXPECT_EQ(select(ev, pid, "cuMemAlloc_v2", "enter").size(), 2u);
  }
}

TEST(TraceFilters, EntryOnlyMode) {
  pid_t pid;
  auto ev = trace_workload({"-r", "--lib", standin_rt(), "--lib", standin_drv()}, {standin_app(), "capture"}, &pid);
  EXPECT_EQ(select(ev, pid, "", "exit").size(), 0u);
  auto l = select(ev, pid, "cudaLaunchKernel", "enter");
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0]["captured"], true);
  EXPECT_EQ(l[3]["captured"], false);
}

TEST(TraceBadInput, OneLineExitTwoNothingLeftBehind) {
  BpfLeftovers left;
  std::vector<std::vector<std::string>> cases = {
      {gpuscope_bin(), "trace", "--bogus"},
      {gpuscope_bin(), "trace", "-p", "999999"},
      {gpuscope_bin(), "trace", "--lib", "/etc/passwd"},
      {gpuscope_bin(), "trace", "--lib", "/bin/true"},
      {gpuscope_bin(), "trace", "--lib", "/nonexistent/libcudart.so"},
      {gpuscope_bin(), "trace", "--duration", "-1"},
      {gpuscope_bin(), "trace", "--layer", "gpu"},
      {gpuscope_bin(), "trace", "--api", "cudaNotAThing"},
      {gpuscope_bin(), "trace", "--ringbuf-kb", "12"},
      {gpuscope_bin(), "frobnicate"},
      {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
       gpuscope_bin(), "trace", "-d", "1"},
  };
  for (auto& argv : cases) {
    auto r = run(argv);
    std::string what = argv.back();
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    EXPECT_EQ(r.err.rfind("gpuscope: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "") << what;
  }
  EXPECT_EQ(left.list(), "");
}

TEST(TraceLost, SmallRingBufferCountsEveryDrop) {
  const int calls = 20000;
  Trace t({"--lib", standin_rt(), "--api", "cudaGetDevice", "--ringbuf-kb", "4"});
  Process w({standin_app(), "--delay-ms", "300", "burst", std::to_string(calls)});
  pid_t pid = ready_pid(w);
  // A stopped consumer guarantees the burst overflows the 4 KiB buffer.
  t.proc().signal(SIGSTOP);
  ASSERT_EQ(w.wait(), 0);
  t.proc().signal(SIGCONT);
  auto ev = t.stop();
  const auto& s = summary_of(ev);
  ASSERT_FALSE(s.is_null());
  uint64_t delivered = select(ev, pid, "cudaGetDevice", "").size();
  EXPECT_EQ(s["events"].get<uint64_t>(), delivered);
  EXPECT_GT(s["lost"].get<uint64_t>(), 0u);
  EXPECT_EQ(delivered + s["lost"].get<uint64_t>(), 2u * calls);
}

TEST(TraceOutput, TableColumnsAndDetails) {
  Process t({gpuscope_bin(), "trace", "-t", "--lib", standin_rt(), "--lib", standin_drv()});
  ASSERT_TRUE(t.wait_for("tracing", 30, true));
  Process w({standin_app(), "calls", "1", "1"});
  pid_t pid = ready_pid(w);
  w.wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  t.signal(SIGINT);
  ASSERT_EQ(t.wait(), 0);
  std::istringstream in(t.out());
  std::string header;
  std::getline(in, header);
  std::istringstream hs(header);
  std::vector<std::string> cols{std::istream_iterator<std::string>(hs), {}};
  // The container columns: POD and NAMESPACE only where the kubelet's pod directory is readable.
  gpuscope::ContainerResolver resolver;
  std::vector<std::string> want{"COMM", "PID", "TID", "CONTAINER"};
  if (resolver.kubernetes_readable()) want.insert(want.end(), {"POD", "NAMESPACE"});
  const size_t api_at = want.size() + 1;
  want.insert(want.end(), {"LAYER", "API", "PHASE", "DETAILS"});
  EXPECT_EQ(cols, want);
  // The workload runs where this test does: the same container, or the host.
  const std::string where = resolver.resolve(getpid()).display();
  std::string out = t.out();
  std::string p = std::to_string(pid);
  EXPECT_NE(out.find("standin_app"), std::string::npos);
  bool saw_malloc = false, saw_exit = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(ls), {}};
    if (f.size() < api_at + 2 || f[1] != p) continue;
    EXPECT_EQ(f[3], where) << line;
    if (f[api_at] == "cudaMalloc" && f[api_at + 1] == "enter") saw_malloc = line.find("size=1000") != std::string::npos;
    if (f[api_at] == "cuLaunchKernel" && f[api_at + 1] == "exit")
      saw_exit = line.find("ret=CUDA_SUCCESS") != std::string::npos;
  }
  EXPECT_TRUE(saw_malloc) << out;
  EXPECT_TRUE(saw_exit) << out;
  EXPECT_NE(out.find("events delivered"), std::string::npos);
}

namespace {
// Every launch names its kernel (`kernel`), also for handles handed out before trace started:
// the runtime's from nvcc's handle variables, the module-loaded one from the driver's object.
void expect_launches_named_after_start(std::vector<std::string> env) {
  std::string app = std::string(KERNELS_FIXTURE_DIR) + "/standin/kernels_app";
  env.push_back("KERNELS_APP_DRIVER_MODULE=1");
  Process w({app, "pre"}, env);
  pid_t pid = ready_pid(w);
  Trace t({"-p", std::to_string(pid)});
  w.signal(SIGUSR1);
  ASSERT_TRUE(w.wait_for("launched", 20)) << w.err();
  // Driver objects are read while the process runs: trace reads its events at least every 100 ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  w.signal(SIGUSR1);
  EXPECT_EQ(w.wait(20), 0) << w.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::map<std::pair<std::string, std::string>, int> seen;  // (api, kernel) -> launches
  for (auto& e : t.stop()) {
    if (e.value("phase", "") != "enter" || !e.contains("func")) continue;
    EXPECT_TRUE(e.contains("kernel")) << e.dump();
    seen[{e["api"], e.value("kernel", "")}]++;
  }
  using K = std::pair<std::string, std::string>;
  std::map<K, int> want{{{"cudaLaunchKernel", "alpha_kernel(float*)"}, 37},
                        {{"cudaLaunchKernel", "void beta_kernel<float>(float*)"}, 13},
                        {{"cuLaunchKernel", "alpha_kernel(float*)"}, 37},
                        {{"cuLaunchKernel", "void beta_kernel<float>(float*)"}, 13},
                        {{"cuLaunchKernel", "gemm_drv_kernel"}, 7},
                        {{"cudaLaunchCooperativeKernel", "coop_kernel(float*)"}, 3},
                        {{"cuLaunchCooperativeKernel", "coop_kernel(float*)"}, 3},
                        {{"cudaLaunchHostFunc", "[host fn] host_cb(void*)"}, 2},
                        {{"cuLaunchHostFunc", "[host fn] host_cb(void*)"}, 2}};
  EXPECT_EQ(seen, want);
}
}  // namespace

TEST(TraceStandin, LaunchesCarryKernelNamesAttachAfterStart) { expect_launches_named_after_start({}); }

// The first launch trace formats is the module-loaded kernel's (a model's first GEMM, from
// cuBLASLt): nothing is known yet to read the driver's object with. Its later launches are
// named once the runtime's launches have taught the layout (they went unnamed for a second).
TEST(TraceStandin, LaunchesCarryKernelNamesWhenADriverLaunchComesFirst) {
  expect_launches_named_after_start({"KERNELS_APP_DRIVER_FIRST=1"});
}

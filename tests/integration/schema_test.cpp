// One schema for every JSON line of every subcommand (docs/json.md): each subcommand's --json
// against real processes, and every line checked for its head (type, ts_ns on CLOCK_REALTIME
// within the run) and, where it names a process, pid, comm and the container fields, with the
// values of the workload process.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bridge_fixture.h"
#include "core/containers.h"
#include "harness.h"

using namespace gstest;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

uint64_t realtime_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// What a line about the workload must say: its comm and its container's fields, as the
// resolver finds them while it runs ("host" outside a container).
struct Expected {
  pid_t pid = 0;
  std::string comm;
  gpuscope::ContainerInfo where;
};
Expected expect(pid_t pid, const std::string& comm) {
  gpuscope::ProcessContainers pc;
  Expected e{pid, comm, pc.of(pid)};
  EXPECT_TRUE(e.where.resolved) << "pid " << pid;
  return e;
}

const char* const kContainerFields[] = {"container", "container_id", "pod", "namespace"};

// Every line parses, has a string type and an integer ts_ns in [t0, t1]; a line with a pid has
// comm and the container fields, those of the workload where it names it. Returns the types
// seen and counts the lines about the workload.
std::set<std::string> check_lines(const std::string& out, uint64_t t0, uint64_t t1, const Expected& w,
                                  size_t* about_workload = nullptr) {
  std::set<std::string> types;
  size_t mine = 0;
  std::istringstream in(out);
  for (std::string text; std::getline(in, text);) {
    json l;
    try {
      l = json::parse(text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << text;
      continue;
    }
    if (!l.is_object() || !l.contains("type") || !l["type"].is_string()) {
      ADD_FAILURE() << "no type: " << text;
      continue;
    }
    types.insert(l["type"].get<std::string>());
    if (!l.contains("ts_ns") || !l["ts_ns"].is_number_integer()) {
      ADD_FAILURE() << "no integer ts_ns: " << text;
      continue;
    }
    const auto ts = l["ts_ns"].get<uint64_t>();
    EXPECT_GE(ts, t0) << text;
    EXPECT_LE(ts, t1) << text;
    if (!l.contains("pid")) {
      EXPECT_FALSE(l.contains("comm")) << "process fields without a pid: " << text;
      EXPECT_FALSE(l.contains("container")) << "process fields without a pid: " << text;
      continue;
    }
    bool whole = l["pid"].is_number_integer() && l.contains("comm") && l["comm"].is_string();
    for (const char* f : kContainerFields) whole = whole && l.contains(f) && l[f].is_string();
    if (!whole) {
      ADD_FAILURE() << "a pid without comm and the container fields: " << text;
      continue;
    }
    if (l["pid"].get<pid_t>() != w.pid) continue;
    mine++;
    EXPECT_EQ(l["comm"], w.comm) << text;
    EXPECT_EQ(l["container"], w.where.display()) << text;
    EXPECT_EQ(l["container_id"], w.where.container_id) << text;
    EXPECT_EQ(l["pod"], w.where.pod) << text;
    EXPECT_EQ(l["namespace"], w.where.ns) << text;
  }
  if (about_workload) *about_workload = mine;
  return types;
}

std::vector<std::string> standin_libs() {
  return {"--lib", standin_lib_dir() + "/libcuda.so.1", "--lib", standin_lib_dir() + "/libcudart.so.13"};
}

// The stand-in workload under a name of its own, waiting for SIGUSR1 to run `scenario`;
// `gpuscope SUB --json -c NAME --lib ... ARGS` around it, stopped with SIGINT once it has ended.
struct AroundRun {
  Expected w;
  std::string out, err;
  uint64_t t0 = 0, t1 = 0;
};
AroundRun around(const std::string& sub, std::vector<std::string> args, const std::string& started,
                 const std::vector<std::string>& scenario, double settle_s = 0.3) {
  Workload wl("schema-" + sub, "gsschema");
  std::vector<std::string> app{wl.path(), "--wait-usr1", "1"};
  app.insert(app.end(), scenario.begin(), scenario.end());
  Process a(app);
  AroundRun r;
  r.w = expect(ready_pid(a), wl.comm());
  std::vector<std::string> argv{gpuscope_bin(), sub, "--json", "-c", wl.comm()};
  for (auto& s : standin_libs()) argv.push_back(s);
  argv.insert(argv.end(), args.begin(), args.end());
  r.t0 = realtime_now();
  Process g(argv);
  EXPECT_TRUE(g.wait_for(started, 60, true)) << sub << ": " << g.err();
  a.signal(SIGUSR1);
  EXPECT_EQ(a.wait(60), 0) << a.err();
  std::this_thread::sleep_for(std::chrono::duration<double>(settle_s));
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  r.t1 = realtime_now();
  r.out = g.out();
  r.err = g.err();
  return r;
}

bool contains_all(const std::set<std::string>& seen, const std::set<std::string>& want) {
  for (auto& t : want)
    if (!seen.count(t)) return false;
  return true;
}

}  // namespace

TEST(Schema, Trace) {
  auto r = around("trace", {}, "tracing", {"calls", "2", "3"});
  size_t mine = 0;
  auto types = check_lines(r.out, r.t0, r.t1, r.w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"call", "summary"})) << r.out;
  EXPECT_GT(mine, 10u) << r.out;
}

TEST(Schema, Latency) {
  // Intervals while the workload runs name it; the last print, after it ended, names it still.
  auto r = around("latency", {"--per-process", "--interval", "0.2"}, "gpuscope: timing", {"malloc_loop", "600"});
  size_t mine = 0;
  auto types = check_lines(r.out, r.t0, r.t1, r.w, &mine);
  EXPECT_TRUE(contains_all(types, {"latency", "probes"})) << r.out;
  EXPECT_GT(mine, 0u) << r.out;
}

TEST(Schema, Kernels) {
  auto r = around("kernels", {"--interval", "0.2"}, "gpuscope: counting", {"calls", "1", "5"});
  size_t mine = 0;
  auto types = check_lines(r.out, r.t0, r.t1, r.w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"kernel"})) << r.out;
  EXPECT_GT(mine, 0u) << r.out;
}

TEST(Schema, Copies) {
  auto r = around("copies", {"--interval", "0.2"}, "gpuscope: counting copies", {"copies"});
  size_t mine = 0;
  auto types = check_lines(r.out, r.t0, r.t1, r.w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"copy"})) << r.out;
  EXPECT_GE(mine, 7u) << "at least the exited workload's final line of each of its 7 directions: " << r.out;
}

TEST(Schema, Memleak) {
  auto r = around("memleak", {"--interval", "0.2"}, "gpuscope: tracking GPU memory", {"leaks"});
  size_t mine = 0;
  auto types = check_lines(r.out, r.t0, r.t1, r.w, &mine);
  EXPECT_TRUE(contains_all(types, {"summary", "leak", "drops"})) << r.out;
  EXPECT_GT(mine, 5u) << r.out;
}

TEST(Schema, IoctlEventsAndIntervals) {
  // No NVIDIA driver here: a major-195 node opened with O_PATH, whose ioctls fail with EBADF
  // after sys_enter_ioctl has seen them (as in ioctl_test).
  const fs::path dir = fs::temp_directory_path() / ("gstest-schema-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path node = dir / "nvidia7";
  ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0600, makedev(195, 7)), 0) << strerror(errno);
  std::string comm;
  std::getline(std::ifstream("/proc/self/comm"), comm);
  Expected w = expect(getpid(), comm);
  const uint64_t t0 = realtime_now();
  Process g({gpuscope_bin(), "ioctl", "--json", "--events", "--interval", "0.2", "-p", std::to_string(getpid())});
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  int fd = open(node.c_str(), O_PATH);
  ASSERT_GE(fd, 0) << strerror(errno);
  for (int i = 0; i < 3; i++) ioctl(fd, 0xC020462A, nullptr);
  close(fd);
  std::this_thread::sleep_for(500ms);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  const uint64_t t1 = realtime_now();
  fs::remove_all(dir);
  size_t mine = 0;
  auto types = check_lines(g.out(), t0, t1, w, &mine);
  EXPECT_TRUE(contains_all(types, {"ioctl_event", "ioctl", "open"})) << g.out();
  EXPECT_GE(mine, 5u) << g.out();
}

TEST(Schema, Uvm) {
  if (access("/sys/bus/event_source/devices/kprobe/type", F_OK) != 0)
    GTEST_SKIP() << "no kprobes on this host: uvm cannot run (Uvm.UnavailableSaysWhyInOneLineAndChangesNothing)";
  const uint64_t t0 = realtime_now();
  auto r = run({gpuscope_bin(), "uvm", "--json", "-d", "1", "--interval", "0.2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto types = check_lines(r.out, t0, realtime_now(), Expected{});
  EXPECT_TRUE(types.count("uvm")) << r.out;
}

TEST(Schema, NcclRanks) {
  // Two ranks of one communicator on the NCCL stand-in; rank 1 waits for rank 0's id meanwhile.
  const fs::path dir = fs::temp_directory_path() / ("gstest-schema-nccl-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string id = (dir / "id").string();
  auto rank = [&](int r) {
    return std::vector<std::string>{NCCL_RANK,   "--ranks", "2",       "--rank", std::to_string(r),
                                    "--id-file", id,        "--iters", "3"};
  };
  Process r1(rank(1));
  Expected w = expect(ready_pid(r1), "nccl_rank");
  const uint64_t t0 = realtime_now();
  Process g({gpuscope_bin(), "nccl", "--json", "--interval", "0.2"});
  ASSERT_TRUE(g.wait_for("Ctrl-C to end", 30, true)) << g.err();
  Process r0(rank(0));
  EXPECT_EQ(r0.wait(30), 0) << r0.err();
  EXPECT_EQ(r1.wait(30), 0) << r1.err();
  std::this_thread::sleep_for(500ms);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  fs::remove_all(dir);
  size_t mine = 0;
  auto types = check_lines(g.out(), t0, realtime_now(), w, &mine);
  EXPECT_TRUE(contains_all(types, {"collective", "straggler", "comm_end", "summary"})) << g.out();
  EXPECT_GE(mine, 6u) << g.out();
}

TEST(Schema, StarvationAndBridge) {
  PinDir d;
  StandinFile f;
  Process fx({STARV_FIXTURE, "burn"});
  const pid_t pid = ready_pid(fx);
  ASSERT_GT(pid, 0);
  Expected w = expect(pid, "starv_fixture");
  f.write(fmt::format("device 0 util 0\nprocess 0 {} 1048576\n", pid));
  const uint64_t t0 = realtime_now();
  Process bridge(
      {gpuscope_bin(), "bridge", "--json", "--nvml", NVML_STANDIN, "--pin-dir", d.path, "--poll-interval-ms", "100"},
      {f.env()});
  ASSERT_TRUE(bridge.wait_for("bridge publishing", 10, true)) << bridge.err();
  Process s(
      {gpuscope_bin(), "starvation", "--json", "--pin-dir", d.path, "-p", std::to_string(pid), "--min-idle-ms", "200"});
  ASSERT_TRUE(s.wait_for("watching for GPU starvation", 20, true)) << s.err();
  std::this_thread::sleep_for(2200ms);
  s.signal(SIGINT);
  EXPECT_EQ(s.wait(30), 0) << s.err();
  bridge.signal(SIGINT);
  EXPECT_EQ(bridge.wait(30), 0) << bridge.err();
  const uint64_t t1 = realtime_now();
  fx.signal(SIGKILL);
  size_t mine = 0;
  auto types = check_lines(s.out(), t0, t1, w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"starvation"})) << s.out();
  EXPECT_GT(mine, 0u) << s.out();
  types = check_lines(bridge.out(), t0, t1, w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"device", "process", "meta"})) << bridge.out();
  EXPECT_GT(mine, 0u) << bridge.out();
}

TEST(Schema, FramesOfAVulkanRendererOnLavapipe) {
  Process app({std::string(GRAPHICS_FIXTURE_DIR) + "/vk_frames", "--frames", "12", "--slow-every", "4", "--slow-ms",
               "30", "--frame-ms", "2"});
  Expected w = expect(ready_pid(app), "vk_frames");
  const uint64_t t0 = realtime_now();
  // At the default interval (1 s) the frames of a run this short have settled when its exit is seen.
  Process g({gpuscope_bin(), "frames", "-p", std::to_string(w.pid), "--json", "--every-frame", "--no-cuda"});
  ASSERT_TRUE(g.wait_for("gpuscope: watching frames", 30, true)) << g.err();
  app.signal(SIGUSR1);
  EXPECT_EQ(app.wait(60), 0) << app.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  const uint64_t t1 = realtime_now();
  size_t mine = 0;
  auto types = check_lines(g.out(), t0, t1, w, &mine);
  EXPECT_EQ(types, (std::set<std::string>{"frame", "frames", "slow_frame", "histogram", "queue", "memory", "summary"}))
      << g.out();
  EXPECT_GT(mine, 12u) << g.out();
  // A frame's ts_ns is its start, start_boot_ns the same instant on CLOCK_BOOTTIME.
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "frame") {
      EXPECT_FALSE(l.contains("start_ns")) << l.dump();
      EXPECT_GT(l["start_boot_ns"].get<uint64_t>(), 0u) << l.dump();
      EXPECT_LT(l["start_boot_ns"].get<uint64_t>(), l["ts_ns"].get<uint64_t>()) << l.dump();
    }
}

TEST(Schema, FramesTableHasTheContainerColumn) {
  Process app({std::string(GRAPHICS_FIXTURE_DIR) + "/vk_frames", "--frames", "6", "--frame-ms", "2"});
  Expected w = expect(ready_pid(app), "vk_frames");
  Process g({gpuscope_bin(), "frames", "-p", std::to_string(w.pid), "--no-cuda"});
  ASSERT_TRUE(g.wait_for("gpuscope: watching frames", 30, true)) << g.err();
  app.signal(SIGUSR1);
  EXPECT_EQ(app.wait(60), 0) << app.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  const std::string out = g.out();
  EXPECT_NE(out.find("PID COMM             CONTAINER "), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(fmt::format("\\b{} vk_frames\\s+{}\\s", w.pid, w.where.display()))))
      << out;
}

TEST(Schema, TimelineSummary) {
  const std::string file = fs::temp_directory_path() / ("gstest-schema-" + std::to_string(getpid()) + ".json");
  const uint64_t t0 = realtime_now();
  auto r = run({gpuscope_bin(), "timeline", "--json", "-d", "0.5", "-c", "gsschema-none", "-o", file});
  const uint64_t t1 = realtime_now();
  fs::remove(file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(check_lines(r.out, t0, t1, Expected{}), (std::set<std::string>{"summary"})) << r.out;
}

TEST(Schema, DoctorNamesTheProcessesItFoundLibrariesIn) {
  Workload wl("schema-doctor", "gsschema");
  Process a({wl.path(), "--wait-usr1", "1", "calls", "0", "0"});
  ready_pid(a);
  const uint64_t t0 = realtime_now();
  auto r = run({gpuscope_bin(), "doctor", "--json"});
  const uint64_t t1 = realtime_now();
  a.signal(SIGUSR1);
  EXPECT_EQ(a.wait(30), 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(check_lines(r.out, t0, t1, Expected{}), (std::set<std::string>{"check", "library", "subcommand"}));
  // A library is listed with the first process found mapping it (the workload holds the
  // stand-in's; other processes may hold it too): each such line names that process.
  size_t with_pid = 0;
  for (auto& l : parse_lines(r.out)) {
    if (l["type"] != "library" || !l.contains("pid")) continue;
    with_pid++;
    const auto pid = l["pid"].get<pid_t>();
    std::string comm;
    if (!std::getline(std::ifstream(fmt::format("/proc/{}/comm", pid)), comm)) continue;  // gone since
    Expected w = expect(pid, comm);
    check_lines(l.dump(), t0, t1, w);
  }
  EXPECT_GE(with_pid, 2u) << "the stand-in's libcudart and libcuda, mapped by the workload:\n" << r.out;
}

TEST(Schema, RunSummaryNamesTheCommand) {
  const uint64_t t0 = realtime_now();
  auto r = run({gpuscope_bin(), "run", "--json", "--", "sh", "-c", "exit 3"});
  const uint64_t t1 = realtime_now();
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto lines = parse_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  // The command ran in gpuscope's cgroup, so in this test's container.
  Expected w = expect(getpid(), "sh");
  w.pid = lines[0]["pid"].get<pid_t>();
  size_t mine = 0;
  EXPECT_EQ(check_lines(r.out, t0, t1, w, &mine), (std::set<std::string>{"summary"}));
  EXPECT_EQ(mine, 1u);
  EXPECT_EQ(lines[0]["exit_code"], 3);
}

// The agent's lines, and its container label of a host process the same as the JSON field. The
// process has gone before the agent's first refresh (--interval 3): its container comes from the
// cgroup id its launches carried, not from /proc.
TEST(Schema, AgentLinesAndItsContainerLabel) {
  Workload wl("schema-agent", "gsschema");
  Process a({wl.path(), "--wait-usr1", "1", "calls", "1", "3"});
  Expected w = expect(ready_pid(a), wl.comm());
  const uint64_t t0 = realtime_now();
  Agent agent(wl, {"--collectors", "kernels", "--interval", "3"});
  a.signal(SIGUSR1);
  EXPECT_EQ(a.wait(30), 0);
  const std::string pid = std::to_string(w.pid);
  std::string m = agent.until([&](const std::string& t) {
    return !where(samples(t, "gpuscope_kernel_launches_total"), {{"pid", pid}}).empty();
  });
  auto s = where(samples(m, "gpuscope_kernel_launches_total"), {{"pid", pid}});
  ASSERT_FALSE(s.empty()) << m;
  EXPECT_EQ(s[0].labels["container"], w.where.display());
  EXPECT_EQ(s[0].labels["comm"], w.comm);
  ASSERT_EQ(agent.stop(), 0) << agent.proc().err();
  const uint64_t t1 = realtime_now();
  EXPECT_EQ(check_lines(agent.proc().out(), t0, t1, w), (std::set<std::string>{"agent", "agent_end"}))
      << agent.proc().out();
}

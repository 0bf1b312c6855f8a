// gpuscope frames against real renderers: Vulkan on lavapipe (offscreen: fenced submits end the
// frames), OpenGL ES on llvmpipe through EGL's surfaceless platform (pbuffer swaps), OpenGL through
// GLX on an Xvfb window (glXSwapBuffers), the real libcudart's launches inside Vulkan frames,
// swapchain presents through the stand-in loader, and a real swapchain on lavapipe and GLX whose
// functions come from vkGetDeviceProcAddr and glXGetProcAddressARB.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

std::string fixture(const std::string& name) { return std::string(GRAPHICS_FIXTURE_DIR) + "/" + name; }

struct FramesRun {
  std::vector<json> lines;
  std::string err;
  std::vector<json> of(const std::string& type) const {
    std::vector<json> v;
    for (auto& l : lines)
      if (l.value("type", "") == type) v.push_back(l);
    return v;
  }
};

// The app waits for SIGUSR1 once ready; gpuscope frames -p follows it and ends when it does.
FramesRun frames_of(const std::vector<std::string>& app_argv, std::vector<std::string> extra = {},
                    const std::vector<std::string>& app_env = {}) {
  Process app(app_argv, app_env);
  pid_t pid = ready_pid(app);
  std::vector<std::string> argv{gpuscope_bin(), "frames",        "-p",        std::to_string(pid),
                                "--json",       "--every-frame", "--slowest", "10"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process g(argv);
  EXPECT_TRUE(g.wait_for("gpuscope: watching frames", 30, true)) << g.err();
  app.signal(SIGUSR1);
  EXPECT_EQ(app.wait(60), 0) << app.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  return {parse_lines(g.out()), g.err()};
}

// The exact nearest-rank value at q of durations.
uint64_t nearest_rank(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()) - 1e-9));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// A line's p50/p95/p99 within 1 % of the exact nearest-rank ones of the durations, its max exact.
void expect_percentiles_of(const json& l, const std::vector<uint64_t>& durations) {
  ASSERT_FALSE(durations.empty()) << l.dump();
  for (auto [q, key] : {std::pair{0.50, "p50_ns"}, {0.95, "p95_ns"}, {0.99, "p99_ns"}}) {
    const auto want = static_cast<double>(nearest_rank(durations, q));
    EXPECT_NEAR(l.at(key).get<double>(), want, 0.01 * want) << key << " of " << l.dump();
  }
  EXPECT_EQ(l.at("max_ns").get<uint64_t>(), *std::max_element(durations.begin(), durations.end())) << l.dump();
}

// The percentiles of each interval's frames (its "frames" line follows them) and of the whole
// run (the "histogram" line at the process's end), against the frames' own durations.
void expect_percentiles(const FramesRun& r) {
  std::map<std::pair<uint64_t, std::string>, std::vector<uint64_t>> interval, run;
  size_t intervals = 0, runs = 0;
  for (auto& l : r.lines) {
    const std::string type = l.value("type", "");
    if (type != "frame" && type != "frames" && type != "histogram") continue;
    const auto key = std::pair{l["pid"].get<uint64_t>(), l["api"].get<std::string>()};
    if (type == "frame") {
      interval[key].push_back(l["duration_ns"].get<uint64_t>());
      run[key].push_back(l["duration_ns"].get<uint64_t>());
    } else if (type == "frames") {
      expect_percentiles_of(l, interval[key]);
      interval.erase(key);
      intervals++;
    } else {
      expect_percentiles_of(l, run[key]);
      runs++;
    }
  }
  EXPECT_GE(intervals, 1u);
  EXPECT_EQ(runs, 1u) << r.err;
}

// Every frame numbered 1..n once, and the slow ones (number % every == 0) slow.
void expect_frames(const FramesRun& r, const std::string& api, unsigned n, unsigned every, double slow_ms) {
  auto frames = r.of("frame");
  ASSERT_EQ(frames.size(), n) << r.err;
  for (unsigned i = 0; i < n; i++) {
    const json& f = frames[i];
    EXPECT_EQ(f["number"], i + 1);
    EXPECT_EQ(f["api"], api);
    const double ms = f["duration_ns"].get<double>() / 1e6;
    if ((i + 1) % every == 0)
      EXPECT_GE(ms, slow_ms) << f.dump();
    else
      EXPECT_LT(ms, slow_ms) << f.dump();
  }
  // The interval lines account for every frame; the slowest frames they list are the slow ones.
  uint64_t counted = 0;
  for (auto& l : r.of("frames")) counted += l["frames"].get<uint64_t>();
  EXPECT_EQ(counted, n);
  // With --slowest 10, every slow frame is among the slowest of its interval.
  std::set<unsigned> listed;
  for (auto& s : r.of("slow_frame")) listed.insert(s["number"].get<unsigned>());
  for (unsigned i = every; i <= n; i += every) EXPECT_TRUE(listed.count(i)) << "slow frame " << i << " not listed";
  auto summary = r.of("summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["lost_ringbuf"], 0);
  EXPECT_EQ(summary[0]["lost_state"], 0);
  EXPECT_EQ(summary[0]["content_dropped"], 0);
  expect_percentiles(r);
}

}  // namespace

TEST(Graphics, VulkanOffscreenFramesTheirSubmitsWaitsAndTheLeakAtExit) {
  FramesRun r = frames_of({fixture("vk_frames"), "--frames", "30", "--slow-every", "10", "--slow-ms", "60",
                           "--frame-ms", "2", "--cmd-buffers", "3"},
                          {"--no-cuda"});
  expect_frames(r, "vulkan", 30, 10, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["submits"], 2) << f.dump();
    EXPECT_EQ(f["cmd_buffers"], 4) << f.dump();  // 3 in the fenced submit, 1 in the other
    EXPECT_EQ(f["waits"], 2) << f.dump();
    EXPECT_EQ(f["calls"], json({{"vkQueueSubmit", 2}, {"vkQueueWaitIdle", 1}, {"vkWaitForFences", 1}})) << f.dump();
    EXPECT_EQ(f["cuda_calls"], 0);
  }
  auto mem = r.of("memory");
  ASSERT_EQ(mem.size(), 1u) << r.err;
  EXPECT_EQ(mem[0]["comm"], "vk_frames");
  EXPECT_EQ(mem[0]["exited"], true);
  EXPECT_EQ(mem[0]["outstanding_bytes"], 2 << 20);
  EXPECT_EQ(mem[0]["allocs"], 4);
  EXPECT_EQ(mem[0]["frees"], 3);
  EXPECT_EQ(mem[0]["alloc_failures"], 0);
  EXPECT_EQ(mem[0]["devices_created"], 1);
  EXPECT_EQ(mem[0]["devices_destroyed"], 1);
  ASSERT_EQ(mem[0]["outstanding"].size(), 1u);
  EXPECT_EQ(mem[0]["outstanding"][0]["size_bytes"], 2 << 20);
  EXPECT_EQ(mem[0]["outstanding"][0]["memory_type"], 0);
}

TEST(Graphics, TheRealCudartsLaunchesShowInsideTheVulkanFrames) {
  FramesRun r = frames_of(
      {fixture("vk_frames"), "--frames", "12", "--slow-every", "4", "--slow-ms", "60", "--cuda", cuda_runtime_lib()});
  expect_frames(r, "vulkan", 12, 4, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["calls"].value("cudaLaunchKernel", 0), 1) << f.dump();
    EXPECT_EQ(f["cuda_launches"], 1) << f.dump();
    EXPECT_EQ(f["submits"], 2) << f.dump();
  }
  uint64_t launches = 0;
  for (auto& l : r.of("frames")) launches += l["cuda_launches"].get<uint64_t>();
  EXPECT_EQ(launches, 12u);
  EXPECT_EQ(r.of("summary")[0]["cuda_lost"], 0);
}

TEST(Graphics, SwapchainPresentsAcquiresAndSubmit2ThroughTheStandInLoader) {
  FramesRun r = frames_of({fixture("vk_present_app"), "--frames", "20", "--slow-every", "5", "--slow-ms", "60"});
  expect_frames(r, "vulkan", 20, 5, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["submits"], 1) << f.dump();
    EXPECT_EQ(f["cmd_buffers"], 3) << f.dump();  // submit infos of 1 and 2
    EXPECT_EQ(f["waits"], 2) << f.dump();        // the acquire and the fence
    EXPECT_EQ(f["calls"], json({{"vkAcquireNextImageKHR", 1}, {"vkQueueSubmit2", 1}, {"vkWaitForFences", 1}}))
        << f.dump();
  }
  // At its exit: the queue's counts and the frame-time histogram since it was first seen.
  auto queues = r.of("queue");
  ASSERT_EQ(queues.size(), 1u) << r.err;
  EXPECT_EQ(queues[0]["queue"], "0x51");
  EXPECT_EQ(queues[0]["submits"], 20);
  EXPECT_EQ(queues[0]["cmd_buffers"], 60);
  EXPECT_EQ(queues[0]["cmd_buffers_per_submit"], 3.0);
  EXPECT_EQ(queues[0]["presents"], 21);
  auto hist = r.of("histogram");
  ASSERT_EQ(hist.size(), 1u);
  EXPECT_EQ(hist[0]["frames"], 20);
  // The histogram holds exactly the frames' durations, each in its log2 bucket.
  std::map<uint64_t, uint64_t> want, got;
  for (auto& f : r.of("frame")) {
    const auto d = f["duration_ns"].get<uint64_t>();
    want[(uint64_t{2} << (63 - __builtin_clzll(d))) - 1]++;
  }
  for (auto& b : hist[0]["buckets"]) got[b["le_ns"].get<uint64_t>()] = b["count"].get<uint64_t>();
  EXPECT_EQ(got, want);
  auto mem = r.of("memory");
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(mem[0]["outstanding_bytes"], 5 << 20);
  EXPECT_EQ(mem[0]["alloc_failures"], 1);
  EXPECT_EQ(mem[0]["frees"], 1);
  ASSERT_EQ(mem[0]["outstanding"].size(), 1u);
  EXPECT_EQ(mem[0]["outstanding"][0]["memory_type"], 2);
}

TEST(Graphics, EglPbufferSwapsAndGlFinishWaits) {
  FramesRun r =
      frames_of({fixture("gl_frames"), "--frames", "20", "--slow-every", "5", "--slow-ms", "60"}, {"--no-cuda"});
  expect_frames(r, "egl", 20, 5, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["waits"], 1) << f.dump();
    EXPECT_EQ(f["calls"], json({{"glFinish", 1}})) << f.dump();
  }
  EXPECT_TRUE(r.of("memory").empty());  // no Vulkan memory
}

// An X server of its own (Xvfb, installed by scripts/deps.sh) on the first free display from :90.
struct XServer {
  std::unique_ptr<Process> p;
  std::string display;
  XServer() {
    for (int n = 90; n < 130 && !p; n++) {
      const std::string lock = "/tmp/.X" + std::to_string(n) + "-lock";
      const std::string sock = "/tmp/.X11-unix/X" + std::to_string(n);
      if (access(lock.c_str(), F_OK) == 0 || access(sock.c_str(), F_OK) == 0) continue;
      display = ":" + std::to_string(n);
      p = std::make_unique<Process>(
          std::vector<std::string>{"Xvfb", display, "-nolisten", "tcp", "-screen", "0", "320x240x24"});
      for (int i = 0; i < 100 && access(sock.c_str(), F_OK) != 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (access(sock.c_str(), F_OK) != 0) ADD_FAILURE() << "Xvfb " << display << " did not start: " << p->err();
    }
  }
  ~XServer() {
    if (!p) return;
    p->signal(SIGTERM);  // not the harness's SIGKILL: Xvfb removes its lock and socket itself
    p->wait(10);
  }
};

// 16 ms frames: log2 buckets split them at 16.78 ms, where percentiles interpolated in the bucket
// were off by a fifth (expect_frames checks them against the frames' own times).
TEST(Graphics, GlxWindowSwapsOnAnXServer) {
  XServer x;
  ASSERT_TRUE(x.p) << "no free X display from :90";
  FramesRun r =
      frames_of({fixture("glx_frames"), "--frames", "20", "--slow-every", "5", "--slow-ms", "60", "--frame-ms", "16"},
                {"--no-cuda"}, {"DISPLAY=" + x.display});
  expect_frames(r, "glx", 20, 5, 60);
  // libGL.so.1's glXSwapBuffers calls libGLX's: each swap counted once, and glFinish through libGL.
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["waits"], 1) << f.dump();
    EXPECT_EQ(f["calls"], json({{"glFinish", 1}})) << f.dump();
    EXPECT_EQ(f["submits"], 0) << f.dump();
  }
  auto summary = r.of("summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["events"], 21 + 20) << "21 swaps and 20 glFinish calls";
}

// Host-wide, the libraries of the dynamic linker's cache are probed: a renderer started later is
// seen from its first frame.
TEST(Graphics, HostWideSeesARendererStartedLater) {
  Process g({gpuscope_bin(), "frames", "-c", "vk_frames", "--json", "--every-frame", "--no-cuda", "--slowest", "10"});
  ASSERT_TRUE(g.wait_for("gpuscope: watching frames", 30, true)) << g.err();
  Process app({fixture("vk_frames"), "--frames", "8", "--slow-every", "4", "--slow-ms", "60"});
  ready_pid(app);
  app.signal(SIGUSR1);
  EXPECT_EQ(app.wait(60), 0) << app.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the next print
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  FramesRun r{parse_lines(g.out()), g.err()};
  expect_frames(r, "vulkan", 8, 4, 60);
  for (auto& f : r.of("frame")) EXPECT_EQ(f["pid"], app.pid());
}

TEST(Graphics, BadInputOneLineExitTwoNothingLeftBehind) {
  BpfLeftovers left;
  Process sleeper({"sleep", "30"});
  auto r = expect_usage_error("frames", {"-p", std::to_string(sleeper.pid()), "-d", "1"});
  EXPECT_NE(r.err.find("maps no graphics library"), std::string::npos) << r.err;
  expect_usage_error("frames", {"--interval", "0"});
  expect_usage_error("frames", {"--slowest", "-1"});
  expect_usage_error("frames", {"-p", "999999"});
  // No loader anywhere: the dynamic linker's cache emptied in a mount namespace of its own, and no
  // process in scope.
  auto none = run({"unshare", "-m", "sh", "-c",
                   "mount --bind /dev/null /etc/ld.so.cache && exec " + gpuscope_bin() + " frames -c gs_no_such -d 1"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_EQ(std::count(none.err.begin(), none.err.end(), '\n'), 1) << none.err;
  EXPECT_NE(none.err.find("no Vulkan loader or GL library found"), std::string::npos) << none.err;
  EXPECT_EQ(none.out, "");
  sleeper.signal(SIGKILL);
  sleeper.wait(10);
  EXPECT_EQ(left.list(), "");
}

namespace {

// The value of the first sample of `name` whose labels hold every one of `parts`; -1 when none.
double sample(const std::string& metrics, const std::string& name, const std::vector<std::string>& parts = {}) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (auto& p : parts) all = all && line.find(p) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

}  // namespace

// The agent's graphics collector: the frame-time histogram, Vulkan's counts and memory of a
// renderer, and the memory it left behind at exit.
TEST(GraphicsAgent, FrameHistogramsSubmitsPresentsAndTheLeakAtExit) {
  Process agent({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-c", "vk_present_app", "--collectors",
                 "graphics", "--interval", "0.2"});
  ASSERT_TRUE(agent.wait_for("\"type\":\"agent\"", 30)) << agent.err();
  const int port = parse_lines(agent.out()).at(0).at("port").get<int>();
  const double files = sample(http_get(port, "/metrics").body, "gpuscope_graphics_library_files");
  Process app({fixture("vk_present_app"), "--frames", "40", "--slow-every", "10", "--slow-ms", "60"});
  const std::string pid = "pid=\"" + std::to_string(ready_pid(app)) + "\"";
  // Its stand-in loader (in no linker cache) is probed once the agent has rescanned the process.
  bool probed = false;
  for (int i = 0; i < 300 && !probed; i++) {
    probed = sample(http_get(port, "/metrics").body, "gpuscope_graphics_library_files") == files + 1;
    if (!probed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(probed) << agent.err();
  app.signal(SIGUSR1);
  ASSERT_EQ(app.wait(60), 0) << app.err();
  std::string m;
  for (int i = 0; i < 100; i++) {
    m = http_get(port, "/metrics").body;
    if (sample(m, "gpuscope_graphics_memory_leaked_bytes_total") > 0) break;  // final values from here
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string h = "gpuscope_frame_duration_seconds";
  EXPECT_EQ(sample(m, h + "_count", {pid, "api=\"vulkan\""}), 40) << m;
  EXPECT_EQ(sample(m, h + "_bucket", {pid, "le=\"0.033554432\""}), 36) << m;  // all but the 4 slow ones
  EXPECT_EQ(sample(m, h + "_bucket", {pid, "le=\"+Inf\""}), 40);
  EXPECT_GE(sample(m, h + "_sum", {pid}), 4 * 0.060 + 36 * 0.002);
  EXPECT_EQ(sample(m, "gpuscope_graphics_submits_total", {pid}), 40);
  EXPECT_EQ(sample(m, "gpuscope_graphics_command_buffers_total", {pid}), 120);
  EXPECT_EQ(sample(m, "gpuscope_graphics_presents_total", {pid}), 41);
  EXPECT_EQ(sample(m, "gpuscope_graphics_memory_outstanding_bytes", {pid}), 5 << 20);
  EXPECT_EQ(sample(m, "gpuscope_graphics_memory_outstanding_allocations", {pid}), 1);
  EXPECT_EQ(sample(m, "gpuscope_graphics_memory_leaked_bytes_total"), 5 << 20);
  EXPECT_GT(sample(m, "gpuscope_graphics_wait_seconds_total", {pid}), 0);
  EXPECT_EQ(sample(m, "gpuscope_collector_up", {"collector=\"graphics\""}), 1);
  EXPECT_EQ(sample(m, "gpuscope_events_lost_total", {"collector=\"graphics\"", "ring_buffer_full"}), 0) << m;
  agent.signal(SIGINT);
  EXPECT_EQ(agent.wait(30), 0) << agent.err();
}

// One timeline: the Vulkan calls on their thread, the frames on their own track, and the real
// libcudart's calls in the same process.
TEST(GraphicsTimeline, VulkanFramesAndTheRealCudartsCallsInOneTrace) {
  const std::string out = "/tmp/gstest-graphics-timeline-" + std::to_string(getpid()) + ".json";
  Process app(
      {fixture("vk_frames"), "--frames", "6", "--slow-every", "3", "--slow-ms", "40", "--cuda", cuda_runtime_lib()});
  const pid_t pid = ready_pid(app);
  Process g({gpuscope_bin(), "timeline", "-p", std::to_string(pid), "-o", out, "--json"});
  ASSERT_TRUE(g.wait_for("gpuscope: recording a timeline", 30, true)) << g.err();
  app.signal(SIGUSR1);
  ASSERT_EQ(app.wait(60), 0) << app.err();
  ASSERT_EQ(g.wait(30), 0) << g.err();
  std::ifstream f(out);
  json doc = json::parse(f);
  std::remove(out.c_str());
  std::map<std::string, int> graphics, cuda;
  std::vector<json> frames;
  bool track = false;
  for (auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "M" && e["name"] == "thread_name" &&
        e["args"]["name"].get<std::string>() == "frames (vulkan)")
      track = true;
    if (e.value("ph", "") != "X") continue;
    EXPECT_EQ(e["pid"], pid) << e.dump();
    if (e["cat"] == "graphics") graphics[e["name"]]++;
    if (e["cat"] == "cuda_api") cuda[e["name"]]++;
    if (e["cat"] == "frame") frames.push_back(e);
  }
  EXPECT_TRUE(track);
  // 7 fenced submits (the 7th ends frame 6) and 6 others; a wait of each kind per frame but the last.
  EXPECT_EQ(graphics["vkQueueSubmit"], 13);
  EXPECT_EQ(graphics["vkWaitForFences"], 7);
  EXPECT_EQ(graphics["vkQueueWaitIdle"], 6);
  EXPECT_EQ(graphics["vkCreateDevice"], 1);
  EXPECT_EQ(cuda["cudaLaunchKernel"], 6);
  ASSERT_EQ(frames.size(), 6u);
  for (size_t i = 0; i < frames.size(); i++) {
    EXPECT_EQ(frames[i]["name"], "frame " + std::to_string(i + 1));
    EXPECT_EQ(frames[i]["args"]["cuda_launches"], 1) << frames[i].dump();
    EXPECT_EQ(frames[i]["args"]["submits"], 2) << frames[i].dump();
    EXPECT_EQ(frames[i]["dur"].get<double>() >= 40e3, (i + 1) % 3 == 0) << frames[i].dump();
  }
  EXPECT_EQ(doc["metadata"]["frame_count"], 6);
  EXPECT_EQ(doc["metadata"]["lost"]["graphics_ringbuf"], 0);
}

// memleak's vulkan category: the Vulkan allocation a renderer never freed, reported at its exit
// beside (not among) the CUDA ones.
TEST(GraphicsMemleak, VulkanAllocationsNeverFreedAreReportedAtExit) {
  Process app({fixture("vk_frames"), "--frames", "3", "--slow-every", "0"});
  const pid_t pid = ready_pid(app);
  Process g({gpuscope_bin(), "memleak", "-p", std::to_string(pid), "--json", "--interval", "0.2"});
  ASSERT_TRUE(g.wait_for("gpuscope: tracking GPU memory", 30, true)) << g.err();
  app.signal(SIGUSR1);
  ASSERT_EQ(app.wait(60), 0) << app.err();
  ASSERT_EQ(g.wait(30), 0) << g.err();
  std::vector<json> leaks;
  for (auto& l : parse_lines(g.out()))
    if (l.value("type", "") == "leak") leaks.push_back(l);
  ASSERT_EQ(leaks.size(), 1u) << g.out();
  EXPECT_EQ(leaks[0]["pid"], pid);
  EXPECT_EQ(leaks[0]["comm"], "vk_frames");
  EXPECT_EQ(leaks[0]["category"], "vulkan");
  EXPECT_EQ(leaks[0]["layer"], "vulkan");
  EXPECT_EQ(leaks[0]["api"], "vkAllocateMemory");
  EXPECT_EQ(leaks[0]["size"], 2 << 20);
  EXPECT_EQ(leaks[0]["memory_type"], 0);
  EXPECT_EQ(leaks[0]["state"], "exited");
  EXPECT_EQ(leaks[0]["device"], -1);
  EXPECT_GT(leaks[0]["age_ns"].get<uint64_t>(), 0u);
}

// Programs that call what vkGetDeviceProcAddr or glXGetProcAddressARB handed them (volk, DXVK,
// GL loaders): gpuscope frames -p -v follows the app from before it fetches its functions, and
// the app renders once gpuscope has said it probes each of `fetched` where it lies.
namespace {

FramesRun frames_of_fetched(const std::vector<std::string>& app_argv, const std::vector<std::string>& app_env,
                            const std::vector<std::string>& fetched) {
  Process app(app_argv, app_env);
  const pid_t pid = ready_pid(app);
  Process g({gpuscope_bin(), "frames", "-p", std::to_string(pid), "--json", "--every-frame", "--slowest", "10",
             "--no-cuda", "-v"});
  EXPECT_TRUE(g.wait_for("gpuscope: watching frames", 30, true)) << g.err();
  app.signal(SIGUSR1);
  EXPECT_TRUE(app.wait_for("loaded", 30)) << app.err();
  for (const std::string& f : fetched)
    EXPECT_TRUE(g.wait_for("gpuscope: pid " + std::to_string(pid) + " fetched " + f + ": probing ", 10, true))
        << f << " not probed:\n"
        << g.err();
  app.signal(SIGUSR1);
  EXPECT_EQ(app.wait(60), 0) << app.err();
  EXPECT_EQ(g.wait(30), 0) << g.err();
  return {parse_lines(g.out()), g.err()};
}

}  // namespace

// A real swapchain on lavapipe, every device function taken from vkGetDeviceProcAddr: the loader's
// exports are never called, and the driver's functions it handed out are probed. Each frame is
// present to present with its acquire, submit and fence wait; 21 presents and 21 acquires.
TEST(GraphicsFetched, VulkanDeviceFunctionsFromGetDeviceProcAddrOnARealSwapchain) {
  XServer x;
  ASSERT_TRUE(x.p) << "no free X display from :90";
  FramesRun r = frames_of_fetched(
      {fixture("vk_gpa_swapchain"), "--frames", "20", "--slow-every", "5", "--slow-ms", "60"}, {"DISPLAY=" + x.display},
      {"vkAcquireNextImageKHR through vkGetDeviceProcAddr", "vkQueuePresentKHR through vkGetDeviceProcAddr",
       "vkQueueSubmit through vkGetDeviceProcAddr", "vkWaitForFences through vkGetDeviceProcAddr",
       "vkDeviceWaitIdle through vkGetDeviceProcAddr"});
  expect_frames(r, "vulkan", 20, 5, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["submits"], 1) << f.dump();
    EXPECT_EQ(f["cmd_buffers"], 1) << f.dump();
    EXPECT_EQ(f["waits"], 2) << f.dump();  // the acquire and the fence
    EXPECT_EQ(f["calls"], json({{"vkAcquireNextImageKHR", 1}, {"vkQueueSubmit", 1}, {"vkWaitForFences", 1}}))
        << f.dump();
  }
  auto queues = r.of("queue");
  ASSERT_EQ(queues.size(), 1u) << r.err;
  EXPECT_EQ(queues[0]["presents"], 21);
  EXPECT_EQ(queues[0]["submits"], 21);
  EXPECT_EQ(queues[0]["cmd_buffers"], 21);
  auto summary = r.of("summary");
  ASSERT_EQ(summary.size(), 1u);
  // 21 each of acquires, submits, fence waits and presents; the device wait at the end; the
  // loader's vkCreateDevice and vkDestroyDevice (vkGetInstanceProcAddr and vkGetDeviceProcAddr
  // hand out its exports for those, probed already, so not a second time).
  EXPECT_EQ(summary[0]["events"], 4 * 21 + 1 + 2);
  EXPECT_EQ(summary[0]["fetched_sites"], 5);
  EXPECT_EQ(summary[0]["fetch_failures"], 0);
  EXPECT_EQ(summary[0]["lost_fetches"], 0);
}

// GLX through glXGetProcAddressARB: glXSwapBuffers' pointer is libGLX's export (probed already:
// each swap counted once), glFinish's is libGLdispatch's stub, probed where it lies.
TEST(GraphicsFetched, GlxSwapsAndGlFinishThroughGlXGetProcAddressARB) {
  XServer x;
  ASSERT_TRUE(x.p) << "no free X display from :90";
  FramesRun r =
      frames_of_fetched({fixture("glx_frames"), "--frames", "20", "--slow-every", "5", "--slow-ms", "60", "--gpa", "1"},
                        {"DISPLAY=" + x.display}, {"glFinish through glXGetProcAddressARB"});
  expect_frames(r, "glx", 20, 5, 60);
  for (auto& f : r.of("frame")) {
    EXPECT_EQ(f["waits"], 1) << f.dump();
    EXPECT_EQ(f["calls"], json({{"glFinish", 1}})) << f.dump();
  }
  auto summary = r.of("summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["events"], 21 + 20) << "21 swaps and 20 glFinish calls, each once";
  EXPECT_EQ(summary[0]["fetched_sites"], 1);
  EXPECT_EQ(summary[0]["fetch_failures"], 0);
  EXPECT_EQ(summary[0]["lost_fetches"], 0);
  EXPECT_EQ(r.err.find("fetched glXSwapBuffers"), std::string::npos) << r.err;
}

// The agent with every collector exits within 0.5 s of SIGTERM: the graphics collector's probes
// (six libraries' of the linker cache) detach as a few uprobe_multi links, not one by one.
TEST(GraphicsAgent, ExitsWithinHalfASecondOfSigterm) {
  Workload w("gfx-exit", "gsgx");
  Agent a(w);
  const std::string m = a.metrics();
  EXPECT_GT(sample(m, "gpuscope_graphics_library_files"), 0) << m;
  EXPECT_EQ(sample(m, "gpuscope_collector_up", {"collector=\"graphics\""}), 1) << m;
  const auto t0 = std::chrono::steady_clock::now();
  a.proc().signal(SIGTERM);
  EXPECT_EQ(a.proc().wait(30), 0) << a.proc().err();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(s, 0.5) << a.proc().err();
}

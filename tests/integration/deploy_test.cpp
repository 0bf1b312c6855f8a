// deploy/ against the real agent: every metric name the Grafana dashboards and alert rules use
// is in a real scrape; the agent's anomaly rules fire on the stand-in workloads made for each
// and stay quiet on a steady run; the overhead governor steps down under load and back up; a
// process in a kubelet-shaped (systemd driver) cgroup gets its pod labels. Every agent is scoped
// by -c to a name only this test runs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include "bridge_fixture.h"
#include "harness.h"

using namespace gstest;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// The deploy tests' workload: a link to standin_app.
struct DpWorkload : Workload {
  DpWorkload() : Workload("deploy", "dpwl") {}
};

double anomalies(const std::string& m, const char* rule) {
  return value_of(m, "gpuscope_anomalies_total", {{"rule", rule}});
}

// The governor off: memory_growth counts refreshes, which it would slow down on a busy machine.
const std::vector<std::string> kAnomalyFlags = {"--alloc-alert-bytes", "5000", "--growth-intervals", "4",
                                                "--error-burst-rate",  "100",  "--max-cpu-percent",  "0"};

}  // namespace

// Every metric name of deploy/grafana/*.json and deploy/prometheus/rules.yml in a real scrape:
// the collectors, a bridge on the NVML stand-in, anomalies and the governor. Names that need a
// part of gpuscope the agent does not run yet are listed by the checker as PENDING, with why.
TEST(Deploy, MetricNamesExported) {
  DpWorkload w;
  PinDir d;
  StandinFile f;
  f.write(
      "device 0 util 37 memutil 12 mem_total 85899345920 mem_free 81067507712 mem_used 4294967296 "
      "mem_reserved 536870912 temp 55 power 123456 smclk 1410 memclk 2619 throttle 0x105 pcie_tx 1000 pcie_rx 2000 "
      "enc 3 dec 4 fan 40 compute_mode 3 ecc_corr 7 ecc_uncorr 1\n");
  Process bridge({gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path}, {f.env()});
  ASSERT_TRUE(bridge.wait_for("bridge publishing", 10, true)) << bridge.err();
  Agent a(w, {"--bridge-pin-dir", d.path, "--nvml", NVML_STANDIN}, {f.env()});
  Holder live(w);
  ASSERT_TRUE(live.allocate()) << live.err();
  for (auto args : {std::vector<std::string>{"driver", "2"}, {"leaks"}, {"--result", "2", "burst", "3"}}) {
    args.insert(args.begin(), w.path());
    Process p(args);
    ASSERT_EQ(p.wait(20), 0) << p.err();
  }
  std::string m = a.until([&](const std::string& t) {
    return sum_of(t, "gpuscope_memory_leaked_bytes_total", {{"comm", w.comm()}}) > 0 &&
           value_of(t, "gpuscope_gpu_utilization_ratio", {{"gpu", "0"}}) == 0.37 &&
           t.find("gpuscope_kernel_launches_total{") != std::string::npos;
  });
  ASSERT_NE(m, "") << a.metrics();
  std::string file = w.dir() + "/scrape.txt";
  std::ofstream(file) << m;
  std::string src = DEPLOY_SOURCE_DIR;
  auto r =
      run({"sh", "-c",
           "python3 " + src + "/tests/deploy/metric_names.py --scrape " + file + " " + src + "/deploy/grafana/*.json " +
               src + "/deploy/prometheus/rules.yml " + src + "/deploy/prometheus/compat_rules.yml 2>&1"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  // Nothing pending: the GPU-time and starvation series are the agent's now.
  EXPECT_EQ(r.out.find("PENDING"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok gpuscope_starvation_cpu_seconds_total"), std::string::npos) << r.out;
  for (const char* n : {"gpuscope_kernel_duration_seconds_sum", "gpuscope_kernel_duration_seconds_count",
                        "gpuscope_kernel_duration_seconds_bucket", "gpuscope_gpu_busy_seconds_total"})
    EXPECT_TRUE(
        std::regex_search(r.out, std::regex(std::string("(^|\\n)ok ") + n + " \\([^)\\n]*gpuscope-kernel-time\\.json")))
        << n << r.out;
  EXPECT_NE(r.out.find("ok gpuscope_gpu_power_watts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok gpuscope_anomalies_total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok gpuscope_governor_level"), std::string::npos) << r.out;
  // The GPU-error alerts and tables read the errors collector's families, there before any error.
  for (const char* n : {"gpuscope_xid_errors_total", "gpuscope_cuda_sticky_errors_total"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex(std::string("(^|\\n)ok ") + n + " \\([^)\\n]*rules\\.yml")))
        << n << r.out;
  // What the recording rules of the blog's names read.
  for (const char* n :
       {"gpuscope_kernel_launches_total", "gpuscope_memory_allocations_total", "gpuscope_memory_frees_total",
        "gpuscope_kernel_duration_seconds_bucket", "gpuscope_kernel_duration_seconds_sum",
        "gpuscope_kernel_duration_seconds_count", "gpuscope_gpu_utilization_ratio", "gpuscope_gpu_memory_used_bytes"}) {
    std::string want = std::string("(^|\\n)ok ") + n + " \\([^)\\n]*compat_rules\\.yml";
    EXPECT_TRUE(std::regex_search(r.out, std::regex(want))) << n << r.out;
  }
  live.signal(SIGUSR1);
  EXPECT_EQ(live.wait(20), 0);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
  bridge.signal(SIGTERM);
  EXPECT_EQ(bridge.wait(30), 0);
}

// A steady run: one process holding memory, launches, successful calls, a process that
// allocates and frees: no rule fires.
TEST(Deploy, AnomaliesQuietOnSteadyRun) {
  DpWorkload w;
  Agent a(w, kAnomalyFlags);
  Holder live(w);
  ASSERT_TRUE(live.allocate()) << live.err();
  for (int i = 0; i < 3; i++) {
    for (auto args : {std::vector<std::string>{"driver", "2"}, {"calls", "3", "5"}, {"malloc_loop", "300"}}) {
      args.insert(args.begin(), w.path());
      Process p(args);
      ASSERT_EQ(p.wait(20), 0) << p.err();
    }
  }
  std::string m = a.until([&](const std::string& t) {
    return value_of(t, "gpuscope_memory_outstanding_bytes",
                    {{"pid", std::to_string(live.pid())}, {"category", "device"}}) == 6777;
  });
  ASSERT_NE(m, "");
  sleep_s(2);  // more than the 4 refreshes of --growth-intervals
  m = a.metrics();
  for (const char* r : {"unexpected_allocation", "memory_growth", "error_burst"}) EXPECT_EQ(anomalies(m, r), 0) << r;
  json j = a.api("/api/anomalies");
  EXPECT_TRUE(j["anomalies"].empty()) << j.dump();
  EXPECT_EQ(j["totals"]["unexpected_allocation"], 0);
  live.signal(SIGUSR1);
  EXPECT_EQ(live.wait(20), 0);
  EXPECT_EQ(a.stop(), 0);
  EXPECT_EQ(a.proc().err().find("anomaly"), std::string::npos) << a.proc().err();
}

// Two processes: the first holds 6777 bytes; the second takes 6777 more (over the 5000-byte
// limit) while the first holds its memory: said once, of the second, naming the first.
TEST(Deploy, AnomalyUnexpectedAllocation) {
  DpWorkload w;
  Agent a(w, kAnomalyFlags);
  Holder first(w);
  ASSERT_TRUE(first.allocate());
  ASSERT_NE(a.until([&](const std::string& t) {
    return value_of(t, "gpuscope_memory_outstanding_bytes",
                    {{"pid", std::to_string(first.pid())}, {"category", "device"}}) == 6777;
  }),
            "");
  sleep_s(0.5);
  EXPECT_EQ(anomalies(a.metrics(), "unexpected_allocation"), 0) << "the first holder alone";
  Holder second(w);
  ASSERT_TRUE(second.allocate());
  std::string m = a.until([&](const std::string& t) { return anomalies(t, "unexpected_allocation") >= 1; });
  ASSERT_NE(m, "") << a.proc().err();
  sleep_s(1);
  m = a.metrics();
  EXPECT_EQ(anomalies(m, "unexpected_allocation"), 1);
  EXPECT_EQ(anomalies(m, "memory_growth"), 0);
  EXPECT_EQ(anomalies(m, "error_burst"), 0);
  json j = a.api("/api/anomalies");
  ASSERT_EQ(j["anomalies"].size(), 1u) << j.dump();
  auto& e = j["anomalies"][0];
  EXPECT_EQ(e["rule"], "unexpected_allocation");
  EXPECT_EQ(e["pid"], second.pid());
  EXPECT_EQ(e["other_pid"], first.pid());
  EXPECT_EQ(e["bytes"], 6777);
  EXPECT_EQ(e["comm"], w.comm());
  for (Process* p : {&first, &second}) {
    p->signal(SIGUSR1);
    EXPECT_EQ(p->wait(20), 0);
  }
  EXPECT_EQ(a.stop(), 0);
  EXPECT_NE(a.proc().err().find("anomaly unexpected_allocation: pid " + std::to_string(second.pid())),
            std::string::npos)
      << a.proc().err();
}

// A leaking process: a 4096-byte block every 50 ms for 3 s, never freed; its memory rises in
// every 0.2 s refresh, and after 4 of them memory_growth is said, once.
TEST(Deploy, AnomalyMemoryGrowth) {
  DpWorkload w;
  Agent a(w, kAnomalyFlags);
  Process leak({w.path(), "grow", "60", "50"});
  pid_t lp = ready_pid(leak);
  std::string m = a.until([&](const std::string& t) { return anomalies(t, "memory_growth") >= 1; });
  ASSERT_NE(m, "") << a.proc().err();
  ASSERT_EQ(leak.wait(20), 0);
  sleep_s(0.5);
  m = a.metrics();
  EXPECT_EQ(anomalies(m, "memory_growth"), 1);
  EXPECT_EQ(anomalies(m, "unexpected_allocation"), 0) << "no other process held memory";
  json j = a.api("/api/anomalies");
  ASSERT_EQ(j["anomalies"].size(), 1u) << j.dump();
  EXPECT_EQ(j["anomalies"][0]["rule"], "memory_growth");
  EXPECT_EQ(j["anomalies"][0]["pid"], lp);
  EXPECT_GE(j["anomalies"][0]["bytes"].get<uint64_t>(), 4 * 4096u);
  EXPECT_EQ(a.stop(), 0);
}

// An error burst: 20000 cudaGetDevice calls failing with cudaErrorMemoryAllocation (2) within
// well under a second; a few failures (3) are not a burst. The rule sees the APIs the latency
// collector times, and cudaGetDevice is not among its defaults.
TEST(Deploy, AnomalyErrorBurst) {
  DpWorkload w;
  std::vector<std::string> flags = kAnomalyFlags;
  flags.insert(flags.end(), {"--latency-apis", "cudaGetDevice,cudaMalloc"});
  Agent a(w, flags);
  Process few({w.path(), "--result", "2", "burst", "3"});
  ASSERT_EQ(few.wait(20), 0);
  sleep_s(1);
  EXPECT_EQ(anomalies(a.metrics(), "error_burst"), 0);
  Process burst({w.path(), "--result", "2", "burst", "20000"});
  ASSERT_EQ(burst.wait(20), 0);
  std::string m = a.until([&](const std::string& t) { return anomalies(t, "error_burst") >= 1; });
  ASSERT_NE(m, "") << a.proc().err();
  json j = a.api("/api/anomalies");
  ASSERT_GE(j["anomalies"].size(), 1u) << j.dump();
  EXPECT_EQ(j["anomalies"][0]["rule"], "error_burst");
  EXPECT_EQ(j["anomalies"][0]["api"], "cudaGetDevice");
  EXPECT_GT(j["anomalies"][0]["rate_per_s"].get<double>(), 100);
  EXPECT_EQ(anomalies(m, "unexpected_allocation"), 0);
  EXPECT_EQ(a.stop(), 0);
}

// A pod's cgroup as the kubelet's systemd driver names it (kubepods.slice/…-pod<uid with '_'>.slice/
// cri-containerd-<id>.scope, made here under a test directory) and the kubelet's log directories
// (given by --pods-dir): pod, namespace and container on the process's series.
TEST(Deploy, KubeletSystemdCgroupLabels) {
  DpWorkload w;
  char tail[13];
  snprintf(tail, sizeof tail, "%012d", static_cast<int>(getpid()));
  std::string uid = std::string("7c0ffee0-aaaa-4bbb-8ccc-") + tail, uid_ = uid;
  std::replace(uid_.begin(), uid_.end(), '-', '_');
  std::string id = "9e8d7c6b5a49382716051f2e3d4c5b6a798801a2b3c4d5e6f708192a3b4c" + std::string(tail).substr(8);
  ASSERT_EQ(id.size(), 64u);
  std::string root = "/sys/fs/cgroup/pids";
  if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    root = "/sys/fs/cgroup";
    if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) GTEST_SKIP() << "no writable cgroup hierarchy";
  }
  std::string base = root + "/gstest-deploy-" + tail;
  std::vector<std::string> cgs = {base, base + "/kubepods.slice", base + "/kubepods.slice/kubepods-burstable.slice"};
  cgs.push_back(cgs.back() + "/kubepods-burstable-pod" + uid_ + ".slice");
  cgs.push_back(cgs.back() + "/cri-containerd-" + id + ".scope");
  for (auto& c : cgs) ASSERT_EQ(mkdir(c.c_str(), 0755), 0) << c << ": " << strerror(errno);
  std::string pods = w.dir() + "/log/pods", pod = pods + "/inference_server-7f9c_" + uid;
  for (auto d : {w.dir() + "/log", pods, pod, pod + "/triton", w.dir() + "/log/containers"}) mkdir(d.c_str(), 0755);
  std::ofstream(w.dir() + "/log/containers/server-7f9c_inference_triton-" + id + ".log") << "";
  {
    Agent a(w, {"--pods-dir", pods});
    Holder live(w);
    std::ofstream(cgs.back() + "/cgroup.procs") << live.pid() << "\n";
    ASSERT_TRUE(live.allocate()) << live.err();
    std::map<std::string, std::string> want = {{"pid", std::to_string(live.pid())},
                                               {"category", "device"},
                                               {"namespace", "inference"},
                                               {"pod", "server-7f9c"},
                                               {"container", "triton"}};
    std::string m =
        a.until([&](const std::string& t) { return value_of(t, "gpuscope_memory_outstanding_bytes", want) == 6777; });
    EXPECT_NE(m, "") << a.metrics();
    live.signal(SIGUSR1);
    EXPECT_EQ(live.wait(20), 0);
    EXPECT_EQ(a.stop(), 0);
  }
  for (auto it = cgs.rbegin(); it != cgs.rend(); ++it)
    EXPECT_EQ(rmdir(it->c_str()), 0) << *it << ": " << strerror(errno);
}

namespace {
// The launches the agent has counted for the workload's processes.
double comm_launches(const std::string& metrics, const Workload& w) {
  return sum_of(metrics, "gpuscope_comm_kernel_launches_total", {{"comm", w.comm()}});
}

// Ten short-lived workload processes at once, each launching and exiting.
void launch_batch(const Workload& w) {
  std::vector<std::unique_ptr<Process>> batch;
  for (int j = 0; j < 10; j++)
    batch.push_back(std::make_unique<Process>(std::vector<std::string>{w.path(), "driver", "0"}));
  for (auto& p : batch) EXPECT_EQ(p->wait(30), 0) << p->err();
}
}  // namespace

namespace {

// The agent's CPU seconds as the test says them, through GPUSCOPE_TEST_GOVERNOR_CPU_FILE: a thread
// adds `rate` seconds per second of wall time, so that the governor's windows measure the test's
// storm and not this machine's load. The file is replaced whole, never read half written.
class FakeCpu {
 public:
  explicit FakeCpu(std::string path) : path_(std::move(path)) {
    write(0);
    t_ = std::thread([this] {
      auto last = std::chrono::steady_clock::now();
      double s = 0;
      while (!stop_) {
        sleep_s(0.02);
        auto now = std::chrono::steady_clock::now();
        s += rate * std::chrono::duration<double>(now - last).count();
        last = now;
        write(s);
      }
    });
  }
  ~FakeCpu() {
    stop_ = true;
    t_.join();
  }
  std::string env() const { return "GPUSCOPE_TEST_GOVERNOR_CPU_FILE=" + path_; }
  std::atomic<double> rate{0};

 private:
  void write(double s) {
    std::ofstream(path_ + ".new") << std::to_string(s) << "\n";
    rename((path_ + ".new").c_str(), path_.c_str());
  }
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

}  // namespace

// The real agent's governor, on a CPU source the test drives: a storm (a whole core) takes it
// down one level per window, stack sampling first (the starvation collector runs on an empty pin
// dir), to its deepest, where it stays while the storm lasts and launches that exit in a batch
// are still counted once; once the storm ends it comes back one level per 3 calm windows. Each
// step is in /metrics, /api/health and on stderr. What a real storm costs the agent, and how the
// governor holds it, are bench/governor_storm.sh's figures (docs/bench.md).
TEST(Deploy, GovernorStepsDownUnderStormAndBackUp) {
  DpWorkload w;
  PinDir d;
  FakeCpu cpu(w.dir() + "/cpu_seconds");
  Agent a(w,
          {"--interval", "0.1", "--bridge-pin-dir", d.path, "--nvml", w.dir() + "/no-libnvidia-ml.so.1",
           "--max-cpu-percent", "2"},
          {cpu.env()});
  auto launches = [&](const std::string& m) { return comm_launches(m, w); };
  Process one({w.path(), "driver", "0"});
  ASSERT_EQ(one.wait(30), 0) << one.err();
  std::string m = a.until([&](const std::string& t) { return launches(t) > 0; });
  const double per_proc = launches(m);
  ASSERT_GT(per_proc, 0) << a.proc().err();
  EXPECT_EQ(value_of(m, "gpuscope_governor_level", {}), 0) << a.proc().err();
  EXPECT_EQ(value_of(m, "gpuscope_governor_limit_ratio", {}), 0.02);

  // Each window as a scrape shows it, by its number: the level it left, its CPU in cores.
  struct Window {
    double level, cpu;
  };
  std::map<int, Window> windows;
  auto record = [&] {
    std::string t = a.metrics();
    int n = static_cast<int>(value_of(t, "gpuscope_governor_windows_total", {}));
    if (n > 0)
      windows.emplace(
          n, Window{value_of(t, "gpuscope_governor_level", {}), value_of(t, "gpuscope_governor_cpu_ratio", {})});
    return t;
  };
  auto first = [&](int from, const std::function<bool(const Window&)>& pred) {
    for (auto& [n, win] : windows)
      if (n >= from && pred(win)) return n;
    return 0;
  };
  std::ostringstream seen;
  auto dump = [&] {
    seen.str("");
    for (auto& [n, win] : windows) seen << " #" << n << ": level " << win.level << " cpu " << win.cpu << ";";
    return seen.str();
  };
  auto poll_until = [&](const std::function<bool()>& done, double timeout_s) {
    for (auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
         std::chrono::steady_clock::now() < end && !done();) {
      record();
      sleep_s(0.1);
    }
    return done();
  };

  ASSERT_TRUE(poll_until([&] { return !windows.empty(); }, 10)) << "a calm window before the storm";
  cpu.rate = 1;
  int down = 0;
  ASSERT_TRUE(poll_until([&] { return (down = first(0, [](auto& w) { return w.level > 0; })) > 0; }, 10)) << dump();
  ASSERT_TRUE(poll_until([&] { return windows.count(down + 3); }, 15)) << dump();
  json deepest = a.api("/api/health");
  launch_batch(w);
  ASSERT_TRUE(poll_until([&] { return windows.count(down + 5); }, 15)) << dump();
  cpu.rate = 0;
  int calm = 0;
  ASSERT_TRUE(poll_until([&] { return (calm = first(down, [](auto& w) { return w.cpu == 0; })) > 0; }, 10)) << dump();
  ASSERT_TRUE(poll_until([&] { return windows.count(calm + 12); }, 40)) << dump();

  // The window before each phase was seen, so each phase's first window is known.
  ASSERT_TRUE(windows.count(down - 1) && windows.count(calm - 1)) << dump();
  EXPECT_EQ(windows[down - 1].level, 0) << dump();
  EXPECT_GT(windows[calm - 1].cpu, 0.02) << "the storm's last window" << dump();
  EXPECT_EQ(windows[calm - 1].level, 4) << dump();
  for (auto& [n, win] : windows) {
    if (n >= down && n < calm - 1) {
      EXPECT_EQ(win.level, std::min(4, n - down + 1)) << "storm window " << n << ":" << dump();
      if (n > down) {
        EXPECT_NEAR(win.cpu, 1, 0.15) << "storm window " << n << ":" << dump();
      }
    }
    if (n >= calm) {
      EXPECT_EQ(win.level, std::max(0, 4 - (n - calm + 1) / 3)) << "calm window " << n << ":" << dump();
      EXPECT_EQ(win.cpu, 0) << dump();
    }
  }
  EXPECT_EQ(deepest["governor"]["level"], 4) << deepest.dump();
  EXPECT_EQ(deepest["governor"]["reduced"],
            json::array({"stack sampling at 12 Hz (of 49)", "refresh every 4th interval", "refresh every 16th interval",
                         "events read every 50 ms, exits and new processes handled at the refresh, in batches"}))
      << deepest.dump();
  json back = a.api("/api/health");
  EXPECT_EQ(back["governor"]["level"], 0) << back.dump();
  EXPECT_EQ(back["governor"]["reduced"], json::array()) << back.dump();
  m = a.metrics();
  EXPECT_EQ(value_of(m, "gpuscope_governor_level_changes_total", {}), 8) << dump();
  // Exits handled in a batch at the deepest level: every launch counted once.
  std::string all = a.until([&](const std::string& t) { return launches(t) == 11 * per_proc; }, 10);
  EXPECT_NE(all, "") << "launches " << launches(a.metrics()) << " of " << 11 * per_proc;
  EXPECT_EQ(a.stop(), 0);
  std::string err = a.proc().err();
  std::vector<std::string> steps;
  std::istringstream lines(err);
  for (std::string l; std::getline(lines, l);)
    if (l.find("governor level") != std::string::npos)
      steps.push_back(std::regex_replace(l, std::regex("CPU [0-9.]+%"), "CPU X%"));
  EXPECT_EQ(steps, (std::vector<std::string>{
                       "gpuscope: agent: governor level 1: CPU X% over 2.0%: stack sampling at 12 Hz (of 49)",
                       "gpuscope: agent: governor level 2: CPU X% over 2.0%: refresh every 4th interval",
                       "gpuscope: agent: governor level 3: CPU X% over 2.0%: refresh every 16th interval",
                       "gpuscope: agent: governor level 4: CPU X% over 2.0%: events read every 50 ms, exits and new "
                       "processes handled at the refresh, in batches",
                       "gpuscope: agent: governor level 3: CPU X%, restored: events read every 50 ms, exits and new "
                       "processes handled at the refresh, in batches",
                       "gpuscope: agent: governor level 2: CPU X%, restored: refresh every 16th interval",
                       "gpuscope: agent: governor level 1: CPU X%, restored: refresh every 4th interval",
                       "gpuscope: agent: governor level 0: CPU X%, restored: stack sampling at 12 Hz (of 49)"}))
      << err;
  EXPECT_NE(err.find("governor level 0: CPU 0.0%, restored"), std::string::npos) << err;
}

// Every cut the governor makes, each with its collectors running (the storm test above does not
// run in the sanitized build, whose costs are not a release build's: scripts/test-asan.sh): a limit
// under the idle cost takes it step by step to its deepest level, where processes that launch and
// exit in a batch are still counted exactly. It never steps back up: idle stays over the limit.
TEST(Deploy, GovernorAtItsDeepestStillCountsEveryLaunch) {
  DpWorkload w;
  PinDir d;
  Agent a(w, {"--interval", "0.05", "--bridge-pin-dir", d.path, "--nvml", w.dir() + "/no-libnvidia-ml.so.1",
              "--max-cpu-percent", "0.1"});
  std::string m = a.until([](const std::string& t) { return value_of(t, "gpuscope_governor_level", {}) == 4; }, 40);
  ASSERT_NE(m, "") << a.proc().err();
  EXPECT_EQ(value_of(m, "gpuscope_governor_level_changes_total", {}), 4);
  json health = a.api("/api/health");
  EXPECT_EQ(health["governor"]["reduced"],
            json::array({"stack sampling at 12 Hz (of 49)", "refresh every 4th interval", "refresh every 16th interval",
                         "events read every 50 ms, exits and new processes handled at the refresh, in batches"}))
      << health.dump();
  auto launches = [&](const std::string& t) { return comm_launches(t, w); };
  Process one({w.path(), "driver", "0"});
  ASSERT_EQ(one.wait(30), 0) << one.err();
  std::string t = a.until([&](const std::string& x) { return launches(x) > 0; }, 20);
  double per_proc = launches(t);
  ASSERT_GT(per_proc, 0) << a.proc().err();
  launch_batch(w);
  std::string all = a.until([&](const std::string& x) { return launches(x) == 11 * per_proc; }, 20);
  EXPECT_NE(all, "") << "launches " << launches(a.metrics()) << " of " << 11 * per_proc;
  EXPECT_EQ(value_of(a.metrics(), "gpuscope_governor_level", {}), 4);
  EXPECT_EQ(a.stop(), 0);
  std::string err = a.proc().err();
  for (int level = 1; level <= 4; level++)
    EXPECT_NE(err.find("governor level " + std::to_string(level) + ": CPU"), std::string::npos) << err;
  EXPECT_EQ(err.find("restored"), std::string::npos) << err;
}

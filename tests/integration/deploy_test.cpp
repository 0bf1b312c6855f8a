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
    return value_of(t, "gpuscope_memory_leaked_bytes_total", {{"comm", w.comm()}}) > 0 &&
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
  return value_of(metrics, "gpuscope_comm_kernel_launches_total", {{"comm", w.comm()}});
}

// Ten short-lived workload processes at once, each launching and exiting.
void launch_batch(const Workload& w) {
  std::vector<std::unique_ptr<Process>> batch;
  for (int j = 0; j < 10; j++)
    batch.push_back(std::make_unique<Process>(std::vector<std::string>{w.path(), "driver", "0"}));
  for (auto& p : batch) EXPECT_EQ(p->wait(30), 0) << p->err();
}
}  // namespace

// A storm of short-lived launching processes (10 at a time) drives the agent over
// --max-cpu-percent (2.5 times its idle cost, at least 6 %, checked to be under its storm cost;
// --interval 0.1 keeps the idle cost near 1.6 %, well under half the 6 %: at 0.05 it was near 3 %,
// the cost at level 1 hovered at half of 2.5 times that, and on CI's machine the agent never
// stepped back to level 0): it steps down
// (stack sampling first: the starvation collector runs on an empty pin dir), then holds every
// window after its last step down within the limit while the storm goes on, steps back up after
// it, and has counted every launch once. One process's launches alone would not do it: they are counted in BPF and cost
// the agent nothing (docs/deploy.md).
TEST(Deploy, GovernorStepsDownUnderStormAndBackUp) {
  DpWorkload w;
  PinDir d;
  const std::vector<std::string> base = {"--interval", "0.1",    "--bridge-pin-dir",
                                         d.path,       "--nvml", w.dir() + "/no-libnvidia-ml.so.1"};
  auto flags = [&](const std::string& limit) {
    auto f = base;
    f.insert(f.end(), {"--max-cpu-percent", limit});
    return f;
  };
  auto launches = [&](const std::string& m) { return comm_launches(m, w); };
  std::vector<std::string> storm_proc = {w.path(), "driver", "0"};
  // The limit from this machine's idle cost (higher in a sanitized build): 2.5 times it, at least
  // 6 %; the agent's cost in a storm, which must be over it; and the launches one process makes.
  double idle = -1, storm = -1, per_proc;
  {
    Agent probe(w, flags("10000"));
    // The governor's windows as they end, read every half second (serving /metrics costs too).
    auto next_window = [&](int* last) {
      for (int i = 0; i < 30; i++) {
        sleep_s(0.5);
        std::string t = probe.metrics();
        int n = static_cast<int>(value_of(t, "gpuscope_governor_windows_total", {}));
        if (n <= *last) continue;
        *last = n;
        return value_of(t, "gpuscope_governor_cpu_ratio", {});
      }
      return -1.0;
    };
    // Windows 2 to 4: the least of them (the first holds the start: symbols, 400 probes).
    for (int last = 1; last < 4;) {
      double c = next_window(&last);
      ASSERT_GE(c, 0) << probe.proc().err();
      if (idle < 0 || c < idle) idle = c;
    }
    Process one(storm_proc);
    ASSERT_EQ(one.wait(30), 0) << one.err();
    std::string m = probe.until([&](const std::string& t) { return launches(t) > 0; });
    per_proc = launches(m);
    ASSERT_GT(per_proc, 0) << probe.proc().err();
    // The storm's cost: that of the first window to begin after the storm did.
    int first = static_cast<int>(value_of(probe.metrics(), "gpuscope_governor_windows_total", {}));
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
         std::chrono::steady_clock::now() < until;) {
      launch_batch(w);
      std::string t = probe.metrics();
      if (value_of(t, "gpuscope_governor_windows_total", {}) >= first + 2) {
        storm = value_of(t, "gpuscope_governor_cpu_ratio", {});
        break;
      }
    }
    ASSERT_GE(storm, 0) << "no governor window ended within 20 s of storm";
    EXPECT_EQ(probe.stop(), 0);
  }
  char limit[32];
  snprintf(limit, sizeof limit, "%.1f", std::max(6.0, 250 * idle));
  const double limit_ratio = std::stod(limit) / 100;
  ASSERT_GT(storm, limit_ratio) << "a storm costs this machine's agent " << storm << " of a core (idle " << idle
                                << "): not over the limit, it cannot drive the governor";
  Agent a(w, flags(limit));
  sleep_s(4.5);
  std::string m = a.metrics();
  ASSERT_EQ(value_of(m, "gpuscope_governor_level", {}), 0) << a.proc().err();
  EXPECT_EQ(value_of(m, "gpuscope_governor_limit_ratio", {}), limit_ratio);

  // The storm, until 8 windows have passed since the first step down (or 45 s). Each window is
  // recorded once, by its number: (the level it left for the next window, its CPU ratio).
  struct Window {
    double level, cpu;
  };
  std::map<int, Window> windows;
  int procs = 0, first_down = 0, deepest = 0;
  json health;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(45);
  while (std::chrono::steady_clock::now() < end) {
    launch_batch(w);
    procs += 10;
    std::string t = a.metrics();
    int n = static_cast<int>(value_of(t, "gpuscope_governor_windows_total", {}));
    double level = value_of(t, "gpuscope_governor_level", {});
    if (n <= 0 || windows.count(n)) continue;
    windows[n] = {level, value_of(t, "gpuscope_governor_cpu_ratio", {})};
    deepest = std::max(deepest, static_cast<int>(level));
    if (level > 0 && !first_down) first_down = n;
    if (first_down && n - first_down >= 8) {
      health = a.api("/api/health");
      break;
    }
  }
  std::ostringstream seen;
  for (auto& [n, win] : windows) seen << " #" << n << ": level " << win.level << " cpu " << win.cpu << ";";
  ASSERT_GE(deepest, 1) << "idle " << idle << ", storm " << storm << ", limit " << limit_ratio << ":" << seen.str()
                        << a.proc().err();
  // Within the limit but in the windows that stepped down (each over it, by definition); a
  // window is judged when the one before it was recorded too.
  int judged = 0, over = 0;
  for (auto& [n, win] : windows) {
    auto prev = windows.find(n - 1);
    if (n <= first_down || prev == windows.end()) continue;
    judged++;
    if (win.cpu <= limit_ratio) continue;
    over++;
    EXPECT_GT(win.level, prev->second.level)
        << "window " << n << " was over the limit " << limit_ratio << " and did not step down:" << seen.str();
  }
  EXPECT_GE(judged, 5) << seen.str();
  // One per level below the first, and a few tries to step back up while the storm lasts (each
  // undone try doubles the wait before the next).
  EXPECT_LE(over, deepest - 1 + 2) << "windows over the limit after the first step down:" << seen.str();
  ASSERT_TRUE(health["governor"]["reduced"].is_array()) << health.dump();
  EXPECT_EQ(health["governor"]["reduced"].size(), health["governor"]["level"].get<size_t>()) << health.dump();
  if (health["governor"]["level"].get<int>() > 0) {
    EXPECT_EQ(health["governor"]["reduced"][0], "stack sampling at 12 Hz (of 49)") << health.dump();
  }

  // Back up to level 0 once the storm is over; each window on the way is recorded (and printed).
  std::string back;
  std::ostringstream after;  // each window's level and CPU on the way back
  int last_window = 0;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       back.empty() && std::chrono::steady_clock::now() < until;) {
    sleep_s(0.5);
    std::string t = a.metrics();
    if (int n = static_cast<int>(value_of(t, "gpuscope_governor_windows_total", {})); n != last_window) {
      last_window = n;
      after << " #" << n << ": level " << value_of(t, "gpuscope_governor_level", {}) << " cpu "
            << value_of(t, "gpuscope_governor_cpu_ratio", {}) << ";";
    }
    if (value_of(t, "gpuscope_governor_level", {}) == 0) back = t;
  }
  std::cerr << "storm " << storm << " idle " << idle << " limit " << limit_ratio
            << ", windows after the storm:" << after.str() << "\n";
  EXPECT_NE(back, "") << "limit " << limit_ratio << ", windows after the storm:" << after.str() << "\n"
                      << a.proc().err();
  EXPECT_GE(value_of(back, "gpuscope_governor_level_changes_total", {}), 2 * deepest);
  // Exits handled in batches, deferred or not: every launch counted once.
  std::string all = a.until([&](const std::string& t) { return launches(t) == per_proc * procs; }, 10);
  EXPECT_NE(all, "") << "launches " << launches(a.metrics()) << " of " << per_proc * procs;
  EXPECT_EQ(value_of(a.metrics(), "gpuscope_events_lost_total", {{"collector", "kernels"}, {"reason", "row_map_full"}}),
            0);
  EXPECT_EQ(a.stop(), 0);
  std::string err = a.proc().err();
  EXPECT_NE(err.find(std::string("governor level 1: CPU")), std::string::npos) << err;
  EXPECT_NE(err.find(std::string("over ") + limit + "%: stack sampling at 12 Hz (of 49)"), std::string::npos) << err;
  EXPECT_NE(err.find("governor level 0: CPU"), std::string::npos) << err;
  EXPECT_NE(err.find("restored: stack sampling at 12 Hz (of 49)"), std::string::npos) << err;
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

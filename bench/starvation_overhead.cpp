// CPU cost per context switch of `gpuscope starvation`'s sched_switch hook, against an empty BPF
// program on the same tracepoint, in one run. Two threads of this process hand a futex back and
// forth on one CPU, so that CPU does little but switch between them; the cost per switch is
// their CPU time (schedstat) over their switch count (/proc/self/task/TID/status), both measured.
// Modes interleave round by round; figures are medians over rounds. gpuscope and its bridge
// (on the NVML stand-in) run on another CPU.
#include <CLI/CLI.hpp>
#include <linux/futex.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "core/bpf.h"
#include "core/system.h"
#include "starvation_empty.skel.h"

using namespace gpuscope;

namespace {

struct PingPong {
  std::atomic<int> turn{0};
  std::atomic<pid_t> tids[2] = {0, 0};
  int cpu;

  void run(int me) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    tids[me] = static_cast<pid_t>(syscall(SYS_gettid));
    for (;;) {
      int t;
      while ((t = turn.load()) != me) syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, t, nullptr, nullptr, 0);
      turn.store(1 - me);
      syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }
};

uint64_t schedstat(pid_t tid) {
  std::ifstream f(fmt::format("/proc/self/task/{}/schedstat", tid));
  uint64_t ns = 0;
  f >> ns;
  return ns;
}

uint64_t switches(pid_t tid) {
  std::ifstream f(fmt::format("/proc/self/task/{}/status", tid));
  uint64_t n = 0;
  for (std::string line; std::getline(f, line);)
    if (line.find("ctxt_switches:") != std::string::npos) n += std::stoull(line.substr(line.find(':') + 1));
  return n;
}

struct Sample {
  double ns_per_switch, switches_per_s;
};

Sample measure(PingPong& pp, double seconds) {
  auto snap = [&] {
    uint64_t cpu = 0, sw = 0;
    for (auto& t : pp.tids) cpu += schedstat(t), sw += switches(t);
    return std::make_pair(cpu, sw);
  };
  auto [c0, s0] = snap();
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto [c1, s1] = snap();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double sw = static_cast<double>(s1 - s0);
  return {static_cast<double>(c1 - c0) / sw, sw / wall};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU cost per context switch of gpuscope starvation's sched_switch hook"};
  std::string gpuscope, nvml;
  int rounds = 5;
  double seconds = 2;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--nvml", nvml, "NVML library for the bridge (the stand-in)")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_option("--seconds", seconds, "Seconds per measurement");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();
  std::string why;
  if (!ensure_bpffs(&why)) throw std::runtime_error(why);

  unsigned ncpu = std::thread::hardware_concurrency();
  PingPong pp;
  pp.cpu = static_cast<int>(ncpu - 1);
  // Everything else on CPU 0, away from the ping-pong (children inherit this).
  cpu_set_t zero;
  CPU_ZERO(&zero);
  CPU_SET(0, &zero);
  if (ncpu > 1) sched_setaffinity(0, sizeof zero, &zero);
  std::thread(&PingPong::run, &pp, 0).detach();
  std::thread(&PingPong::run, &pp, 1).detach();
  while (!pp.tids[0] || !pp.tids[1]) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  std::string dir = fmt::format("/sys/fs/bpf/gs-bench-starv-{}", getpid());
  std::string standin = fmt::format("/tmp/gs-bench-starv-{}.txt", getpid());
  mkdir(dir.c_str(), 0700);
  auto write_standin = [&](bool list_us, unsigned util = 0) {
    std::string tmp = standin + ".new";
    // Another pid keeps the per-pid map non-empty when this process is not listed.
    std::ofstream(tmp) << fmt::format("device 0 util {}\nprocess 0 1 1048576\n", util)
                       << (list_us ? fmt::format("process 0 {} 1048576\n", getpid()) : "");
    rename(tmp.c_str(), standin.c_str());
  };
  write_standin(false);
  setenv("NVML_STANDIN_FILE", standin.c_str(), 1);
  int rc = 0;
  {
    BgProc bridge({gpuscope, "bridge", "--nvml", nvml, "--pin-dir", dir}, "bridge publishing");
    auto starv = [&](std::vector<std::string> extra) {
      std::vector<std::string> a{gpuscope, "starvation", "--pin-dir", dir, "--min-idle-ms", "200"};
      a.insert(a.end(), extra.begin(), extra.end());
      return std::make_unique<BgProc>(a, "watching for GPU starvation");
    };
    const char* names[] = {"none",
                           "empty sched_switch program",
                           "starvation, threads of no GPU process",
                           "starvation, GPU threads, GPU busy",
                           "starvation, GPU threads counted (GPU idle)",
                           "starvation --collect-ustack, counted"};
    constexpr int kModes = 6;
    std::vector<double> ns[kModes], rate[kModes];
    auto record = [&](int m) {
      Sample s = measure(pp, seconds);
      ns[m].push_back(s.ns_per_switch);
      rate[m].push_back(s.switches_per_s);
    };
    for (int r = 0; r < rounds; r++) {
      record(0);
      {
        auto* e = starvation_empty_bpf__open_and_load();
        if (!e || starvation_empty_bpf__attach(e)) throw std::runtime_error("cannot attach the empty program");
        record(1);
        starvation_empty_bpf__destroy(e);
      }
      {
        auto s = starv({});
        record(2);
        write_standin(true, 50);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a bridge tick or two
        record(3);
        write_standin(true, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a tick, then min-idle
        record(4);
        s.reset();
        auto su = starv({"--collect-ustack"});
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        record(5);
        write_standin(false);
      }
    }
    double none = median(ns[0]), empty = median(ns[1]);
    auto core_pct = [](double extra_ns) { return extra_ns * 100000 / 1e9 * 100; };  // at 100k switches/s
    nlohmann::ordered_json j;
    j["cpu"] = pp.cpu;
    j["rounds"] = rounds;
    j["seconds"] = seconds;
    if (!json_out)
      printf(
          "%d rounds of %.1f s; two threads switching on CPU %d; medians over rounds\n"
          "%-44s %12s %10s %11s %18s\n",
          rounds, seconds, pp.cpu, "mode", "switches/s", "ns/switch", "+ns/switch", "% core @100k/s");
    for (int m = 0; m < kModes; m++) {
      double v = median(ns[m]), extra = v - none;
      j["modes"].push_back({{"mode", names[m]},
                            {"switches_per_s", median(rate[m])},
                            {"ns_per_switch", v},
                            {"extra_ns_per_switch", extra},
                            {"core_pct_at_100k", core_pct(extra)}});
      if (!json_out)
        printf("%-44s %12.0f %10.1f %11.1f %17.3f%%\n", names[m], median(rate[m]), v, extra, core_pct(extra));
    }
    double hook = median(ns[2]) - none, busy = median(ns[3]) - none, counted = median(ns[4]) - none;
    j["ratio_hook_to_empty_no_gpu"] = hook / (empty - none);
    j["ratio_hook_to_empty_gpu_busy"] = busy / (empty - none);
    j["ratio_hook_to_empty_gpu_counted"] = counted / (empty - none);
    if (json_out)
      printf("%s\n", j.dump().c_str());
    else
      printf(
          "starvation's hook / empty hook (extra ns per switch): %.2f (threads of no GPU process), %.2f (GPU "
          "threads, GPU busy), %.2f (GPU threads counted)\n",
          hook / (empty - none), busy / (empty - none), counted / (empty - none));
    if (!(median(rate[0]) > 0)) rc = 1;
  }
  unlink(standin.c_str());
  for (const char* p : {"gpu_meta", "gpu_device", "gpu_per_pid", "gpu_per_pid_per_device"})
    unlink((dir + "/" + p).c_str());
  rmdir(dir.c_str());
  fflush(stdout);
  _exit(rc);  // the ping-pong threads never return
}

// Figures for gpuscope bridge, against the NVML stand-in:
//  1. the bridge's CPU (getrusage of the child) at a 100 ms poll with 8 devices and 100 processes;
//  2. 50 ms GPU bursts at random phase to the 100 ms polls: how many a bridge with samples and
//     one polling only publish as busy.
// The stand-in's file plays the GPU: utilization now, and a sample every --sample-ms.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/system.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct Opts {
  std::string gpuscope, nvml;
  double cpu_seconds = 10;
  int bursts = 40;
  int burst_ms = 50, sample_ms = 20, poll_ms = 100;
};

void write_atomic(const std::string& path, const std::string& text) {
  std::ofstream(path + ".new") << text;
  fs::rename(path + ".new", path);
}

struct Child {
  pid_t pid;
  std::string out;
};

Child spawn(const Opts& o, const std::string& file, const std::string& pin_dir, std::vector<std::string> extra) {
  Child c{0, fmt::format("/tmp/bridge-bench-{}-{}.out", getpid(), pin_dir.substr(pin_dir.rfind('/') + 1))};
  std::vector<std::string> argv{o.gpuscope, "bridge", "--nvml", o.nvml, "--pin-dir", pin_dir};
  argv.insert(argv.end(), extra.begin(), extra.end());
  fflush(stdout);  // or the child's freopen writes our buffered lines again
  c.pid = fork();
  if (c.pid == 0) {
    setenv("NVML_STANDIN_FILE", file.c_str(), 1);
    if (!freopen(c.out.c_str(), "w", stdout)) _exit(127);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return c;
}

std::string make_pin_dir(const char* tag) {
  if (!gpuscope::ensure_bpffs()) throw std::runtime_error("no bpffs");
  std::string d = fmt::format("/sys/fs/bpf/bridge-bench-{}-{}", getpid(), tag);
  mkdir(d.c_str(), 0700);
  return d;
}

void remove_pin_dir(const std::string& d) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(d, ec)) fs::remove(e.path(), ec);
  fs::remove(d, ec);
}

bool cpu_figure(const Opts& o) {
  std::string file = fmt::format("/tmp/bridge-bench-{}-cpu.txt", getpid());
  std::string text;
  for (int d = 0; d < 8; d++)
    text += fmt::format(
        "device {} util {} memutil 10 mem_total 85899345920 mem_free 1 mem_used 4294967296 temp 50 "
        "power 200000 smclk 1980 memclk 2619 throttle 0 pcie_tx 1 pcie_rx 2 enc 0 dec 0 fan 30 "
        "compute_mode 0 ecc_corr 0 ecc_uncorr 0\n",
        d, d * 10);
  // 100 processes: 90 on one device, 10 on two.
  for (int p = 0; p < 100; p++) {
    text += fmt::format("process {} {} {}\n", p % 8, 10000 + p, (p + 1) * 1048576);
    if (p < 10) text += fmt::format("process {} {} {}\n", (p + 1) % 8, 10000 + p, 4096);
  }
  write_atomic(file, text);
  std::string dir = make_pin_dir("cpu");
  // Steady state only: CPU time from /proc/PID/schedstat (ns on CPU) between 2 s and 2 s + cpu_seconds,
  // so exec, dlopen and map creation are left out; getrusage at exit gives the whole run.
  Child c = spawn(o, file, dir,
                  {"--poll-interval-ms", std::to_string(o.poll_ms), "-d", fmt::format("{}", o.cpu_seconds + 3)});
  auto on_cpu_ns = [&] {
    std::ifstream f(fmt::format("/proc/{}/schedstat", c.pid));
    uint64_t ns = 0;
    f >> ns;
    return ns;
  };
  std::this_thread::sleep_for(2s);
  auto t0 = std::chrono::steady_clock::now();
  uint64_t c0 = on_cpu_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.cpu_seconds));
  uint64_t c1 = on_cpu_ns();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status;
  rusage ru{};
  wait4(c.pid, &status, 0, &ru);
  double user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  fmt::print(
      "cpu: 8 devices, 100 processes (110 pid-device entries), poll {} ms: steady state {:.3f}% of one core "
      "({:.1f} us per tick); whole run incl. start-up (getrusage) user {:.3f} s + sys {:.3f} s over {:.1f} s "
      "(exit {})\n",
      o.poll_ms, 100.0 * (c1 - c0) / 1e9 / wall, (c1 - c0) / 1e3 / (wall * 1000 / o.poll_ms), user, sys,
      o.cpu_seconds + 3, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  remove_pin_dir(dir);
  unlink(file.c_str());
  unlink(c.out.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The GPU as the stand-in shows it: the current utilization and the samples of the last 2 s.
class FakeGpu {
 public:
  explicit FakeGpu(std::string file) : file_(std::move(file)) {}
  void set(bool busy, uint64_t now_us) {
    busy_ = busy;
    samples_.emplace_back(now_us, busy ? 100 : 0);
    while (!samples_.empty() && samples_.front().first + 2000000 < now_us) samples_.pop_front();
    std::string t = fmt::format("device 0 util {}\n", busy_ ? 100 : 0);
    for (auto& [ts, v] : samples_) t += fmt::format("sample 0 {} {}\n", ts, v);
    write_atomic(file_, t);
  }

 private:
  std::string file_;
  bool busy_ = false;
  std::deque<std::pair<uint64_t, int>> samples_;
};

int seen(const std::string& out, const std::vector<std::pair<uint64_t, uint64_t>>& bursts_ns) {
  std::vector<uint64_t> busy_ts;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("type", "") == "device" && j.value("sm_util_pct", 0) > 0)
      busy_ts.push_back(j["timestamp_ns"]);
  }
  int n = 0;
  for (auto [a, b] : bursts_ns) {
    bool hit = false;
    for (auto ts : busy_ts) hit |= ts >= a && ts <= b + 25'000'000;  // a poll up to one write late
    n += hit;
  }
  return n;
}

bool burst_figure(const Opts& o) {
  std::string file = fmt::format("/tmp/bridge-bench-{}-burst.txt", getpid());
  FakeGpu gpu(file);
  gpu.set(false, gpuscope::realtime_ns() / 1000);
  std::string d1 = make_pin_dir("samples"), d2 = make_pin_dir("poll");
  std::vector<std::string> common{"--json", "--poll-interval-ms", std::to_string(o.poll_ms)};
  Child with = spawn(o, file, d1, common);
  auto poll_args = common;
  poll_args.push_back("--no-samples");
  Child without = spawn(o, file, d2, poll_args);
  std::this_thread::sleep_for(500ms);

  // The GPU's sample clock runs on its own; bursts start at random phase to it and to the polls.
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> idle_ms(250, 450);
  std::vector<std::pair<uint64_t, uint64_t>> bursts;
  auto next_sample = std::chrono::steady_clock::now();
  auto step = std::chrono::milliseconds(o.sample_ms);
  for (int i = 0; i < o.bursts; i++) {
    auto idle_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(idle_ms(rng));
    for (; next_sample < idle_end; next_sample += step) {
      std::this_thread::sleep_until(next_sample);
      gpu.set(false, gpuscope::realtime_ns() / 1000);
    }
    std::this_thread::sleep_until(idle_end);
    uint64_t start = gpuscope::realtime_ns();
    gpu.set(true, start / 1000);
    auto burst_end = idle_end + std::chrono::milliseconds(o.burst_ms);
    for (; next_sample < burst_end; next_sample += step) {
      std::this_thread::sleep_until(next_sample);
      gpu.set(true, gpuscope::realtime_ns() / 1000);
    }
    std::this_thread::sleep_until(burst_end);
    uint64_t end = gpuscope::realtime_ns();
    gpu.set(false, end / 1000);
    bursts.emplace_back(start, end);
  }
  std::this_thread::sleep_for(400ms);
  for (Child* c : {&with, &without}) {
    kill(c->pid, SIGINT);
    waitpid(c->pid, nullptr, 0);
  }
  std::ifstream a(with.out), b(without.out);
  std::stringstream sa, sb;
  sa << a.rdbuf();
  sb << b.rdbuf();
  int n_with = seen(sa.str(), bursts), n_without = seen(sb.str(), bursts);
  fmt::print(
      "bursts: {} bursts of {} ms at random phase, poll {} ms, a sample every {} ms: seen with samples {}/{} "
      "({:.0f}%), polling only {}/{} ({:.0f}%)\n",
      o.bursts, o.burst_ms, o.poll_ms, o.sample_ms, n_with, o.bursts, 100.0 * n_with / o.bursts, n_without, o.bursts,
      100.0 * n_without / o.bursts);
  for (auto& d : {d1, d2}) remove_pin_dir(d);
  for (auto& f : {file, with.out, without.out}) unlink(f.c_str());
  return n_with > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--gpuscope")
      o.gpuscope = v;
    else if (k == "--nvml")
      o.nvml = v;
    else if (k == "--cpu-seconds")
      o.cpu_seconds = std::stod(v);
    else if (k == "--bursts")
      o.bursts = std::stoi(v);
    else if (k == "--sample-ms")
      o.sample_ms = std::stoi(v);
    else {
      fprintf(stderr,
              "usage: bridge_bench --gpuscope PATH --nvml PATH [--cpu-seconds S] [--bursts N] [--sample-ms MS]\n");
      return 2;
    }
  }
  if (o.gpuscope.empty() || o.nvml.empty()) {
    fprintf(stderr, "bridge_bench: --gpuscope and --nvml are required\n");
    return 2;
  }
  bool ok = cpu_figure(o);
  ok &= burst_figure(o);
  return ok ? 0 : 1;
}

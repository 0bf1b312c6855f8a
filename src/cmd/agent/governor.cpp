#include "cmd/agent/governor.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/cli.h"
#include "core/system.h"

namespace gpuscope {

double self_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

namespace {
double mono_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr const char* kCpuFileEnv = "GPUSCOPE_TEST_GOVERNOR_CPU_FILE";

double read_cpu_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) throw UsageError(std::string(kCpuFileEnv) + ": cannot read " + path);
  std::string s = text.str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return parse_number(kCpuFileEnv, s, "CPU seconds", 0, 1e12, false);
}
}  // namespace

std::function<double()> agent_cpu_source() {
  const char* path = getenv(kCpuFileEnv);
  if (!path) return self_cpu_seconds;
  auto last = std::make_shared<double>(read_cpu_file(path));
  return [p = std::string(path), last] {
    try {
      *last = read_cpu_file(p);
    } catch (const UsageError&) {
      // A test rewriting it: the last reading stands.
    }
    return *last;
  };
}

Governor::Governor(Config cfg, std::vector<Step> steps, std::function<void(unsigned)> on_change, Sources src)
    : cfg_(cfg),
      steps_(std::move(steps)),
      on_change_(std::move(on_change)),
      src_(std::move(src)),
      calm_needed_(cfg.calm_windows) {
  if (!src_.cpu_s) src_.cpu_s = self_cpu_seconds;
  if (!src_.now_s) src_.now_s = mono_s;
}

unsigned Governor::decide(double cpu) {
  cpu_percent_ = cpu;
  bool just_up = just_up_;
  just_up_ = false;
  if (cpu > cfg_.max_cpu_percent) {
    calm_ = 0;
    // Back over the limit straight after stepping up: the load that drove it down is still
    // there, so it waits twice as long before trying again (else it would swing every few windows).
    if (just_up) calm_needed_ = std::min(2 * calm_needed_, 64u);
    if (level_ < steps_.size()) return ++level_;
    return level_;
  }
  if (just_up) calm_needed_ = cfg_.calm_windows;  // the step up held
  // A window between half the limit and the limit neither counts nor resets the calm count: on a
  // busy host an idle agent's windows scatter around its mean, and requiring a run of them all
  // under the margin could keep it down long after the load went away.
  if (level_ && cpu < 0.5 * cfg_.max_cpu_percent && ++calm_ >= calm_needed_) {
    calm_ = 0;
    just_up_ = true;
    return --level_;
  }
  return level_;
}

void Governor::tick() {
  double now = src_.now_s(), cpu = src_.cpu_s();
  if (window_cpu0_s_ < 0) {
    window_cpu0_s_ = cpu;
    window_t0_s_ = now;
    return;
  }
  double dt = now - window_t0_s_;
  if (dt < cfg_.window_s) return;
  unsigned before = level_;
  windows_++;
  unsigned after = decide(100 * (cpu - window_cpu0_s_) / dt);
  window_cpu0_s_ = src_.cpu_s();  // the logging below is the governor's, not the window's
  window_t0_s_ = src_.now_s();
  if (after == before) return;
  changes_++;
  if (after > before)
    fprintf(stderr, "gpuscope: agent: governor level %u: CPU %.1f%% over %.1f%%: %s\n", after, cpu_percent_,
            cfg_.max_cpu_percent, steps_[after - 1].name.c_str());
  else
    fprintf(stderr, "gpuscope: agent: governor level %u: CPU %.1f%%, restored: %s\n", after, cpu_percent_,
            steps_[after].name.c_str());
  if (on_change_) on_change_(after);
}

void Governor::add_metrics(PromSet& m) const {
  using T = PromSet::Type;
  m.family("gpuscope_governor_level", T::gauge,
           "Overhead governor: 0 with everything on; each level higher cuts the agent's work (docs/deploy.md)");
  m.add("gpuscope_governor_level", {}, level_);
  m.family("gpuscope_governor_cpu_ratio", T::gauge, "The agent's CPU use over the governor's last window, in cores");
  m.add("gpuscope_governor_cpu_ratio", {}, cpu_percent_ / 100);
  m.family("gpuscope_governor_limit_ratio", T::gauge, "--max-cpu-percent, in cores");
  m.add("gpuscope_governor_limit_ratio", {}, cfg_.max_cpu_percent / 100);
  m.family("gpuscope_governor_windows_total", T::counter,
           "Windows the governor has measured (gpuscope_governor_cpu_ratio is the last one's)");
  m.add("gpuscope_governor_windows_total", {}, static_cast<double>(windows_));
  m.family("gpuscope_governor_level_changes_total", T::counter, "Times the governor stepped down or up");
  m.add("gpuscope_governor_level_changes_total", {}, static_cast<double>(changes_));
}

}  // namespace gpuscope

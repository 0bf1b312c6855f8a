#pragma once
// The overhead governor: keeps the agent's own CPU use (all its threads, user and system) under
// --max-cpu-percent of one core. Past the limit over a window it steps down one level, each level
// cutting work by its factor; it steps back up after a few windows under half the limit, none
// over it in between (a margin, so that restoring does not push it straight back over; when it
// does anyway, the next step up waits twice as long).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cmd/agent/prom.h"

namespace gpuscope {

class Governor {
 public:
  struct Step {
    std::string name;  // what this level reduces (logged and in /api/health)
    double factor;     // work at this level is 1/factor of the level above
  };
  struct Config {
    double max_cpu_percent = 2;
    double window_s = 2;
    unsigned calm_windows = 3;  // windows under the bar before stepping back up
  };
  // What a window measures; empty ones are the process's own CPU seconds and the monotonic clock.
  struct Sources {
    std::function<double()> cpu_s;  // CPU seconds used so far
    std::function<double()> now_s;
  };
  // on_change(level): called on the loop thread when the level changes (0 = everything on).
  Governor(Config cfg, std::vector<Step> steps, std::function<void(unsigned)> on_change, Sources src = {});

  // Call from the loop thread at least once per window; measures and steps.
  void tick();
  unsigned level() const { return level_; }
  double cpu_percent() const { return cpu_percent_; }  // the last full window
  const std::vector<Step>& steps() const { return steps_; }
  void add_metrics(PromSet& m) const;
  // Testable core: the level after a window that used `cpu_percent` at the current level.
  unsigned decide(double cpu_percent);

 private:
  Config cfg_;
  std::vector<Step> steps_;
  std::function<void(unsigned)> on_change_;
  Sources src_;
  unsigned level_ = 0, calm_ = 0;
  unsigned calm_needed_;  // calm_windows; doubled while step ups are undone at once
  bool just_up_ = false;
  uint64_t changes_ = 0, windows_ = 0;
  double cpu_percent_ = 0;
  double window_cpu0_s_ = -1, window_t0_s_ = 0;
};

// CPU seconds the process has used (every thread, user and system).
double self_cpu_seconds();

// The agent's CPU source: self_cpu_seconds, or, for tests only, the number of seconds written in
// the file that GPUSCOPE_TEST_GOVERNOR_CPU_FILE names, read at every window (the last good
// reading while it cannot be read), so that a test steps the real agent's governor without
// loading the machine. Throws UsageError when the file cannot be read at the start.
std::function<double()> agent_cpu_source();

}  // namespace gpuscope

#pragma once
// The starvation collector: loads starvation.bpf.c on the bridge's pins, follows the bridge
// (reloading on new pins), and hands out, per collect(), each thread's starving CPU time since
// the last collect, with stacks and folded sample weights. Its notes (bridge state) go to
// Config::log. It never prints.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/scope.h"
#include "core/flamegraph.h"

namespace gpuscope {

struct StarvationRow {
  uint32_t pid = 0, tid = 0;
  std::string comm, thread;
  uint64_t cpu_time_ns = 0;                 // since the last collect
  uint64_t hit_count = 0;                   // since the last collect
  uint64_t idle_ns = 0;                     // GPU idle at the latest hit
  std::vector<std::string> ustack, kstack;  // with Config::collect_ustack / collect_kstack
};

struct StarvationReport {
  std::vector<StarvationRow> rows;
  Folded folded;  // with Config::fold: sampled ns per stack since the last collect
  uint64_t folded_samples = 0;
  std::vector<std::pair<uint32_t, uint32_t>> gone;  // (pid, tid) of threads that left the maps
};

struct StarvationStats {
  uint64_t lost_threads = 0, lost_samples = 0, lost_stacks = 0;
  uint64_t samples = 0, latch_ticks = 0;
  bool switch_hooked = false;    // the sched_switch hook is on now
  uint64_t switch_attaches = 0;  // times it was attached, the one at load included
  uint64_t py_walks = 0, py_no_tstate = 0;
  bool py = false;
  std::string py_drops;  // "" or ", ..." as the subcommand's drop line ends
};

class Starvation;

class StarvationCollector {
 public:
  struct Config {
    Scope scope;
    uint64_t min_gpu_mem_bytes = 1;
    uint64_t min_idle_ms = 1000;
    uint64_t stale_threshold_ms = 300;
    std::string pin_dir = "/sys/fs/bpf";
    bool collect_ustack = false;
    bool collect_kstack = false;
    bool no_py_frames = false;
    unsigned sample_hz = 49;
    bool fold = false;                            // folded stacks in each report
    uint32_t max_threads = 0;                     // threads and sample keys kept; 0: defaults
    uint32_t max_stacks = 0;                      // distinct native and Python stacks kept; 0: defaults
    std::function<void(const std::string&)> log;  // one line, no newline; default: stderr
  };
  // Bad values and missing pids throw UsageError before anything is loaded.
  static void validate(const Config& c);
  explicit StarvationCollector(Config c);
  ~StarvationCollector();
  // Every 20-50 ms: the Python walk's notices, the bridge's process list, the bridge's state.
  void tick();
  StarvationReport collect();
  StarvationStats stats() const;
  uint64_t period_ns() const;
  // Changes the stack sampling rate (the agent's governor): samples so far keep their weight.
  void set_sample_hz(unsigned hz);
  // "fresh", "stale" or "none".
  std::string bridge_state() const;
  void stop();

 private:
  std::unique_ptr<Starvation> impl_;
};

}  // namespace gpuscope

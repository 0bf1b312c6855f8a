#pragma once
// The agent's anomaly rules, evaluated once per refresh on what the collectors hold:
//  - unexpected_allocation: a process's GPU memory passes --alloc-alert-bytes while another
//    process already holds GPU memory (a background job taking the GPU someone trains on);
//  - memory_growth: a process's outstanding GPU memory has risen for N refreshes in a row
//    (refreshes where it stayed put do not break the streak; a fall does);
//  - error_burst: failed CUDA calls of one API at more than --error-burst-rate per second.
// Each firing is counted (gpuscope_anomalies_total{rule}), kept for /api/anomalies and logged.
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cmd/agent/prom.h"

namespace gpuscope {

struct AnomalyConfig {
  uint64_t alloc_alert_bytes = 1ull << 30;
  unsigned growth_intervals = 30;
  double error_burst_per_s = 50;
};

struct AnomalyEvent {
  std::string rule;
  double time_s = 0;  // Unix time
  uint32_t pid = 0;   // 0 for error_burst (counted per API, not per process)
  std::string comm, detail;
  uint64_t bytes = 0;      // unexpected_allocation, memory_growth: the process's GPU memory
  uint32_t other_pid = 0;  // unexpected_allocation: a process that held GPU memory before
  std::string api;         // error_burst
  double rate_per_s = 0;   // error_burst
};

// What the rules read at a refresh, filled by the collectors that have it.
struct AnomalyInput {
  struct ProcMem {
    uint32_t pid;
    std::string comm;
    uint64_t gpu_bytes;  // device memory outstanding
  };
  std::vector<ProcMem> procs;              // running processes
  std::map<std::string, uint64_t> errors;  // failed calls so far per API
};

class AnomalyRules {
 public:
  static constexpr const char* kRules[] = {"unexpected_allocation", "memory_growth", "error_burst"};
  using ProcMem = AnomalyInput::ProcMem;
  explicit AnomalyRules(AnomalyConfig cfg) : cfg_(cfg) {}

  // One refresh: the running processes' memory, failed calls so far per API (totals since
  // start), the seconds since the last call. Returns what fired now.
  std::vector<AnomalyEvent> observe(const std::vector<ProcMem>& procs, const std::map<std::string, uint64_t>& errors,
                                    double dt_s);
  void add_metrics(PromSet& m) const;
  std::string json() const;  // /api/anomalies

 private:
  struct ProcState {
    uint64_t last_bytes = 0;
    unsigned rises = 0;       // refreshes with a rise since the last fall
    bool grew_fired = false;  // memory_growth said once per streak
  };
  AnomalyConfig cfg_;
  std::map<uint32_t, ProcState> procs_;
  std::map<std::string, uint64_t> errors_;  // last totals
  std::set<std::string> bursting_;          // APIs in a burst now (fired once per burst)
  mutable std::mutex mu_;                   // counts_ and recent_: read by the HTTP thread
  std::map<std::string, uint64_t> counts_;
  std::deque<AnomalyEvent> recent_;
};

}  // namespace gpuscope

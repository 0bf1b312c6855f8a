#pragma once
// The latency collector: per-call timing aggregated in BPF (log2 histograms, running maximum,
// return-code counts), read back as cumulative snapshots. latency.h holds the map layouts it
// shares with latency.bpf.c; this header is userspace only.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/uprobe_session.h"
#include "latency/histogram.h"

struct latency_bpf;

namespace gpuscope {

// One histogram row: the calls of one API (site table row), host-wide or of one process.
// Every count is cumulative since the collector started.
struct LatencyRow {
  Buckets buckets{};                 // log2 buckets (histogram.h: bucket_low/bucket_le)
  uint64_t max_ns = 0;               // the longest call since start
  std::map<int32_t, uint64_t> rets;  // return code -> calls (cudaError_t or CUresult by layer)
};

struct LatencySnapshot {
  using Key = std::pair<uint32_t, unsigned>;  // (pid, or 0 unless per_process; api row)
  std::map<Key, LatencyRow> rows;
};

class LatencyCollector {
 public:
  struct Config {
    std::vector<bool> apis;  // rows to time (select_apis)
    bool per_process = false;
    std::string comm;
  };
  struct Stats {
    uint64_t untimed_no_state = 0;     // calls not timed: no per-thread state
    uint64_t uncounted_hist_full = 0;  // calls not counted: histogram map full
  };

  // Loads the programs and hands them to the session, which attaches them.
  LatencyCollector(UprobeSession& session, Config cfg);
  ~LatencyCollector();
  const Config& config() const { return cfg_; }
  // Everything counted so far; rows of processes that have exited stay.
  LatencySnapshot snapshot() const;
  Stats stats() const;

 private:
  Config cfg_;
  std::unique_ptr<latency_bpf, void (*)(latency_bpf*)> skel_;
};

// The name of a return code of an API row: a cudaError_t or CUresult name by its layer.
std::string latency_ret_name(unsigned api, int32_t ret);

}  // namespace gpuscope

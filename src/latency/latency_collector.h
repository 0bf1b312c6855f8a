#pragma once
// The latency collector: per-call timing aggregated in BPF (log2 histograms, running maximum,
// return-code counts), read back as cumulative snapshots. latency.h holds the map layouts it
// shares with latency.bpf.c; this header is userspace only.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/uprobe_session.h"
#include "core/histogram.h"
#include "core/launch_timing.h"

struct latency_bpf;

namespace gpuscope {

// One histogram row: the calls of one API (site table row), host-wide or of one process.
// Every count is cumulative since the collector started.
struct LatencyRow {
  Buckets buckets{};                 // log2 buckets (histogram.h: bucket_low/bucket_le)
  uint64_t max_ns = 0;               // the longest call since start
  std::map<int32_t, uint64_t> rets;  // return code -> calls (cudaError_t or CUresult by layer)
};

// What the probes of one site-table row took since start: every entry, and those not timed by
// why. Calls timed = entries - nested - filtered - unsampled.
struct LatencySiteCounts {
  uint64_t entries = 0;
  uint64_t nested = 0;     // inside an outer call of the same layer
  uint64_t filtered = 0;   // -c did not match
  uint64_t unsampled = 0;  // launches left untimed by the launch sample
  uint64_t timed() const { return entries - nested - filtered - unsampled; }
};

struct LatencySnapshot {
  using Key = std::pair<uint32_t, unsigned>;  // (pid, or 0 unless per_process; api row)
  std::map<Key, LatencyRow> rows;
  std::vector<LatencySiteCounts> sites;  // by row, GS_API_COUNT entries
  unsigned launch_sample = 1;            // one launch in this many was timed
};

class LatencyCollector {
 public:
  struct Config {
    std::vector<bool> apis;  // rows to time (select_apis)
    bool per_process = false;
    Scope scope;
    // Time one launch in this many (GS_ROLE_LAUNCH rows); honoured only with uprobe sessions,
    // where an untimed launch costs no return probe. 1: every call.
    unsigned launch_sample = 1;
    // Where set, the host's programs time the rows of `apis` it can (with uprobe sessions, and
    // not per process): latency's maps are the host's, and latency does not probe those rows.
    std::optional<LaunchTimingHost> launch_host;
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
  // Whether the probes run as uprobe sessions (kernel 6.12+; GPUSCOPE_UPROBE_SESSION=0 turns
  // them off), so that untimed calls take no return probe.
  bool session() const { return session_; }
  // The launch sample in force: cfg.launch_sample with sessions, else 1.
  unsigned launch_sample() const { return session_ ? cfg_.launch_sample : 1; }
  // The rows the launch host times (none without one).
  const std::vector<bool>& hosted_rows() const { return hosted_; }

 private:
  std::vector<LatencySiteCounts> sites() const;

  Config cfg_;
  bool session_ = false;
  std::vector<bool> hosted_;
  std::unique_ptr<latency_bpf, void (*)(latency_bpf*)> skel_;
};

// The rows an always-on collector times unless told otherwise: every call row but those a
// framework makes around each operation for little to time (cudaGetDevice, cudaSetDevice, the
// context switches), and the runtime's launches, which every one reaches the driver's launch
// rows (timed there, and probed there by kernels already).
std::vector<bool> always_on_latency_rows();

// The name of a return code of an API row: a cudaError_t or CUresult name by its layer.
std::string latency_ret_name(unsigned api, int32_t ret);

}  // namespace gpuscope

#pragma once
// GPU time per process, for the kernels collector's /api/kernels rows.
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "gputime/gputime_collector.h"

namespace gpuscope {

struct GpuTimeOfProcess {
  std::map<std::string, KernelGpuTime> kernels;  // by kernel name
  std::map<uint32_t, uint64_t> busy_ns;          // by device
  std::set<std::string> named;                   // kernels with their own series (sticky)
};

// What the gputime collector offers the others (CollectorServices): the GPU time of one process
// life (ProcEntry::id), or null.
class GpuTimeByProcess {
 public:
  virtual const GpuTimeOfProcess* of(uint64_t proc_id) const = 0;

 protected:
  ~GpuTimeByProcess() = default;
};

}  // namespace gpuscope

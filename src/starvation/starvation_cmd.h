#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpuscope {

struct StarvationOptions {
  std::vector<pid_t> pids;
  std::string comm;
  uint64_t min_gpu_mem_bytes = 1;
  uint64_t min_idle_ms = 1000;
  uint64_t stale_threshold_ms = 300;
  std::string pin_dir = "/sys/fs/bpf";
  bool collect_ustack = false;
  bool collect_kstack = false;
  bool no_py_frames = false;  // no CPython frame walk
  unsigned sample_hz = 49;
  std::string folded;  // file for folded stacks
  std::string svg;     // file for the flame graph
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_starvation(const StarvationOptions& opts);

}  // namespace gpuscope

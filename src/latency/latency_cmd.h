#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace gpuscope {

struct LatencyOptions {
  std::vector<pid_t> pids;
  std::string comm;
  std::vector<std::string> libs;
  std::vector<std::string> apis{
      "cudaMalloc",     "cudaFree",     "cudaMemcpy", "cudaStreamSynchronize", "cudaDeviceSynchronize",
      "cuLaunchKernel", "cuMemAlloc_v2"};
  bool per_process = false;
  double interval_s = 0;  // 0: print once, at the end
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_latency(const LatencyOptions& opts);

}  // namespace gpuscope

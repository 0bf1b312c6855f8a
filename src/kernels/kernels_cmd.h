#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace gpuscope {

struct KernelsOptions {
  std::vector<pid_t> pids;
  std::string comm;
  std::vector<std::string> libs;
  double interval_s = 1;
  unsigned top = 0;  // 0: every row
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_kernels(const KernelsOptions& opts);

}  // namespace gpuscope

#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace gpuscope {

struct MemleakOptions {
  std::vector<pid_t> pids;
  std::string comm;
  std::vector<std::string> libs;
  double interval_s = 5;
  double min_age_s = 0;  // 0: no suspected leaks while processes run
  bool stacks = false;
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_memleak(const MemleakOptions& opts);

}  // namespace gpuscope

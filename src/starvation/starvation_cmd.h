#pragma once
#include <string>

#include "starvation/starvation_collector.h"

namespace gpuscope {

// The collector's settings, and what only the subcommand's view needs.
struct StarvationOptions {
  StarvationCollector::Config collector;
  std::string folded;  // file for folded stacks
  std::string svg;     // file for the flame graph
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_starvation(const StarvationOptions& opts);

}  // namespace gpuscope

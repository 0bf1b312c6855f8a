#pragma once
#include <string>

#include "core/cli.h"
#include "starvation/starvation_collector.h"

namespace gpuscope {

// The collector's settings, and what only the subcommand's view needs.
struct StarvationOptions {
  CommonFlags common;
  StarvationCollector::Config collector;
  std::string folded;                      // file for folded stacks
  std::string svg;                         // file for the flame graph
  std::string nvml = "libnvidia-ml.so.1";  // for the bridge run here when none is publishing
};

int run_starvation(const StarvationOptions& opts);

}  // namespace gpuscope

#pragma once
#include <string>

namespace gpuscope {

struct BridgeOptions {
  std::string nvml = "libnvidia-ml.so.1";
  std::string pin_dir = "/sys/fs/bpf";  // kDefaultPinDir: bpffs is mounted there if missing
  unsigned poll_interval_ms = 100;
  bool no_samples = false;  // poll only: the figure's baseline
  bool json = false;
  bool verbose = false;
  double duration_s = 0;
};

int run_bridge(const BridgeOptions& opts);

}  // namespace gpuscope

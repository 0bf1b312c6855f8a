#pragma once
#include <cstddef>
#include <memory>
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

class Bridge;

// The bridge inside another process (the agent): takes the pins as `gpuscope bridge` does
// (refusing while a live bridge holds them) and publishes one tick per tick() call.
class BridgePublisher {
 public:
  explicit BridgePublisher(const BridgeOptions& o);
  ~BridgePublisher();
  // False when another bridge took the pins over.
  bool tick();
  size_t devices() const;

 private:
  std::unique_ptr<Bridge> impl_;
};

}  // namespace gpuscope

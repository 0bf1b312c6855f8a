#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpuscope {

struct BridgeOptions {
  std::string nvml = "libnvidia-ml.so.1";
  std::string pin_dir = "/sys/fs/bpf";  // kDefaultPinDir: bpffs is mounted there if missing
  unsigned poll_interval_ms = 100;
  // Device details (memory, temperature, power, clocks, ECC, ...) and the process list are read
  // at most this often; every tick reads utilization. 0: everything every tick.
  unsigned detail_interval_ms = 0;
  bool no_samples = false;  // poll only: the figure's baseline
  bool json = false;
  bool verbose = false;
  double duration_s = 0;
};

int run_bridge(const BridgeOptions& opts);

// Who holds the pins under a directory, judged as a starting bridge judges it: a holder that
// is not publishing (exited, killed, stopped) is taken over.
struct BridgeHolder {
  uint32_t pid = 0;         // helper_pid of the pinned meta; 0 when there is none
  bool publishing = false;  // alive and ticked within a few of its poll intervals
  uint64_t age_ms = 0;      // since its last tick
};
BridgeHolder bridge_holder(const std::string& pin_dir);

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

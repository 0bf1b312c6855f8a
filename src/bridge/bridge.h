#pragma once
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bridge/nvml.h"

namespace gpuscope {

// Called on the bridge's NVML event thread, one event at a time: it must be quick and must not
// subscribe from inside.
using NvmlEventHandler = std::function<void(const NvmlEventRecord&)>;

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
  // Hands each NVML event received from now on to `fn` as well (docs/bridge.md, "NVML events").
  void on_event(NvmlEventHandler fn);
  // Each device's index, UUID and PCI bus id as NVML gives them.
  std::vector<NvmlDeviceId> device_ids() const;

 private:
  std::unique_ptr<Bridge> impl_;
};

// A BridgePublisher ticking on a thread of its own every poll interval, so that the owner's
// loop (rescans, refreshes) never makes the data look stale to readers (starvation calls it
// stale after 300 ms). SIGINT and SIGTERM stay with the owner's threads, away from it and from
// the NVML event thread.
class BridgeThread {
 public:
  explicit BridgeThread(const BridgeOptions& o);  // throws as BridgePublisher does
  ~BridgeThread();
  // Stopped: another bridge took the pins over, or a tick failed (why() says what).
  bool done() const { return done_; }
  std::string why() const;
  // Each NVML event (Xid, double-bit ECC, …) from now on, on the bridge's event thread, which
  // waits for them whether or not ticks go on.
  void on_event(NvmlEventHandler fn) { pub_.on_event(std::move(fn)); }
  std::vector<NvmlDeviceId> device_ids() const { return pub_.device_ids(); }

 private:
  BridgePublisher pub_;
  unsigned poll_ms_;
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::string why_;
  std::jthread thread_;  // last: it starts once the rest exists
};

}  // namespace gpuscope

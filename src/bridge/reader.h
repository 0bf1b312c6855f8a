#pragma once
// The one reader of the bridge's pinned maps (schema 1, bridge/bridge_maps.h): the agent's
// device series and processes, starvation's maps and verdict state, timeline's counters, and a
// starting bridge's look at who holds the pins.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bridge/bridge_maps.h"
#include "core/fd.h"

namespace gpuscope {

struct DeviceSample {
  unsigned gpu = 0;
  std::string uuid, model;
  gpu_device_metrics m{};
};

// One process on one device, as the bridge lists it (NVML's per-process samples, the highest of
// the bridge's tick, as Inspektor Gadget's bridge publishes them).
struct ProcessGpuSample {
  uint32_t pid = 0;
  std::string comm;
  unsigned gpu = 0;
  gpu_pid_device m{};
};

// The four pins, opened together; `ok` when all are there with the contract's layout.
struct BridgePins {
  enum Map { kMeta, kDevice, kPerPid, kPerPidDevice, kCount };
  static constexpr const char* kNames[kCount] = {GPU_PIN_META, GPU_PIN_DEVICE, GPU_PIN_PER_PID,
                                                 GPU_PIN_PER_PID_PER_DEVICE};
  Fd fds[kCount];
  uint32_t ids[kCount] = {};  // map ids: other ids are other maps
  bool ok = false;
  bool same(const BridgePins& o) const;
};

enum class BridgeState { None, Stale, Fresh };

// The bridge as its meta tells: none before a first tick, stale past a threshold.
struct BridgeView {
  BridgeState state = BridgeState::None;
  gpu_meta meta{};
  uint64_t age_ms = 0;
};

class BridgeReader {
 public:
  // nvml: the library to dlopen for names ("" or unloadable: UUID and modelName stay empty).
  explicit BridgeReader(std::string pin_dir, const std::string& nvml = "");
  ~BridgeReader();
  BridgeReader(const BridgeReader&) = delete;
  BridgeReader& operator=(const BridgeReader&) = delete;
  const std::string& pin_dir() const { return dir_; }
  const std::string& hostname() const { return host_; }

  // The devices now; throws std::runtime_error saying why there are none (no bridge, stale).
  std::vector<DeviceSample> read(double* age_s);
  // The processes on the devices that are still running, after a read() that succeeded.
  std::vector<ProcessGpuSample> read_processes() const;

  // The four pins with the contract's layout, for programs that read them in place.
  BridgePins open_pins() const;
  static BridgeView view(const BridgePins& p, uint64_t stale_ms);
  // The host pids listed in gpu_per_pid (fd: the pin, or a program's map of its layout).
  static std::vector<uint32_t> pids(int per_pid_fd);

  // The meta and device pins are there.
  bool present() const;
  // The devices of a tick newer than the one this last returned and at most max_age_ms old;
  // nullopt when there is none. Device timestamps are CLOCK_REALTIME: meta.clock_offset_ns
  // takes them to CLOCK_BOOTTIME.
  struct Tick {
    gpu_meta meta{};
    std::vector<DeviceSample> devices;
  };
  std::optional<Tick> next_tick(uint64_t max_age_ms);

  // The meta entry, when the meta pin is there with the contract's layout.
  static std::optional<gpu_meta> read_meta(const std::string& pin_dir);

 private:
  std::string pin(int map) const { return dir_ + "/" + BridgePins::kNames[map]; }
  void read_names(uint32_t n_devices);
  std::vector<DeviceSample> devices(int dev_fd, uint32_t n_devices) const;

  std::string dir_, host_;
  void* nvml_ = nullptr;
  std::vector<std::pair<std::string, std::string>> names_;  // (UUID, model) by index, read once
  uint64_t last_tick_ = 0;                                  // next_tick's
};

// Milliseconds since the meta's last tick (0 for one in the future).
uint64_t bridge_age_ms(const gpu_meta& m);

}  // namespace gpuscope

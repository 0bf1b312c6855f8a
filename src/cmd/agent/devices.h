#pragma once
// Device series from a running `gpuscope bridge`, read from its pinned maps (schema 1,
// bridge/bridge_maps.h), labelled as dcgm-exporter labels them (gpu, UUID, modelName,
// Hostname) so that the two join in PromQL. UUID and model name come from NVML when it loads.
#include <string>
#include <vector>

#include "cmd/agent/prom.h"
#include "bridge/bridge_maps.h"

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

class BridgeReader {
 public:
  // nvml: the library to dlopen for names ("" or unloadable: UUID and modelName stay empty).
  BridgeReader(std::string pin_dir, const std::string& nvml);
  ~BridgeReader();
  // The devices now; throws std::runtime_error saying why there are none (no bridge, stale).
  std::vector<DeviceSample> read(double* age_s);
  // The processes on the devices that are still running, after a read() that succeeded.
  std::vector<ProcessGpuSample> read_processes() const;
  const std::string& hostname() const { return host_; }

 private:
  std::string dir_, host_;
  void* nvml_ = nullptr;
  std::vector<std::pair<std::string, std::string>> names_;  // (UUID, model) by index, read once
};

void add_device_metrics(PromSet& m, const std::vector<DeviceSample>& devs, const std::string& hostname, double age_s);

}  // namespace gpuscope

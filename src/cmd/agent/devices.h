#pragma once
// Device series from a running `gpuscope bridge` (read by bridge/reader.h), labelled as
// dcgm-exporter labels them (gpu, UUID, modelName, Hostname) so that the two join in PromQL.
// UUID and model name come from NVML when it loads.
#include <string>
#include <vector>

#include "bridge/reader.h"
#include "cmd/agent/prom.h"

namespace gpuscope {

void add_device_metrics(PromSet& m, const std::vector<DeviceSample>& devs, const std::string& hostname, double age_s);

}  // namespace gpuscope

#pragma once
// Every collector the agent can run registers itself: GPUSCOPE_AGENT_COLLECTOR(make_<name>_collector,
// ORDER) in the file that defines it. They load, refresh and are listed lowest ORDER first
// (latency's after kernels', whose launch programs it times through).
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cmd/agent/collector.h"

namespace gpuscope {

struct KernelRow;

using CollectorFactory = std::unique_ptr<AgentCollector> (*)();
bool register_agent_collector(int order, CollectorFactory make);
#define GPUSCOPE_AGENT_COLLECTOR(make, order) \
  [[maybe_unused]] static const bool gs_collector_##make = ::gpuscope::register_agent_collector(order, make)
// One of each registered collector, in order.
std::vector<std::unique_ptr<AgentCollector>> make_agent_collectors();

std::unique_ptr<AgentCollector> make_kernels_collector();

// The kernels collector's series over rows from `rows` instead of its BPF programs (bench/).
std::unique_ptr<AgentCollector> make_kernels_collector(std::function<std::vector<KernelRow>()> rows);

}  // namespace gpuscope

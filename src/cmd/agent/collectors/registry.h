#pragma once
// Every collector the agent can run, in the order they load, refresh and are listed. A new
// collector is a file in this folder defining make_<name>_collector(), and its line here.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cmd/agent/collector.h"

#define GS_AGENT_COLLECTORS(X) \
  X(kernels)                   \
  X(memleak)                   \
  X(latency)                   \
  X(ioctl)                     \
  X(gputime)                   \
  X(bridge)                    \
  X(starvation)                \
  X(graphics)

namespace gpuscope {

struct KernelRow;
struct LaunchTimingHost;

#define GS_AGENT_DECLARE(n) std::unique_ptr<AgentCollector> make_##n##_collector();
GS_AGENT_COLLECTORS(GS_AGENT_DECLARE)
#undef GS_AGENT_DECLARE

// The kernels collector's series over rows from `rows` instead of its BPF programs (bench/).
std::unique_ptr<AgentCollector> make_kernels_collector(std::function<std::vector<KernelRow>()> rows);
// The running kernels collector's launch programs as the latency collector's launch host, where
// they can time launches (latency then probes the driver's launches through them, not again).
std::optional<LaunchTimingHost> launch_timing_of(AgentCollector* kernels);

inline std::vector<std::unique_ptr<AgentCollector>> make_agent_collectors() {
  std::vector<std::unique_ptr<AgentCollector>> v;
#define GS_AGENT_MAKE(n) v.push_back(make_##n##_collector());
  GS_AGENT_COLLECTORS(GS_AGENT_MAKE)
#undef GS_AGENT_MAKE
  return v;
}

}  // namespace gpuscope

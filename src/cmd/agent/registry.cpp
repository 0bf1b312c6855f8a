#include "cmd/agent/registry.h"

#include "core/registry.h"

namespace gpuscope {

bool register_agent_collector(int order, CollectorFactory make) {
  return OrderedRegistry<CollectorFactory>::add(order, make);
}

std::vector<std::unique_ptr<AgentCollector>> make_agent_collectors() {
  std::vector<std::unique_ptr<AgentCollector>> v;
  for (CollectorFactory make : OrderedRegistry<CollectorFactory>::sorted()) v.push_back(make());
  return v;
}

}  // namespace gpuscope

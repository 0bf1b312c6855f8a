#include "cmd/agent/collectors/registry.h"

#include <algorithm>
#include <utility>

namespace gpuscope {

namespace {
// Filled by static initializers: a function's static, made on first use, whatever their order.
std::vector<std::pair<int, CollectorFactory>>& factories() {
  static std::vector<std::pair<int, CollectorFactory>> f;
  return f;
}
}  // namespace

bool register_agent_collector(int order, CollectorFactory make) {
  factories().emplace_back(order, make);
  return true;
}

std::vector<std::unique_ptr<AgentCollector>> make_agent_collectors() {
  auto f = factories();
  std::stable_sort(f.begin(), f.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::unique_ptr<AgentCollector>> v;
  for (auto& [order, make] : f) v.push_back(make());
  return v;
}

}  // namespace gpuscope

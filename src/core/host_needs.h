#pragma once
// What a subcommand needs of the host, declared beside its registration and judged by `gpuscope
// doctor`: `GPUSCOPE_NEEDS(<cap>, ORDER, {{"privileges"}, {"btf"}, ...}, {"tp_btf"});`, ORDER being
// its place in doctor's list. Every group of `all` is met when any of its checks is ok;
// `optional` checks only make it partial. The check names are doctor's.
#include <string>
#include <vector>

#include "core/registry.h"

namespace gpuscope {

struct HostNeeds {
  const char* name;
  std::vector<std::vector<std::string>> all;
  std::vector<std::string> optional;
};
inline bool register_host_needs(int order, HostNeeds n) { return OrderedRegistry<HostNeeds>::add(order, n); }
// Lowest ORDER first.
inline std::vector<HostNeeds> registered_host_needs() { return OrderedRegistry<HostNeeds>::sorted(); }
#define GPUSCOPE_NEEDS(name, order, ...)               \
  [[maybe_unused]] static const bool gs_needs_##name = \
      ::gpuscope::register_host_needs(order, ::gpuscope::HostNeeds{#name, __VA_ARGS__})

}  // namespace gpuscope

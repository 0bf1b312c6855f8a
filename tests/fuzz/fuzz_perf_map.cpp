// libFuzzer target: the perf map reader (/tmp/perf-PID.map, written by the traced process
// itself, read through /proc/PID/root): parse_perf_map, then lookups in what it returns.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/perf_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto syms = gpuscope::parse_perf_map(text);
  for (size_t i = 1; i < syms.size(); i++)
    if (syms[i - 1].start > syms[i].start) __builtin_trap();  // sorted, as promised
  // Look up each entry's edges, and an address taken from the input's first bytes.
  for (const auto& s : syms) {
    if (!gpuscope::perf_map_find(syms, s.start)) __builtin_trap();  // its own start is covered
    (void)gpuscope::perf_map_find(syms, s.start - 1);
    (void)gpuscope::perf_map_find(syms, s.start + s.size);
  }
  uint64_t addr = 0;
  memcpy(&addr, data, size < sizeof addr ? size : sizeof addr);
  (void)gpuscope::perf_map_find(syms, addr);
  return 0;
}

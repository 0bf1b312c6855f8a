#pragma once
// A perf map, /tmp/perf-PID.map: one "START SIZE NAME" line per symbol, START and SIZE in hex
// (perf's JIT interface, tools/perf/Documentation/jit-interface.txt), as CPython's -X perf and
// JITs write it. Untrusted input: any byte string parses, lines that do not fit are skipped.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

struct PerfMapEntry {
  uint64_t start = 0, size = 0;
  std::string name;  // the rest of the line, as written (may be empty)
};

// Every line that parses, stably sorted by start (a later line for the same start stays after
// the earlier one, so that lookups can prefer it).
std::vector<PerfMapEntry> parse_perf_map(std::string_view text);

// The name covering addr in `sorted` (parse_perf_map's result); the latest entry wins when a JIT
// reused memory; an entry of size 0 covers its start only. nullptr when none does.
const std::string* perf_map_find(const std::vector<PerfMapEntry>& sorted, uint64_t addr);

}  // namespace gpuscope

#include "core/perf_map.h"

#include <algorithm>
#include <cstdlib>

namespace gpuscope {

std::vector<PerfMapEntry> parse_perf_map(std::string_view text) {
  std::vector<PerfMapEntry> out;
  std::string line;  // NUL-terminated copy: strtoull needs one
  while (!text.empty()) {
    size_t nl = text.find('\n');
    line.assign(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // Exactly the rules of the symbolizer's reader it replaces: what strtoull takes (leading
    // blanks, a sign, 0x), then one space after each number; the name ends at the line's end
    // or at a NUL.
    char* end = nullptr;
    uint64_t start = strtoull(line.c_str(), &end, 16);
    if (!end || *end != ' ') continue;
    char* end2 = nullptr;
    uint64_t size = strtoull(end + 1, &end2, 16);
    if (!end2 || *end2 != ' ') continue;
    out.push_back({start, size, std::string(end2 + 1)});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const PerfMapEntry& a, const PerfMapEntry& b) { return a.start < b.start; });
  return out;
}

const std::string* perf_map_find(const std::vector<PerfMapEntry>& sorted, uint64_t addr) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), addr,
                             [](uint64_t a, const PerfMapEntry& s) { return a < s.start; });
  // Later entries for the same range win (a JIT may reuse memory): scan back over equal starts.
  while (it != sorted.begin()) {
    --it;
    // addr >= it->start here; compare offsets so that a range reaching past 2^64 cannot wrap.
    if (addr - it->start < std::max<uint64_t>(it->size, 1)) return &it->name;
    if (it == sorted.begin() || std::prev(it)->start != it->start) break;
  }
  return nullptr;
}

}  // namespace gpuscope

// libFuzzer target: the Prometheus text writer, whose label values come from process, thread,
// kernel, container and pod names that any process sets. Whatever the bytes, every line it writes
// is valid UTF-8 with no raw newline inside a value, and each value reads back (Prometheus's three
// escapes) as the text JSON gives for the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cmd/agent/prom.h"
#include "core/output.h"

namespace {

bool valid_utf8(std::string_view s) { return gpuscope::utf8_valid(s) == s; }

// The quoted values of one `name{k="v",...} N` line, unescaped; false if the line does not parse.
bool label_values(std::string_view line, std::vector<std::string>& out) {
  size_t i = line.find('{');
  if (i == std::string_view::npos) return true;
  for (i++; i < line.size() && line[i] != '}';) {
    size_t eq = line.find("=\"", i);
    if (eq == std::string_view::npos) return false;
    std::string v;
    for (i = eq + 2; i < line.size() && line[i] != '"'; i++) {
      if (line[i] != '\\') {
        v += line[i];
        continue;
      }
      if (++i == line.size()) return false;
      char c = line[i];
      if (c != '\\' && c != '"' && c != 'n') return false;
      v += c == 'n' ? '\n' : c;
    }
    if (i == line.size()) return false;
    out.push_back(v);
    if (++i < line.size() && line[i] == ',') i++;
  }
  return i < line.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Label values are the input's parts between 0x00 bytes.
  std::vector<std::string> values;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (size_t at = 0; at <= in.size() && values.size() < 8;) {
    size_t end = std::min(in.find('\0', at), in.size());
    values.emplace_back(in.substr(at, end - at));
    at = end + 1;
  }
  gpuscope::PromLabels labels;
  for (size_t i = 0; i < values.size(); i++) labels.emplace_back("l" + std::to_string(i), values[i]);
  gpuscope::PromSet set;
  set.family("fuzz_total", gpuscope::PromSet::Type::counter, "fuzzed labels");
  set.add("fuzz_total", labels, 1);
  set.family("fuzz_seconds", gpuscope::PromSet::Type::histogram, "fuzzed labels");
  set.histogram("fuzz_seconds", labels, {0.5, 1}, {1, 2, 3}, 4);
  std::string text = set.text();
  if (!valid_utf8(text)) __builtin_trap();
  size_t lines = 0;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) __builtin_trap();  // every line ends with a newline
    std::string_view line(text.data() + at, nl - at);
    at = nl + 1;
    if (line.starts_with("#")) continue;
    std::vector<std::string> got;
    if (!label_values(line, got) || got.size() < values.size()) __builtin_trap();
    for (size_t i = 0; i < values.size(); i++)
      if (got[i] != gpuscope::utf8_valid(values[i])) __builtin_trap();
    lines++;
  }
  if (lines != 1 + 3 + 2) __builtin_trap();  // the counter; 3 buckets, _sum and _count
  return 0;
}

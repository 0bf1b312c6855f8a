// libFuzzer target: the /proc/PID/maps parser (parse_maps, parse_maps_line). A process controls
// its mapping names (memfd names, paths with spaces, " (deleted)"), so the text is untrusted.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& m : gpuscope::parse_maps(text)) {
    if (m.end < m.start) __builtin_trap();
    if (m.path.find('\n') != std::string_view::npos) __builtin_trap();
    (void)m.is_file();
  }
  // The whole input as one line too: a line that never ends, or one with NULs.
  if (auto m = gpuscope::parse_maps_line(text))
    if (m->end < m->start) __builtin_trap();
  return 0;
}

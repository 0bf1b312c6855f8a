// libFuzzer target: gpuscope::demangle on arbitrary symbol names (ELF symbol tables and the
// names a process hands to cuModuleGetFunction are untrusted), including NVIDIA's `Unvhdl`
// closures that its own reader walks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/demangle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  std::string out = gpuscope::demangle(in);
#ifdef GPUSCOPE_FUZZ_DEMANGLE_NONEMPTY
  // What it does not know should come back unchanged, never empty. Off until demangle() stops
  // returning "" for an empty identifier: "_Z0Unv" (corpus/demangle/empty_identifier.txt).
  if (!in.empty() && out.empty()) __builtin_trap();
#else
  (void)out;
#endif
  return 0;
}

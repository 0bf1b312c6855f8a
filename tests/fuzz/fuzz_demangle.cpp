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
  // What it does not know comes back unchanged, never empty ("_Z0Unv" gave "" before
  // known/demangle-fix.patch).
  if (!in.empty() && out.empty()) __builtin_trap();
  return 0;
}

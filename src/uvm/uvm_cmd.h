#pragma once
#include <string>
#include <vector>

namespace gpuscope {

struct UvmOptions {
  double interval_s = 1;
  double duration_s = 0;
  unsigned top = 10;
  bool json = false;
  bool verbose = false;
};

int run_uvm(const UvmOptions& opts);

// The probed nvidia-uvm functions, in program order: replayable, non-replayable, thrashing.
extern const char* const kUvmFunctions[3];
// The kallsyms name for `func`: itself, or with a compiler suffix (func.isra.0, func.constprop.0).
std::string resolve_kallsyms(const std::string& kallsyms_text, const std::string& func);

}  // namespace gpuscope

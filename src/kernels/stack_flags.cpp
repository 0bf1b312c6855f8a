#include "kernels/stack_flags.h"

#include <regex>

namespace gpuscope {

void StackFlags::add_to(CLI::App* cmd, const std::string& what) {
  cmd->add_flag("--stacks", stacks, "Record the user stack (native and CPython frames) of sampled launches; " + what);
  need_stacks.push_back(add_number(cmd, "--stack-every", stack_every,
                                   "With --stacks: sample every Nth launch per process, and each kernel's first "
                                   "(default 64; 1: every launch, exact counts)",
                                   "launches", 1, 1000000000));
  need_stacks.push_back(cmd->add_option("--site-skip", site_skip,
                                        "With --stacks: a launch site is the innermost frame whose file (Python) or "
                                        "library (native) this regular expression does not match (default: torch, "
                                        "site-packages, the standard library, the CUDA and framework libraries)")
                            ->type_name("REGEX"));
}

void StackFlags::check() const {
  for (auto* f : need_stacks)
    if (!stacks && f->count()) throw UsageError(flag_name(f->get_name(false, true)) + " needs --stacks");
  if (!site_skip.empty()) try {
      std::regex check(site_skip);
    } catch (const std::regex_error& e) {
      throw UsageError("--site-skip " + clip(site_skip) + " is not a valid regular expression: " + e.what());
    }
}

}  // namespace gpuscope

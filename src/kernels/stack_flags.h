#pragma once
// The launch-site flags (--stacks, --stack-every, --site-skip) that every subcommand recording
// launch sites takes alike, and their one check.
#include <string>
#include <vector>

#include "core/cli.h"
#include "kernels/kernels_collector.h"

namespace gpuscope {

struct StackFlags {
  bool stacks = false;
  // Not measured on a GPU host yet: a guess that keeps a launch-bound loop's stack walks at one
  // in 64 launches (docs/kernels.md says so).
  uint32_t stack_every = 64;
  std::string site_skip;
  // The flags that need --stacks (CLI11's needs() would print itself into the labels).
  std::vector<CLI::Option*> need_stacks;

  // Adds the three flags; `what` ends --stacks' help ("at the end, the launch sites").
  void add_to(CLI::App* cmd, const std::string& what);
  // Throws UsageError for a flag given without --stacks or a --site-skip that is no regex.
  void check() const;
  void apply(KernelsCollector::Config& kc) const {
    kc.stacks = stacks;
    kc.stack_every = stack_every;
    kc.site_skip = site_skip;
  }
};

}  // namespace gpuscope

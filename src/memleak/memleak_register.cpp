#include <memory>

#include "core/cli.h"
#include "memleak/memleak_cmd.h"

namespace gpuscope {

void register_memleak(CLI::App& app) {
  auto o = std::make_shared<MemleakOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto scope = std::make_shared<Scope>();
  auto* cmd = app.add_subcommand("memleak", "Track live GPU allocations per process; leak report when a process exits");
  add_common_flags(cmd, *common);
  add_scope_flags(cmd, *scope);
  add_number(cmd, "--interval", o->interval_s, "Print the per-process summary every SECONDS (default 5)", "seconds",
             0.01, 86400);
  add_number(cmd, "--min-age", o->min_age_s, "List live allocations older than SECONDS as suspected leaks", "seconds",
             0.001, 31536000);
  cmd->add_flag("--stacks", o->stacks, "Record and symbolize the allocating user stack");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope memleak                        # every process, summary every 5 s, leak report at exit\n"
      "  gpuscope memleak -p 1234 --min-age 60   # also list allocations older than a minute\n"
      "  gpuscope memleak -c python3 --stacks --json");
  add_command(cmd, [=] { return run_memleak(with_shared(*o, *common, scope.get())); });
}

}  // namespace gpuscope

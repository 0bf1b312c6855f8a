#include <memory>

#include "core/cli.h"
#include "kernels/kernels_cmd.h"

namespace gpuscope {

void register_kernels(CLI::App& app) {
  auto o = std::make_shared<KernelsOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto scope = std::make_shared<Scope>();
  auto* cmd = app.add_subcommand("kernels", "Count kernel launches per process and kernel, named, counted in BPF");
  add_common_flags(cmd, *common);
  add_scope_flags(cmd, *scope);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  add_number(cmd, "--top", o->top, "Show only the N busiest rows (default all)", "rows", 1, 1000000);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope kernels                     # every process's launches, refreshed each second\n"
      "  gpuscope kernels -p 1234 --top 20\n"
      "  gpuscope kernels -c python3 --json --interval 5");
  add_command(cmd, [=] { return run_kernels(with_shared(*o, *common, scope.get())); });
}

}  // namespace gpuscope

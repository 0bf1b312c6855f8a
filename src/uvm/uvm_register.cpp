#include <memory>

#include "core/cli.h"
#include "uvm/uvm_cmd.h"

namespace gpuscope {

void register_uvm(CLI::App& app) {
  auto o = std::make_shared<UvmOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto* cmd =
      app.add_subcommand("uvm", "Count nvidia-uvm fault servicing and catch thrashing addresses (kprobes or fentry)");
  add_common_flags(cmd, *common);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  add_number(cmd, "--top", o->top, "Thrashing addresses to list per interval (default 10)", "rows", 0, 100000);
  add_command(cmd, [=] { return run_uvm(with_shared(*o, *common, nullptr)); });
}

}  // namespace gpuscope

#include <memory>

#include "core/cli.h"
#include "ioctl/ioctl_cmd.h"

namespace gpuscope {

void register_ioctl(CLI::App& app) {
  auto o = std::make_shared<IoctlOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto scope = std::make_shared<Scope>();
  auto* cmd = app.add_subcommand("ioctl", "Count ioctl and mmap calls on NVIDIA device nodes, per process and request");
  add_common_flags(cmd, *common);
  add_scope_flags(cmd, *scope, false);
  cmd->add_flag("--events", o->events, "Also print one line per ioctl as it returns");
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default: once, at the end)", "seconds", 0.01,
             86400);
  cmd->add_flag("--raw-syscalls", o->raw_syscalls, "Use raw_tp sys_enter/sys_exit even where tracefs works");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope ioctl -d 10                 # which processes talk to the driver, and how\n"
      "  gpuscope ioctl -p 1234 --events --json\n"
      "  gpuscope ioctl -c python3");
  add_command(cmd, [=] { return run_ioctl(with_shared(*o, *common, scope.get())); });
}

}  // namespace gpuscope

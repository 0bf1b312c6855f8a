#include <memory>

#include "core/cli.h"

namespace gpuscope {

int run_doctor(bool json);

void register_doctor(CLI::App& app) {
  auto common = std::make_shared<CommonFlags>();  // held by the command registry until exit
  auto* cmd = app.add_subcommand("doctor", "Check what this host supports and which subcommands will work");
  add_output_flags(cmd, *common);  // a one-shot check: no -d
  add_command(cmd, [=] { return run_doctor(common->json); });
}
GPUSCOPE_COMMAND(register_doctor, 90);

}  // namespace gpuscope

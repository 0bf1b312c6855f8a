#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/cli.h"
#include "core/system.h"

namespace gpuscope {
// Each subcommand registers itself: its flags, and what runs it.
void register_trace(CLI::App&);
void register_latency(CLI::App&);
void register_kernels(CLI::App&);
void register_memleak(CLI::App&);
void register_ioctl(CLI::App&);
void register_uvm(CLI::App&);
void register_starvation(CLI::App&);
void register_bridge(CLI::App&);
void register_doctor(CLI::App&);
void register_agent(CLI::App&);
void register_timeline(CLI::App&);
void register_run(CLI::App&);
}  // namespace gpuscope

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"gpuscope: eBPF observability for CUDA workloads"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuscope 0.1.0");
  for (auto reg :
       {register_trace, register_latency, register_kernels, register_memleak, register_ioctl, register_uvm,
        register_starvation, register_bridge, register_doctor, register_agent, register_timeline, register_run})
    reg(app);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::RequiredError& e) {
      if (app.get_subcommands().empty()) {
        std::string names;
        for (auto* s : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + s->get_name();
        std::string first = argc > 1 ? argv[1] : "";
        fprintf(stderr, "gpuscope: %s; subcommands: %s\n",
                first.empty() || first[0] == '-' ? "a subcommand is required"
                                                 : ("unknown subcommand '" + first + "'").c_str(),
                names.c_str());
        return 2;
      }
      fprintf(stderr, "gpuscope: %s\n", e.what());
      return 2;
    } catch (const CLI::ParseError& e) {
      fprintf(stderr, "gpuscope: %s\n", e.what());
      return 2;
    }
    StopControl::install_signal_handlers();
    return run_parsed_command(app);
  } catch (const UsageError& e) {
    fprintf(stderr, "gpuscope: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuscope: %s\n", e.what());
    return 1;
  }
}

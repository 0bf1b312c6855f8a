#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/cli.h"
#include "core/system.h"

// Each subcommand registers itself (register_NAME): its flags, and what runs it. In help order.
// clang-format off
#define GPUSCOPE_COMMANDS(X) \
  X(trace) X(latency) X(kernels) X(memleak) X(ioctl) X(uvm) X(starvation) X(bridge) X(doctor) X(agent) \
  X(timeline) X(run) X(frames)
// clang-format on

namespace gpuscope {
#define GPUSCOPE_DECLARE(name) void register_##name(CLI::App&);
GPUSCOPE_COMMANDS(GPUSCOPE_DECLARE)
}  // namespace gpuscope

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"gpuscope: eBPF observability for CUDA workloads"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuscope 0.1.0");
#define GPUSCOPE_REGISTER(name) register_##name(app);
  GPUSCOPE_COMMANDS(GPUSCOPE_REGISTER)

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

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/system.h"

using namespace gpuscope;

namespace {

// The subcommand and option that a "NAME: 1 required LABEL missing" error names, by its label.
std::string missing_value(CLI::App& app, const std::string& what) {
  std::string flag = what.substr(0, what.find(':'));
  for (auto* sub : app.get_subcommands({}))
    for (auto* opt : sub->get_options())
      if (opt->get_name() == flag) return needs_value(flag, opt->get_type_name());
  return what;
}

std::string unknown_subcommand(CLI::App& app, const std::string& first) {
  std::vector<std::string> names;
  std::string list;
  for (auto* s : app.get_subcommands({})) {
    names.push_back(s->get_name());
    list += (list.empty() ? "" : ", ") + s->get_name();
  }
  if (first.empty() || first[0] == '-') return "a subcommand is required; subcommands: " + list;
  std::string near = closest(first, names);
  return "unknown subcommand '" + first + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
         "; subcommands: " + list;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuscope: eBPF observability for CUDA workloads"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuscope 0.1.0");
  add_registered_commands(app);  // each subcommand registers itself (GPUSCOPE_COMMAND)
  label_values(app);

  const std::vector<std::string> args(argv + 1, argv + argc);
  auto fail = [&](const std::string& msg, int code) {
    fprintf(stderr, "gpuscope: %s\n", error_line(msg, args).c_str());
    return code;
  };
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::RequiredError& e) {
      if (app.get_subcommands().empty()) return fail(unknown_subcommand(app, args.empty() ? "" : args[0]), 2);
      return fail(e.what(), 2);
    } catch (const CLI::ArgumentMismatch& e) {
      std::string what = e.what();
      return fail(what.ends_with(" missing") ? missing_value(app, what) : what, 2);
    } catch (const CLI::ParseError& e) {
      return fail(e.what(), 2);
    }
    StopControl::install_signal_handlers();
    return run_parsed_command(app);
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}

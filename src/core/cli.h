#pragma once
// What every subcommand shares on the command line, declared once: -d/--json/-v, the scope
// flags -p/-c/--lib, one validator for numeric flags, and the registry main() runs from.
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/scope.h"
#include "core/system.h"

namespace gpuscope {

struct CommonFlags {
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

// -d/--duration, --json, -v.
void add_common_flags(CLI::App* cmd, CommonFlags& c);
// --json and -v alone, for a one-shot subcommand (doctor) that no duration applies to.
void add_output_flags(CLI::App* cmd, CommonFlags& c);
// -p/--pid, -c/--comm, the container filters and, with `libs`, --lib. Pids are checked here as they are parsed (a pid
// that does not exist is a usage error), so no command or collector checks them again.
void add_scope_flags(CLI::App* cmd, Scope& s, bool libs = true);
// --container, --pod, -n/--namespace, --host, and where their names are read (--pods-dir,
// --runtime-root); checked once every flag is parsed. Part of add_scope_flags.
void add_container_flags(CLI::App* cmd, Scope& s);

// A numeric flag read as text and checked here, so that nan, inf, hex, spaces, overflow and
// negative values of unsigned flags all get the same one-line error:
// "--top must be a whole number of rows between 1 and 1000000".
// `what` names the unit ("seconds", "milliseconds", "bytes", ...) and gives the flag its label
// in --help (SECONDS, MS, BYTES, N, ...); the help shows the default where its text does not.
template <class T>
CLI::Option* add_number(CLI::App* cmd, const std::string& flags, T& dst, const std::string& help, const char* what,
                        double lo, double hi);
// The longest name of an option's flags ("-d,--duration" -> "--duration").
std::string flag_name(const std::string& flags);
// Parses and range-checks one value; throws UsageError. Decimal only: an optional sign, digits
// with an optional point, an optional exponent, nothing before or after. Where `what` begins
// with "seconds" or "milliseconds" the value is a duration: a number in that unit, or one with
// a unit of its own, ms, s, m or h (500ms, 10s, 2m, 1h).
double parse_number(const std::string& flag, const std::string& text, const char* what, double lo, double hi,
                    bool integer);
// The length of the decimal number `text` begins with (as parse_number reads it), 0 if none.
size_t decimal_prefix(std::string_view text);
// The --help label of a number of `what`: "SECONDS", "MS", "BYTES", ... or N / NUMBER.
std::string number_label(const char* what, bool integer);

// What an error line echoes of a value: at most 64 bytes, the rest as "…".
std::string clip(std::string_view value);
// The line main prints for an error: each argument over 64 bytes that it echoes clipped (also
// the parts of a comma list or of --flag=value), control characters escaped, so one line.
std::string error_line(std::string msg, const std::vector<std::string>& args);
// The one of `names` that `word` is a typo of (2 edits at most, and fewer than its length),
// or that it uniquely begins (3 letters at least); "" when none.
std::string closest(const std::string& word, const std::vector<std::string>& names);
// "--pid needs a value (a process id)": an option given without its value, by its label.
std::string needs_value(const std::string& flag, const std::string& label);
// Labels the value options of every subcommand still labelled TEXT: PATH where the name says
// they take a path (-o, --output, --nvml, --folded, --svg, --kmsg, --...-dir, --...lib, --...-root,
// --...-state), LIST
// where they split at commas.
void label_values(CLI::App& app);

// Copies the shared flags into an options struct that keeps them as its own fields (the bridge's).
template <class Options>
Options& with_shared(Options& o, const CommonFlags& c) {
  o.duration_s = c.duration_s;
  o.json = c.json;
  o.verbose = c.verbose;
  return o;
}

// A subcommand and what runs it once it is parsed.
void add_command(CLI::App* sub, std::function<int()> run);

// Subcommands register themselves: `GPUSCOPE_COMMAND(register_trace, 10);` at namespace scope
// in the file that defines register_trace, and main adds them all, lowest `order` first (help
// order). CMake links the subcommands' sources into the binary as objects (gpuscope_command), so
// the registrations run and no list names them.
using CommandAdder = void (*)(CLI::App&);
bool register_command(int order, CommandAdder add);
void add_registered_commands(CLI::App& app);
#define GPUSCOPE_COMMAND(adder, order) \
  [[maybe_unused]] static const bool gs_command_##adder = ::gpuscope::register_command(order, adder)

// A subcommand run by run(options) once parsed, with -d/--json/-v into options.common and, where
// Options has a `scope`, -p/-c (and --lib with `libs`). Returns the subcommand, for its own flags,
// and the options they fill (held by the command registry until exit).
template <class Options>
std::pair<CLI::App*, Options*> new_command(CLI::App& app, const std::string& name, const std::string& help,
                                           int (*run)(const Options&), bool libs = true) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(name, help);
  add_common_flags(cmd, o->common);
  if constexpr (requires { o->scope; }) add_scope_flags(cmd, o->scope, libs);
  add_command(cmd, [o, run] { return run(*o); });
  return {cmd, o.get()};
}
// Runs the parsed subcommand; 0 when none ran. Notices the flags left (note()) print first.
int run_parsed_command(CLI::App& app);
// A line for stderr once parsing has succeeded (a parse error after it prints only the error).
void note(const std::string& line);

template <class T>
CLI::Option* add_number(CLI::App* cmd, const std::string& flags, T& dst, const std::string& help, const char* what,
                        double lo, double hi) {
  std::string name = flag_name(flags);
  T* p = &dst;
  auto* opt = cmd->add_option_function<std::string>(
      flags,
      [p, name, what, lo, hi](const std::string& v) {
        *p = static_cast<T>(parse_number(name, v, what, lo, hi, std::is_integral_v<T>));
      },
      help);
  opt->type_name(number_label(what, std::is_integral_v<T>));
  if (help.find("default") == std::string::npos) opt->default_str(fmt::format("{}", dst));
  return opt;
}

}  // namespace gpuscope

#include "core/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace gpuscope {

namespace {
struct Command {
  CLI::App* sub;
  std::function<int()> run;
};
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

// Ranges print as numbers a person reads: 31536000, 0.5, 1e+09 never a 300-digit DBL_MAX.
std::string show(double v) { return fmt::format("{:.15g}", v); }
}  // namespace

void add_common_flags(CLI::App* cmd, CommonFlags& c) {
  add_number(cmd, "-d,--duration", c.duration_s, "Stop after SECONDS (default: until Ctrl-C)", "seconds", 0,
             365 * 24 * 3600);
  cmd->add_flag("--json", c.json, "Print JSON lines");
  cmd->add_flag("-v,--verbose", c.verbose, "Show libbpf's messages and attach details");
}

void add_scope_flags(CLI::App* cmd, Scope& s, bool libs) {
  cmd->add_option_function<std::vector<std::string>>(
      "-p,--pid",
      [&s](const std::vector<std::string>& v) {
        for (auto& t : v)
          s.pids.push_back(static_cast<pid_t>(parse_number("--pid", t, "process id", 1, 2147483647, true)));
        s.validate();
      },
      "Only these host pids (repeatable)");
  cmd->add_option("-c,--comm", s.comm, "Only processes with this name");
  if (libs) cmd->add_option("--lib", s.libs, "Also probe this CUDA library or executable (repeatable)");
  add_container_flags(cmd, s);
}

void add_container_flags(CLI::App* cmd, Scope& s) {
  auto paths = std::make_shared<ContainerPaths>();
  cmd->add_option("--container", s.where.containers,
                  "Only processes in this container: its name, its id or 12+ digits of it (repeatable)");
  auto named = [](const char* flag, std::string& dst) {
    return [flag, &dst](const std::string& v) {
      if (v.empty()) throw UsageError(std::string(flag) + " needs a name");
      dst = v;
    };
  };
  cmd->add_option_function<std::string>("--pod", named("--pod", s.where.pod), "Only processes in this Kubernetes pod");
  cmd->add_option_function<std::string>("-n,--namespace", named("--namespace", s.where.ns),
                                        "Only processes in pods of this Kubernetes namespace");
  cmd->add_flag("--host", s.where.host, "Only processes in no container");
  cmd->add_option_function<std::string>(
      "--pods-dir", [paths](const std::string& d) { paths->set_pods_dir(d); },
      "The kubelet's pod log directory, for pod and namespace names (default /var/log/pods)");
  cmd->add_option_function<std::string>(
      "--runtime-root", [paths](const std::string& d) { paths->set_runtime_root(d); },
      "Where the container runtimes' state is read, as a host's / (default /)");
  // After every flag: the paths decide what --pod can read.
  cmd->parse_complete_callback([&s, paths] {
    s.containers = std::make_shared<ProcessContainers>(*paths);
    s.validate();
  });
}

std::string flag_name(const std::string& flags) {
  std::string best;
  size_t start = 0;
  while (start <= flags.size()) {
    size_t comma = flags.find(',', start);
    std::string f = flags.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (f.size() > best.size()) best = f;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return best;
}

double parse_number(const std::string& flag, const std::string& text, const char* what, double lo, double hi,
                    bool integer) {
  auto fail = [&]() -> double {
    throw UsageError(fmt::format("{} must be {} of {} between {} and {}", flag, integer ? "a whole number" : "a number",
                                 what, show(lo), show(hi)));
  };
  if (text.empty()) fail();
  errno = 0;
  char* end = nullptr;
  double v = strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) fail();
  if (v < lo || v > hi) fail();
  if (integer && v != std::floor(v)) fail();
  return v;
}

void add_command(CLI::App* sub, std::function<int()> run) { registry().push_back({sub, std::move(run)}); }

int run_parsed_command(CLI::App&) {
  for (auto& c : registry())
    if (c.sub->parsed()) return c.run();
  return 0;
}

}  // namespace gpuscope

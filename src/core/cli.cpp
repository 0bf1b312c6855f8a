#include "core/cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/registry.h"

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
std::vector<std::string>& notes() {
  static std::vector<std::string> n;
  return n;
}

// Ranges print as numbers a person reads: 31536000, 0.5, 1e+09 never a 300-digit DBL_MAX.
std::string show(double v) { return fmt::format("{:.15g}", v); }
}  // namespace

void add_common_flags(CLI::App* cmd, CommonFlags& c) {
  add_number(cmd, "-d,--duration", c.duration_s, "Stop after SECONDS, or 500ms, 2m, 1h (default: until Ctrl-C)",
             "seconds", 0, 365 * 24 * 3600);
  add_output_flags(cmd, c);
}

void add_output_flags(CLI::App* cmd, CommonFlags& c) {
  cmd->add_flag("--json", c.json, "Print JSON lines");
  cmd->add_flag("-v,--verbose", c.verbose, "Show libbpf's messages and attach details");
}

namespace {
// "-p ./app" is eunomia's way to name the program to probe; here -p is a pid.
void refuse_program_as_pid(const std::string& t, bool libs) {
  struct stat st {};
  if (t.find('/') == std::string::npos && (stat(t.c_str(), &st) != 0 || !S_ISREG(st.st_mode))) return;
  throw UsageError("-p " + clip(t) +
                   (libs ? ": -p takes a process id; to trace a program's library use --lib PATH"
                         : ": -p takes a process id; to watch a program by its name use -c COMM"));
}

// A directory flag's value must be one: a typo would otherwise read nothing, silently.
void require_dir(const char* flag, const std::string& d) {
  if (d.empty()) throw UsageError(std::string(flag) + " needs a directory");
  struct stat st {};
  if (stat(d.c_str(), &st) != 0) throw UsageError(fmt::format("{} {}: {}", flag, clip(d), strerror(errno)));
  if (!S_ISDIR(st.st_mode)) throw UsageError(fmt::format("{} {}: not a directory", flag, clip(d)));
}
}  // namespace

void add_scope_flags(CLI::App* cmd, Scope& s, bool libs) {
  cmd->add_option_function<std::vector<std::string>>(
         "-p,--pid",
         [&s, libs](const std::vector<std::string>& v) {
           for (auto& t : v) {
             // CLI11 takes "-p -d 1" as pid "-d": a flag where the pid should be.
             if (t.size() > 1 && t[0] == '-' && isalpha(static_cast<unsigned char>(t[1])))
               throw UsageError(needs_value("--pid", "PID"));
             refuse_program_as_pid(t, libs);
             s.pids.push_back(static_cast<pid_t>(parse_number("--pid", t, "process id", 1, 2147483647, true)));
           }
           s.validate();
         },
         "Only these host pids (repeatable)")
      ->type_name("PID");
  cmd->add_option_function<std::string>(
         "-c,--comm",
         [&s](const std::string& v) {
           if (v.empty()) throw UsageError("--comm needs a process name");
           s.comm = v;
         },
         "Only processes with this name")
      ->type_name("COMM");
  if (libs)
    cmd->add_option("--lib", s.libs, "Also probe this CUDA library or executable (repeatable)")->type_name("PATH");
  add_container_flags(cmd, s);
}

void add_container_flags(CLI::App* cmd, Scope& s) {
  struct Given {
    ContainerPaths paths;
    bool pods_dir = false;
  };
  auto given = std::make_shared<Given>();
  cmd->add_option("--container", s.where.containers,
                  "Only processes in this container: its name, its id or 12+ digits of it (repeatable)")
      ->type_name("NAME|ID");
  auto named = [](const char* flag, std::string& dst) {
    return [flag, &dst](const std::string& v) {
      if (v.empty()) throw UsageError(std::string(flag) + " needs a name");
      dst = v;
    };
  };
  cmd->add_option_function<std::string>("--pod", named("--pod", s.where.pod), "Only processes in this Kubernetes pod")
      ->type_name("NAME");
  cmd->add_option_function<std::string>("-n,--namespace", named("--namespace", s.where.ns),
                                        "Only processes in pods of this Kubernetes namespace")
      ->type_name("NS");
  cmd->add_flag("--host", s.where.host, "Only processes in no container");
  cmd->add_option_function<std::string>(
         "--pods-dir",
         [given](const std::string& d) {
           if (d.empty()) throw UsageError("--pods-dir needs a directory");
           given->paths.set_pods_dir(d);
           given->pods_dir = true;
         },
         "The kubelet's pod log directory, for pod and namespace names (default /var/log/pods)")
      ->type_name("PATH");
  cmd->add_option_function<std::string>(
         "--runtime-root",
         [given](const std::string& d) {
           require_dir("--runtime-root", d);
           given->paths.set_runtime_root(d);
         },
         "Where the container runtimes' state is read, as a host's / (default /)")
      ->type_name("PATH");
  // After every flag: the paths decide what --pod can read.
  cmd->parse_complete_callback([&s, given] {
    s.containers = std::make_shared<ProcessContainers>(given->paths);
    s.validate();
    if (given->pods_dir) require_dir("--pods-dir", given->paths.pods_dir);
    if (s.where.containers.empty()) return;
    // Not an error: the container may start later, and its processes are admitted then.
    auto known = s.containers->containers();
    for (auto& ref : s.where.containers)
      if (std::none_of(known.begin(), known.end(), [&](auto& c) { return c.matches(ref); }))
        note("gpuscope: --container " + clip(ref) + " matches no running container; waiting for one to start");
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

size_t decimal_prefix(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    size_t from = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') i++;
    return i - from;
  };
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) i++;
  size_t n = digits();
  if (i < t.size() && t[i] == '.') {
    i++;
    n += digits();
  }
  if (!n) return 0;
  size_t mantissa = i;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    i++;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) i++;
    if (!digits()) return mantissa;
  }
  return i;
}

namespace {
// Milliseconds per unit of a duration flag's `what` (whole, so that 10s is exactly 10000 ms), 0
// for other numbers.
double time_unit_ms(std::string_view what) {
  if (what.starts_with("seconds")) return 1000;
  if (what.starts_with("milliseconds")) return 1;
  return 0;
}
}  // namespace

double parse_number(const std::string& flag, const std::string& text, const char* what, double lo, double hi,
                    bool integer) {
  const double unit = time_unit_ms(what);
  auto fail = [&]() -> double {
    throw UsageError(fmt::format("{} must be {} of {} between {} and {}{}", flag,
                                 integer ? "a whole number" : "a number", what, show(lo), show(hi),
                                 unit ? ", or a duration such as 500ms, 10s, 2m, 1h" : ""));
  };
  size_t n = decimal_prefix(text);
  if (!n) fail();
  double suffix_ms = unit;
  if (n != text.size()) {
    std::string_view suffix = std::string_view(text).substr(n);
    suffix_ms = suffix == "ms" ? 1 : suffix == "s" ? 1000 : suffix == "m" ? 60000 : suffix == "h" ? 3600000 : 0;
    if (!unit || !suffix_ms) fail();
  }
  errno = 0;
  double v = strtod(text.substr(0, n).c_str(), nullptr);
  if (errno == ERANGE || !std::isfinite(v)) fail();
  if (suffix_ms != unit) {
    v = v * suffix_ms / unit;
    // 0.3s in milliseconds is 300 less an ulp: a whole number all the same.
    if (integer && std::fabs(v - std::round(v)) < 1e-9 * std::max(1.0, std::fabs(v))) v = std::round(v);
  }
  if (!std::isfinite(v) || v < lo || v > hi) fail();
  if (integer && v != std::floor(v)) fail();
  return v;
}

std::string number_label(const char* what, bool integer) {
  std::string_view w = what;
  if (w.starts_with("seconds")) return "SECONDS";
  if (w.starts_with("milliseconds")) return "MS";
  if (w == "samples per second") return "HZ";
  if (w == "per second") return "RATE";
  if (w == "bytes") return "BYTES";
  if (w == "KiB") return "KIB";
  if (w == "percent") return "PERCENT";
  if (w == "process id") return "PID";
  return integer ? "N" : "NUMBER";
}

std::string clip(std::string_view v) {
  constexpr size_t kMax = 64;
  if (v.size() <= kMax) return std::string(v);
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) n--;  // not inside a UTF-8 character
  return std::string(v.substr(0, n)) + "…";
}

std::string error_line(std::string msg, const std::vector<std::string>& args) {
  auto shorten = [&msg](std::string_view piece) {
    if (piece.size() <= 64) return;
    std::string cut = clip(piece);
    for (size_t at = msg.find(piece); at != std::string::npos; at = msg.find(piece, at + cut.size()))
      msg.replace(at, piece.size(), cut);
  };
  for (auto& a : args) {
    shorten(a);
    for (size_t from = 0; from <= a.size();) {
      size_t to = a.find_first_of(",=", from);
      shorten(std::string_view(a).substr(from, to == std::string::npos ? std::string::npos : to - from));
      if (to == std::string::npos) break;
      from = to + 1;
    }
  }
  std::string out;
  for (char c : msg) {
    if (c == '\n')
      out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

std::string closest(const std::string& word, const std::vector<std::string>& names) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); j++) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
        diag = up;
      }
    }
    return row[b.size()];
  };
  if (word.size() > 64) return "";
  std::string best, prefixed;
  size_t best_d = 3, prefixes = 0;
  for (auto& n : names) {
    size_t d = distance(word, n);
    if (d < best_d && d < word.size()) best_d = d, best = n;
    if (word.size() >= 3 && n.starts_with(word)) prefixes++, prefixed = n;
  }
  if (!best.empty()) return best;
  return prefixes == 1 ? prefixed : "";
}

std::string needs_value(const std::string& flag, const std::string& label) {
  static const std::vector<std::pair<std::string, std::string>> kinds = {
      {"SECONDS", "a number of seconds, or a duration such as 500ms, 10s, 2m, 1h"},
      {"MS", "a number of milliseconds, or a duration such as 500ms, 10s, 2m, 1h"},
      {"PID", "a process id"},
      {"PATH", "a path"},
      {"COMM", "a process name"},
      {"N", "a whole number"},
      {"NUMBER", "a number"},
      {"BYTES", "a number of bytes"},
      {"NAME", "a name"},
      {"NAME|ID", "a container's name or id"},
      {"NS", "a Kubernetes namespace"}};
  for (auto& [l, what] : kinds)
    if (l == label) return flag + " needs a value (" + what + ")";
  return flag + " needs a value (" + (label.empty() ? "TEXT" : label) + ")";
}

void label_values(CLI::App& app) {
  for (auto* sub : app.get_subcommands({}))
    for (auto* opt : sub->get_options()) {
      if (opt->get_type_name() != "TEXT") continue;
      std::string n = opt->get_name();
      if (n == "-o" || n == "--output" || n == "--nvml" || n == "--folded" || n == "--svg" || n.ends_with("-dir") ||
          n.ends_with("lib") || n.ends_with("-root") || n == "--kmsg" || n.ends_with("-state"))
        opt->type_name("PATH");
      else if (opt->get_delimiter() == ',')
        opt->type_name("LIST");
    }
}

void add_command(CLI::App* sub, std::function<int()> run) { registry().push_back({sub, std::move(run)}); }

bool register_command(int order, CommandAdder add) { return OrderedRegistry<CommandAdder>::add(order, add); }

void add_registered_commands(CLI::App& app) {
  for (CommandAdder add : OrderedRegistry<CommandAdder>::sorted()) add(app);
}

void note(const std::string& line) { notes().push_back(line); }

int run_parsed_command(CLI::App&) {
  for (auto& n : notes()) fprintf(stderr, "%s\n", n.c_str());
  notes().clear();
  for (auto& c : registry())
    if (c.sub->parsed()) return c.run();
  return 0;
}

}  // namespace gpuscope

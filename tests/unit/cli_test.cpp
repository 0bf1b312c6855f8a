// The command line shared by every subcommand: the one number and duration parser, what an
// error line echoes, the help's value labels, and the usage errors every subcommand gives alike.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/system.h"
#include "../integration/harness.h"
#include "../integration/usage_error.h"

using namespace gpuscope;
using gstest::expect_usage_error;
using gstest::gpuscope_bin;
using gstest::run;

namespace {

// parse_number's error text, "" when it accepts.
std::string refusal(const std::string& text, const char* what = "seconds", double lo = 0, double hi = 1e6,
                    bool integer = false) {
  try {
    parse_number("--x", text, what, lo, hi, integer);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

std::vector<std::string> subcommands() {
  std::vector<std::string> out;
  for (const char* s : {"trace", "latency", "kernels", "memleak", "ioctl", "uvm", "starvation", "bridge", "doctor",
                        "agent", "timeline", "run", "frames"})
    out.push_back(s);
  return out;
}

}  // namespace

TEST(CliNumber, DecimalOnly) {
  EXPECT_EQ(parse_number("--x", "0.5", "rows", 0, 1, false), 0.5);
  EXPECT_EQ(parse_number("--x", ".5", "rows", 0, 1, false), 0.5);
  EXPECT_EQ(parse_number("--x", "+1e3", "rows", 0, 1e4, true), 1000);
  EXPECT_EQ(parse_number("--x", "2.", "rows", 0, 10, true), 2);
  EXPECT_EQ(decimal_prefix("1.5e-3ms"), 6u);
  EXPECT_EQ(decimal_prefix("1e"), 1u);
  EXPECT_EQ(decimal_prefix("-.e5"), 0u);
  for (std::string bad : {"", " 0.5", "0.5 ", "0x1p-3", "0x10", "inf", "nan", "-inf", "1e400", "1e-400", "1,5", "1e",
                          ".", "+", "--1", "0.5\n", "１"})
    EXPECT_EQ(refusal(bad, "rows", 0, 1e6), "--x must be a number of rows between 0 and 1000000") << "'" << bad << "'";
  EXPECT_EQ(refusal("2.5", "rows", 0, 10, true), "--x must be a whole number of rows between 0 and 10");
  EXPECT_EQ(refusal("10s", "rows", 0, 100, true), "--x must be a whole number of rows between 0 and 100");
}

TEST(CliDuration, PlainNumbersAndUnits) {
  auto secs = [](const std::string& t) { return parse_number("-d", t, "seconds", 0, 31536000, false); };
  EXPECT_EQ(secs("1.5"), 1.5);
  EXPECT_EQ(secs("500ms"), 0.5);
  EXPECT_EQ(secs("10s"), 10);
  EXPECT_EQ(secs("2m"), 120);
  EXPECT_EQ(secs("1h"), 3600);
  EXPECT_EQ(secs("1.5e1s"), 15);
  EXPECT_EQ(secs("0ms"), 0);
  auto ms = [](const std::string& t) { return parse_number("--poll-ms", t, "milliseconds", 1, 3600000, true); };
  EXPECT_EQ(ms("100"), 100);
  EXPECT_EQ(ms("0.3s"), 300);
  EXPECT_EQ(ms("10s"), 10000);
  EXPECT_EQ(ms("1h"), 3600000);
  EXPECT_EQ(ms("250ms"), 250);
  for (std::string bad : {"1d", "10 s", "10S", "ms", "s", "1sec", "1m30s", "-1s", "2h ", " 2h", "1e9h", "0x1p-3s"})
    EXPECT_EQ(refusal(bad, "seconds", 0, 31536000),
              "--x must be a number of seconds between 0 and 31536000, or a duration such as 500ms, 10s, 2m, 1h")
        << "'" << bad << "'";
  // Past the range once converted; and a part of a millisecond is no whole number of them.
  EXPECT_NE(refusal("3601s", "milliseconds", 1, 3600000, true), "");
  EXPECT_EQ(refusal("1.5ms", "milliseconds", 1, 3600000, true),
            "--x must be a whole number of milliseconds between 1 and 3600000, or a duration such as 500ms, 10s, 2m, "
            "1h");
}

TEST(CliLabels, ByUnit) {
  EXPECT_EQ(number_label("seconds", false), "SECONDS");
  EXPECT_EQ(number_label("seconds per period in ON/PERIOD", false), "SECONDS");
  EXPECT_EQ(number_label("milliseconds", true), "MS");
  EXPECT_EQ(number_label("samples per second", true), "HZ");
  EXPECT_EQ(number_label("bytes", true), "BYTES");
  EXPECT_EQ(number_label("rows", true), "N");
  EXPECT_EQ(number_label("percent", false), "PERCENT");
  EXPECT_EQ(number_label("the share of time recorded", false), "NUMBER");
  EXPECT_EQ(needs_value("--pid", "PID"), "--pid needs a value (a process id)");
  EXPECT_EQ(needs_value("--interval", "SECONDS"),
            "--interval needs a value (a number of seconds, or a duration such as 500ms, 10s, 2m, 1h)");
  EXPECT_EQ(needs_value("--listen", "ADDR:PORT"), "--listen needs a value (ADDR:PORT)");
}

TEST(CliEcho, LongValuesClippedAndOneLine) {
  EXPECT_EQ(clip("short"), "short");
  EXPECT_EQ(clip(std::string(64, 'a')), std::string(64, 'a'));
  EXPECT_EQ(clip(std::string(100000, 'a')), std::string(64, 'a') + "…");
  // Cut before a character, not inside it: 63 bytes and a 2-byte é.
  EXPECT_EQ(clip(std::string(63, 'a') + "éé"), std::string(63, 'a') + "…");
  const std::string big(100000, 'b');
  EXPECT_EQ(error_line("unknown subcommand '" + big + "'", {big}),
            "unknown subcommand '" + std::string(64, 'b') + "…'");
  EXPECT_EQ(error_line("unknown collector '" + big + "'", {"--collectors=kernels," + big}),
            "unknown collector '" + std::string(64, 'b') + "…'");
  EXPECT_EQ(error_line("--comm a\nb\x01", {}), "--comm a\\nb\\x01");
}

TEST(CliSuggest, EditDistance) {
  auto subs = subcommands();
  EXPECT_EQ(closest("kernel", subs), "kernels");
  EXPECT_EQ(closest("trcae", subs), "trace");
  EXPECT_EQ(closest("memlaek", subs), "memleak");
  EXPECT_EQ(closest("lat", subs), "latency");  // the beginning of one name
  EXPECT_EQ(closest("starv", subs), "starvation");
  EXPECT_EQ(closest("t", subs), "");
  EXPECT_EQ(closest("xyzzy", subs), "");
  EXPECT_EQ(closest("tim", std::vector<std::string>{"timeline", "timestamps"}), "");  // the beginning of two
}

// Every value option says what it takes, numbers their default too; no flag shows CLI11's
// {false}; doctor, a one-shot check, has no -d.
TEST(CliHelp, EveryValueLabelled) {
  for (auto& sub : subcommands()) {
    auto r = run({gpuscope_bin(), sub, "--help"});
    ASSERT_EQ(r.exit_code, 0) << sub;
    EXPECT_EQ(r.out.find(" TEXT"), std::string::npos) << sub << "\n" << r.out;
    EXPECT_EQ(r.out.find("{false}"), std::string::npos) << sub << "\n" << r.out;
    EXPECT_EQ(r.out.find("{true}"), std::string::npos) << sub << "\n" << r.out;
    bool duration = r.out.find("-d,--duration SECONDS ") != std::string::npos;
    EXPECT_EQ(duration, sub != "doctor") << sub << "\n" << r.out;
  }
  auto help = [](const std::string& sub) { return run({gpuscope_bin(), sub, "--help"}).out; };
  const std::string k = help("kernels");
  for (const char* want : {"-p,--pid PID ", "-c,--comm COMM ", "--lib PATH ", "--interval SECONDS ", "--top N ",
                           "--runtime-root PATH ", "--pods-dir PATH ", "--container NAME|ID "})
    EXPECT_NE(k.find(want), std::string::npos) << want << "\n" << k;
  EXPECT_NE(help("trace").find("--ringbuf-kb KIB "), std::string::npos);
  EXPECT_NE(help("bridge").find("--poll-interval-ms MS "), std::string::npos);
  EXPECT_NE(help("starvation").find("--sample-hz HZ "), std::string::npos);
  EXPECT_NE(help("timeline").find("-o,--output PATH "), std::string::npos);
  EXPECT_NE(help("frames").find("--no-cuda "), std::string::npos);
}

// Every numeric option gives its default: in its text, or after its label (SECONDS=1).
TEST(CliHelp, EveryNumberHasItsDefault) {
  const std::regex number(R"(^\s+(\S+) (SECONDS|MS|N|NUMBER|BYTES|KIB|HZ|RATE|PERCENT)(=\S+)?(?:\s+(.*))?$)");
  size_t numbers = 0;
  for (auto& sub : subcommands()) {
    std::istringstream in(run({gpuscope_bin(), sub, "--help"}).out);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (size_t i = 0; i < lines.size(); i++) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, number)) continue;
      numbers++;
      // A long name puts its text on the next line.
      std::string text = m[4].matched ? m[4].str() : (i + 1 < lines.size() ? lines[i + 1] : "");
      EXPECT_TRUE(m[3].matched || text.find("default") != std::string::npos) << sub << ": " << lines[i];
    }
  }
  EXPECT_GE(numbers, 30u);
}

TEST(CliBadInput, UnknownSubcommandSaysWhichWasMeant) {
  auto r = expect_usage_error("kernel", {});
  EXPECT_EQ(r.err.rfind("gpuscope: unknown subcommand 'kernel'; did you mean 'kernels'?; subcommands: trace, ", 0), 0u)
      << r.err;
  r = expect_usage_error("xyzzy", {});
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown subcommand 'xyzzy'; subcommands: "), std::string::npos) << r.err;
}

TEST(CliBadInput, OptionWithoutItsValue) {
  EXPECT_EQ(expect_usage_error("kernels", {"--pid"}).err, "gpuscope: --pid needs a value (a process id)\n");
  EXPECT_EQ(expect_usage_error("trace", {"-p"}).err, "gpuscope: --pid needs a value (a process id)\n");
  EXPECT_EQ(expect_usage_error("latency", {"-p", "-d", "1"}).err, "gpuscope: --pid needs a value (a process id)\n");
  EXPECT_EQ(expect_usage_error("memleak", {"-d"}).err,
            "gpuscope: --duration needs a value (a number of seconds, or a duration such as 500ms, 10s, 2m, 1h)\n");
  EXPECT_EQ(expect_usage_error("kernels", {"--lib"}).err, "gpuscope: --lib needs a value (a path)\n");
  EXPECT_EQ(expect_usage_error("trace", {"-c"}).err, "gpuscope: --comm needs a value (a process name)\n");
}

TEST(CliBadInput, AProgramGivenToPid) {
  EXPECT_EQ(expect_usage_error("kernels", {"-p", "./app"}).err,
            "gpuscope: -p ./app: -p takes a process id; to trace a program's library use --lib PATH\n");
  EXPECT_EQ(expect_usage_error("trace", {"-p", "/bin/true"}).err,
            "gpuscope: -p /bin/true: -p takes a process id; to trace a program's library use --lib PATH\n");
  EXPECT_EQ(expect_usage_error("frames", {"-p", "./app"}).err,
            "gpuscope: -p ./app: -p takes a process id; to watch a program by its name use -c COMM\n");
  // Not a path: the number's own message.
  EXPECT_EQ(expect_usage_error("kernels", {"-p", "abc"}).err,
            "gpuscope: --pid must be a whole number of process id between 1 and 2147483647\n");
}

TEST(CliBadInput, EmptyCommRefusedEverywhere) {
  size_t tried = 0;
  for (auto& sub : subcommands()) {
    if (run({gpuscope_bin(), sub, "--help"}).out.find("-c,--comm") == std::string::npos) continue;
    tried++;
    EXPECT_EQ(expect_usage_error(sub, {"-c", ""}).err, "gpuscope: --comm needs a process name\n") << sub;
  }
  EXPECT_GE(tried, 9u);  // the uprobe subcommands, ioctl, starvation, frames, agent, timeline
}

TEST(CliBadInput, NumbersThroughTheOneValidator) {
  for (std::string v : {" 0.5", "0.5 ", "0x1p-3"})
    EXPECT_NE(expect_usage_error("agent", {"--gputime-duty", v}).err.find("--gputime-duty must be a number"),
              std::string::npos)
        << "'" << v << "'";
  for (std::string v : {"1e-300", "0.05", "-1", "10001"})
    EXPECT_EQ(expect_usage_error("agent", {"--max-cpu-percent", v}).err,
              "gpuscope: --max-cpu-percent must be a number of percent of one core between 0.1 and 10000, or 0 (off)\n")
        << v;
  EXPECT_EQ(expect_usage_error("kernels", {"--interval", "0x1p-3"}).err,
            "gpuscope: --interval must be a number of seconds between 0.01 and 86400, or a duration such as 500ms, "
            "10s, 2m, 1h\n");
  EXPECT_EQ(expect_usage_error("trace", {"-d", "1d"}).err,
            "gpuscope: --duration must be a number of seconds between 0 and 31536000, or a duration such as 500ms, "
            "10s, 2m, 1h\n");
}

TEST(CliBadInput, DoctorTakesNoDuration) {
  auto r = expect_usage_error("doctor", {"-d", "1"});
  EXPECT_NE(r.err.find("-d"), std::string::npos) << r.err;
}

TEST(CliBadInput, ContainerPathsMustBeDirectories) {
  EXPECT_EQ(expect_usage_error("kernels", {"--runtime-root", ""}).err, "gpuscope: --runtime-root needs a directory\n");
  EXPECT_EQ(expect_usage_error("trace", {"--runtime-root", "/nonexistent-gs"}).err,
            "gpuscope: --runtime-root /nonexistent-gs: No such file or directory\n");
  EXPECT_EQ(expect_usage_error("agent", {"--runtime-root", "/etc/passwd"}).err,
            "gpuscope: --runtime-root /etc/passwd: not a directory\n");
  EXPECT_EQ(expect_usage_error("kernels", {"--pods-dir", "/nonexistent-gs"}).err,
            "gpuscope: --pods-dir /nonexistent-gs: No such file or directory\n");
  EXPECT_EQ(expect_usage_error("memleak", {"--pods-dir", ""}).err, "gpuscope: --pods-dir needs a directory\n");
  EXPECT_EQ(expect_usage_error("latency", {"--pods-dir", "/etc/passwd"}).err,
            "gpuscope: --pods-dir /etc/passwd: not a directory\n");
}

// A 100 KB value is not echoed whole, wherever the error names it.
TEST(CliBadInput, LongValuesClipped) {
  const std::string big(100000, 'q');
  const std::string cut = std::string(64, 'q') + "…";
  EXPECT_EQ(expect_usage_error(big, {}).err.rfind("gpuscope: unknown subcommand '" + cut + "'; subcommands: ", 0), 0u);
  EXPECT_EQ(expect_usage_error("kernels", {"--pods-dir", "/" + big}).err,
            "gpuscope: --pods-dir /" + std::string(63, 'q') + "…: File name too long\n");
  EXPECT_EQ(expect_usage_error("kernels", {big}).err,
            "gpuscope: The following argument was not expected: " + cut + "\n");
  EXPECT_EQ(expect_usage_error("agent", {"--collectors", "kernels," + big})
                .err.rfind("gpuscope: unknown collector '" + cut + "' in --collectors; known: kernels,", 0),
            0u);
}

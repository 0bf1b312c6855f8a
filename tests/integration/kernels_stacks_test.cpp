// gpuscope kernels --stacks: launch sites of a C program with frame pointers and of a Python
// program (frames read from the interpreter's memory), launching one kernel from two functions
// in known counts through the stand-in driver; the split is exact at --stack-every 1 and within
// 5 % at the default; bad input.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// gpuscope kernels --json --stacks `flags` while `app` launches after SIGUSR1 and exits after a
// second one: its pid, the site lines of its, and gpuscope's stderr.
struct Sites {
  pid_t pid = 0;
  std::vector<json> lines;
  std::string err;
};

Sites run_sites(const std::vector<std::string>& app, const std::vector<std::string>& flags) {
  Sites r;
  std::vector<std::string> gargs{gpuscope_bin(), "kernels",  "--json", "--interval",
                                 "0.5",          "--stacks", "--lib",  standin_lib_dir() + "/libcuda.so.1"};
  gargs.insert(gargs.end(), flags.begin(), flags.end());
  Process g(gargs);
  EXPECT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  Process w(app);
  r.pid = ready_pid(w);
  sleep_s(1.0);  // its naming call was seen: its maps and interpreter are read
  w.signal(SIGUSR1);
  EXPECT_TRUE(w.wait_for("launched", 60)) << w.err();
  sleep_s(1.0);
  w.signal(SIGUSR1);
  EXPECT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.5);  // its exit is read: its sites are kept from it
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  r.err = g.err();
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "site" && l["pid"] == r.pid) r.lines.push_back(l);
  return r;
}

std::string standin_sites() { return std::string(STANDIN_SITES); }

const json* site_named(const std::vector<json>& lines, const std::string& site) {
  for (auto& l : lines)
    if (l["site"] == site) return &l;
  return nullptr;
}

}  // namespace

// Every launch sampled: 30 launches from site_a() and 10 from site_b(), exactly, each with its
// whole stack (the probed entry point, the site, main), and the folded file holds those counts.
TEST(KernelsStacks, ExactSplitAtEveryLaunch) {
  std::string folded = "/tmp/gpuscope-kernels-sites-" + std::to_string(getpid()) + ".folded";
  std::string svg = "/tmp/gpuscope-kernels-sites-" + std::to_string(getpid()) + ".svg";
  auto r = run_sites({standin_sites(), "30", "10"}, {"--stack-every", "1", "--folded", folded, "--svg", svg});
  ASSERT_EQ(r.lines.size(), 2u) << r.err << testing::PrintToString(r.lines);
  for (auto [site, n] : {std::pair<std::string, uint64_t>{"site_a", 30}, {"site_b", 10}}) {
    const json* l = site_named(r.lines, site);
    ASSERT_TRUE(l) << site << ": " << testing::PrintToString(r.lines);
    EXPECT_EQ((*l)["kernel"], "site_kern");
    EXPECT_EQ((*l)["comm"], "standin_sites");
    EXPECT_EQ((*l)["launches"], n);
    EXPECT_EQ((*l)["samples"], n);
    EXPECT_EQ((*l)["estimated"], false);
    EXPECT_EQ((*l)["cut_short"], false);  // main's caller is in libc: the walk reached the thread's start
    auto stack = (*l)["stack"].get<std::vector<std::string>>();
    ASSERT_GE(stack.size(), 3u) << (*l).dump();
    EXPECT_EQ(stack[0], "cuLaunchKernel");
    EXPECT_EQ(stack[1], site);
    EXPECT_EQ(stack[2], "main");
  }
  std::istringstream in(read_file(folded));
  std::map<std::string, uint64_t> by_site;
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    lines++;
    EXPECT_TRUE(line.starts_with("standin_sites;")) << line;
    auto sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    EXPECT_TRUE(line.substr(0, sp).ends_with(";cuLaunchKernel;[kernel] site_kern")) << line;
    for (std::string s : {"site_a", "site_b"})
      if (line.find(";main;" + s + ";cuLaunchKernel;") != std::string::npos) by_site[s] += std::stoull(line.substr(sp));
  }
  EXPECT_EQ(lines, 2u) << read_file(folded);
  EXPECT_EQ(by_site, (std::map<std::string, uint64_t>{{"site_a", 30}, {"site_b", 10}})) << read_file(folded);
  std::string s = read_file(svg);
  EXPECT_TRUE(s.starts_with("<?xml")) << s.substr(0, 200);
  EXPECT_NE(s.find("site_a"), std::string::npos);
  EXPECT_NE(s.find("[kernel] site_kern"), std::string::npos);
  unlink(folded.c_str());
  unlink(svg.c_str());
}

// At the default stride the counted launches (exact) are split in the sampled proportions:
// within 5 % of 3000 and 1000, and said to be estimates from fewer samples.
TEST(KernelsStacks, DefaultStrideEstimates) {
  auto r = run_sites({standin_sites(), "3000", "1000"}, {});
  ASSERT_EQ(r.lines.size(), 2u) << r.err << testing::PrintToString(r.lines);
  uint64_t total = 0;
  for (auto [site, n] : {std::pair<std::string, double>{"site_a", 3000}, {"site_b", 1000}}) {
    const json* l = site_named(r.lines, site);
    ASSERT_TRUE(l) << site << ": " << testing::PrintToString(r.lines);
    auto launches = (*l)["launches"].get<uint64_t>();
    total += launches;
    EXPECT_LE(std::abs(launches - n), 0.05 * n) << (*l).dump();
    EXPECT_EQ((*l)["estimated"], true);
    // Every 64th launch of the process: about n / 64 samples.
    EXPECT_GE((*l)["samples"].get<uint64_t>(), n / 64 - 2) << (*l).dump();
    EXPECT_LE((*l)["samples"].get<uint64_t>(), n / 64 + 2) << (*l).dump();
  }
  EXPECT_EQ(total, 4000u);
}

// The table: one row per site, launches marked as estimates.
TEST(KernelsStacks, Table) {
  Process g({gpuscope_bin(), "kernels", "--interval", "60", "--stacks", "--stack-every", "1", "--lib",
             standin_lib_dir() + "/libcuda.so.1"});
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  Process w({standin_sites(), "7", "3"});
  pid_t pid = ready_pid(w);
  sleep_s(1.0);
  w.signal(SIGUSR1);
  ASSERT_TRUE(w.wait_for("launched", 30)) << w.err();
  sleep_s(0.5);
  w.signal(SIGUSR1);
  EXPECT_EQ(w.wait(20), 0);
  sleep_s(0.5);
  g.signal(SIGINT);
  ASSERT_EQ(g.wait(30), 0) << g.err();
  std::string out = g.out();
  auto at = out.find("\nlaunch sites: 1 in 1 launches per process sampled");
  ASSERT_NE(at, std::string::npos) << out;
  std::istringstream in(out.substr(at + 1));
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  EXPECT_TRUE(line.find("PID") != std::string::npos && line.find("SITE") != std::string::npos &&
              line.find("KERNEL") != std::string::npos)
      << out;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> cols;
    for (std::string c; f >> c;) cols.push_back(c);
    // PID, COMM, the container columns where there are, LAUNCHES, SAMPLES, SITE, KERNEL.
    if (cols.size() >= 6 && cols[0] == std::to_string(pid)) {
      cols.erase(cols.begin() + 2, cols.end() - 4);
      rows.push_back(cols);
    }
  }
  using V = std::vector<std::string>;
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0], (V{std::to_string(pid), "standin_sites", "7", "7", "site_a", "site_kern"})) << out;
  EXPECT_EQ(rows[1], (V{std::to_string(pid), "standin_sites", "3", "3", "site_b", "site_kern"})) << out;
}

// Python (Debian's, as CI has it): the sites are the Python functions, named from the
// interpreter's memory (no -X perf), with the native frames below them.
TEST(KernelsStacks, PythonFunctions) {
  auto r = run_sites({"/usr/bin/python3", STANDIN_SITES_PY, standin_lib_dir() + "/libcuda.so.1", "30", "10"},
                     {"--stack-every", "1"});
  ASSERT_EQ(r.lines.size(), 2u) << r.err << testing::PrintToString(r.lines);
  EXPECT_NE(r.err.find("gpuscope: 40 of 40 sampled stacks end before their thread's start"), std::string::npos)
      << r.err;
  for (auto [fn, n] : {std::pair<std::string, uint64_t>{"launch_a", 30}, {"launch_b", 10}}) {
    const json* l = nullptr;
    for (auto& x : r.lines)
      if (x["site"].get<std::string>().starts_with("py::" + fn + " (" + std::string(STANDIN_SITES_PY) + ":")) l = &x;
    ASSERT_TRUE(l) << fn << ": " << testing::PrintToString(r.lines);
    EXPECT_EQ((*l)["launches"], n);
    EXPECT_EQ((*l)["samples"], n);
    EXPECT_EQ((*l)["estimated"], false);
    EXPECT_EQ((*l)["kernel"], "site_kern");
    // Debian's interpreter has no frame pointers: the native walk ends in libffi, and says so.
    EXPECT_EQ((*l)["cut_short"], true) << (*l).dump();
    auto stack = (*l)["stack"].get<std::vector<std::string>>();
    EXPECT_EQ(stack[0], "cuLaunchKernel") << (*l).dump();
    auto site = std::find(stack.begin(), stack.end(), (*l)["site"].get<std::string>());
    ASSERT_NE(site, stack.end()) << (*l).dump();
    ASSERT_NE(site + 1, stack.end()) << (*l).dump();
    EXPECT_TRUE(site[1].starts_with("py::<module> (")) << (*l).dump();
  }
}

TEST(KernelsStacks, BadInput) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--stacks", "--stack-every", "0"},
                                        {"--stacks", "--stack-every", "-1"},
                                        {"--stacks", "--stack-every", "1.5"},
                                        {"--stack-every", "8"},
                                        {"--folded", "/tmp/x.folded"},
                                        {"--stacks", "--folded", "/nonexistent/dir/x.folded"},
                                        {"--stacks", "--svg", "/proc/x.svg"},
                                        {"--stacks", "--site-skip", "("}})
    expect_usage_error("kernels", args);
  auto r = expect_usage_error("kernels", {"--svg", "/tmp/x.svg"});
  EXPECT_NE(r.err.find("--svg needs --stacks"), std::string::npos) << r.err;
}

// The agent's launch sites (--launch-site-every 1: every launch sampled): /api/kernels/folded
// holds the exact split, root first, /api/processes the process's top sites, and both outlive
// the process's exit; its GPU-time form is empty where no CUPTI library records. A negative
// sampling is a usage error.
TEST(KernelsStacks, AgentFoldedStacksAndTopSites) {
  expect_usage_error("agent", {"--launch-site-every", "-1"});
  Workload w("kas", "gka");
  Agent a(w, {"-c", "standin_sites", "--collectors", "kernels", "--launch-site-every", "1"});
  Process p({standin_sites(), "30", "10"});
  pid_t pid = ready_pid(p);
  sleep_s(1.0);  // its naming call was seen: its maps are read
  p.signal(SIGUSR1);
  ASSERT_TRUE(p.wait_for("launched", 60)) << p.err();
  const std::string base = "standin_sites;libc.so.6+";
  auto expect_folded = [&](const std::string& when) {
    std::string folded;
    for (int i = 0; i < 100 && folded.find(";site_b;") == std::string::npos; i++) {
      folded = http_get(a.port(), "/api/kernels/folded").body;
      sleep_s(0.1);
    }
    std::istringstream in(folded);
    std::map<std::string, uint64_t> by_site;
    size_t lines = 0;
    for (std::string line; std::getline(in, line); lines++) {
      EXPECT_TRUE(line.starts_with(base)) << when << ": " << line;
      for (std::string s : {"site_a", "site_b"})
        if (line.find(";main;" + s + ";cuLaunchKernel;[kernel] site_kern ") != std::string::npos)
          by_site[s] += std::stoull(line.substr(line.rfind(' ')));
    }
    EXPECT_EQ(lines, 2u) << when << ": " << folded;
    EXPECT_EQ(by_site, (std::map<std::string, uint64_t>{{"site_a", 30}, {"site_b", 10}})) << when << ": " << folded;
  };
  expect_folded("running");
  json procs = a.api("/api/processes");
  const json* me = nullptr;
  for (auto& e : procs["processes"])
    if (e["pid"] == pid) me = &e;
  ASSERT_TRUE(me) << procs.dump();
  json want = json::array(
      {{{"site", "site_a"}, {"kernel", "site_kern"}, {"launches", 30}, {"samples", 30}, {"estimated", false}},
       {{"site", "site_b"}, {"kernel", "site_kern"}, {"launches", 10}, {"samples", 10}, {"estimated", false}}});
  EXPECT_EQ((*me)["launch_sites"], want) << me->dump();
  p.signal(SIGUSR1);
  EXPECT_EQ(p.wait(20), 0) << p.err();
  sleep_s(1.0);  // its exit is read at a refresh
  expect_folded("exited");
  EXPECT_EQ(http_get(a.port(), "/api/kernels/folded/gpu-time").body, "");
  std::string m = a.metrics();
  EXPECT_EQ(value_of(m, "gpuscope_events_lost_total", {{"collector", "kernels"}, {"reason", "launch_stacks"}}), 0);
  EXPECT_EQ(value_of(m, "gpuscope_events_lost_total", {{"collector", "kernels"}, {"reason", "launch_site_map_full"}}),
            0);
  EXPECT_EQ(a.stop(), 0);
}

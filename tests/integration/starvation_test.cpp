// gpuscope starvation against real threads (tests/fixtures/starvation), real BPF, and a real
// `gpuscope bridge` publishing what the NVML stand-in is told, into a test-private bpffs dir.
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "bridge/bridge_maps.h"
#include "core/system.h"
#include "bridge_fixture.h"
#include "harness.h"

using namespace gstest;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct Bridge {
  Process p;
  Bridge(const PinDir& d, const StandinFile& f)
      : p({gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path, "--poll-interval-ms", "100"},
          {f.env()}) {
    if (!p.wait_for("bridge publishing", 10, true)) ADD_FAILURE() << "bridge did not start: " << p.err();
  }
};

// "ready pid=P name=TID ..." from the fixture.
struct Fixture {
  std::unique_ptr<Process> p;
  std::map<std::string, std::string> ready;
  explicit Fixture(std::vector<std::string> argv) : p(std::make_unique<Process>(argv)) {
    if (!p->wait_for("ready pid=", 10)) {
      ADD_FAILURE() << "fixture did not start: " << p->err();
      return;
    }
    std::istringstream in(p->out().substr(p->out().find("ready ")));
    std::string w;
    while (in >> w)
      if (auto eq = w.find('='); eq != std::string::npos) ready[w.substr(0, eq)] = w.substr(eq + 1);
  }
  static Fixture burn(std::vector<std::string> pre = {}, std::vector<std::string> args = {}) {
    pre.push_back(STARV_FIXTURE);
    pre.push_back("burn");
    pre.insert(pre.end(), args.begin(), args.end());
    return Fixture(pre);
  }
  int num(const std::string& k) const { return ready.count(k) ? std::stoi(ready.at(k)) : -1; }
  int pid() const { return num("pid"); }
};

std::vector<std::string> starv_argv(const PinDir& d, std::vector<std::string> extra) {
  std::vector<std::string> v{gpuscope_bin(), "starvation", "--pin-dir", d.path};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

struct Starvation {
  Process p;
  Starvation(const PinDir& d, std::vector<std::string> extra) : p(starv_argv(d, std::move(extra))) {
    if (!p.wait_for("watching for GPU starvation", 20, true)) ADD_FAILURE() << "did not start: " << p.err();
  }
  std::vector<json> stop() {
    p.signal(SIGINT);
    EXPECT_EQ(p.wait(30), 0) << p.err();
    return parse_lines(p.out());
  }
};

std::vector<json> rows_of(const std::vector<json>& rows, int tid) {
  std::vector<json> v;
  for (auto& r : rows)
    if (r["tid"] == tid) v.push_back(r);
  return v;
}

uint64_t cpu_of(const std::vector<json>& rows) {
  uint64_t s = 0;
  for (auto& r : rows) s += r["cpu_time_ns"].get<uint64_t>();
  return s;
}

// On-CPU nanoseconds of one thread, as the scheduler counts them.
uint64_t schedstat(int pid, int tid) {
  std::ifstream f(fmt::format("/proc/{}/task/{}/schedstat", pid, tid));
  uint64_t ns = 0;
  f >> ns;
  return ns;
}

uint64_t switches(int pid, int tid) {
  std::ifstream f(fmt::format("/proc/{}/task/{}/status", pid, tid));
  uint64_t n = 0;
  for (std::string line; std::getline(f, line);)
    if (line.find("ctxt_switches:") != std::string::npos) n += std::stoull(line.substr(line.find(':') + 1));
  return n;
}

bool has_frame(const json& stack, const std::string& needle) {
  for (auto& f : stack)
    if (f.get<std::string>().find(needle) != std::string::npos) return true;
  return false;
}

std::string standin_for(int pid, unsigned util = 0) {
  return fmt::format("device 0 util {}\nprocess 0 {} 1048576\n", util, pid);
}

// A Python fixture (`argv`) burning CPU while its GPU idles, under `gpuscope starvation
// --collect-ustack` at 199 Hz for 2.2 s: its burner thread, the rows, and starvation's output.
struct Sampled {
  int burner = -1;
  std::vector<json> rows;
  std::string out, err;
};
void sample_python(const std::vector<std::string>& argv, Sampled* r) {
  PinDir d;
  StandinFile f;
  Fixture fx(argv);
  int pid = fx.pid();
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  Bridge b(d, f);
  Starvation s(d,
               {"--json", "-p", std::to_string(pid), "--min-idle-ms", "200", "--collect-ustack", "--sample-hz", "199"});
  std::this_thread::sleep_for(2200ms);
  r->rows = s.stop();
  r->burner = fx.num("burner");
  r->out = s.p.out();
  r->err = s.p.err();
  kill(pid, SIGKILL);
}

void check_row_fields(const json& r, int pid, int tid, const std::string& thread) {
  EXPECT_EQ(r["type"], "starvation");
  EXPECT_EQ(r["pid"], pid);
  EXPECT_EQ(r["tid"], tid);
  EXPECT_EQ(r["comm"], "starv_fixture");
  EXPECT_EQ(r["thread"], thread);
  EXPECT_TRUE(r["container"].is_string());
  EXPECT_GT(r["cpu_time_ns"].get<uint64_t>(), 0u);
  EXPECT_GT(r["hit_count"].get<uint64_t>(), 0u);
  EXPECT_TRUE(r["ustack"].is_array());
  EXPECT_TRUE(r["kstack"].is_array());
}

}  // namespace

TEST(StarvationThread, BurnerReportedWithItsCpuTimeStackAndFlameGraph) {
  PinDir d;
  StandinFile f;
  Fixture fx = Fixture::burn();
  int pid = fx.pid(), burner = fx.num("burner"), sleeper = fx.num("sleeper");
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  Bridge b(d, f);
  std::string folded = fmt::format("/tmp/gstest-starv-{}.folded", getpid());
  std::string svg = fmt::format("/tmp/gstest-starv-{}.svg", getpid());
  Starvation s(d, {"--json", "-p", std::to_string(pid), "--min-idle-ms", "200", "--collect-ustack", "--collect-kstack",
                   "--folded", folded, "--svg", svg});
  // Counting starts min-idle after the programs load, just before that line.
  std::this_thread::sleep_for(200ms);
  uint64_t s0 = schedstat(pid, burner);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(3s);
  uint64_t s1 = schedstat(pid, burner);
  double window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto rows = s.stop();

  auto mine = rows_of(rows, burner);
  ASSERT_FALSE(mine.empty()) << s.p.out() << s.p.err();
  EXPECT_TRUE(rows_of(rows, sleeper).empty()) << "a sleeping thread burns nothing";
  EXPECT_TRUE(rows_of(rows, pid).empty()) << "the main thread only waits";
  EXPECT_LE(mine.size(), static_cast<size_t>(window_s + 0.2) + 2) << "one row per thread per second";
  for (auto& r : mine) {
    check_row_fields(r, pid, burner, "burner");
    EXPECT_GE(r["idle_ns"].get<uint64_t>(), 200'000'000u);
    EXPECT_TRUE(has_frame(r["ustack"], "fixture::preprocess_burn(void*)")) << r.dump();
    EXPECT_TRUE(has_frame(r["ustack"], "burner_main(int)")) << r.dump();
  }
  for (size_t i = 1; i < mine.size(); i++)
    EXPECT_GT(mine[i]["idle_ns"].get<uint64_t>(), mine[i - 1]["idle_ns"].get<uint64_t>()) << "the GPU stays idle";
  double reported = static_cast<double>(cpu_of(mine)), actual = static_cast<double>(s1 - s0);
  EXPECT_NEAR(reported / actual, 1.0, 0.2) << "reported " << reported << " ns, schedstat " << actual << " ns";

  // Folded stacks: weights in ns, summing to the sampled time, which tracks the CPU time.
  std::ifstream in(folded);
  BurnerFolded fo;
  ASSERT_NO_FATAL_FAILURE(read_burner_folded(in, &fo));
  auto [lines, total, known] = fo;
  ASSERT_GT(lines, 0);
  auto err = s.p.err();
  auto at = err.find(" ns sampled");
  ASSERT_NE(at, std::string::npos) << err;
  auto eq = err.rfind("= ", at);
  EXPECT_EQ(total, std::stoull(err.substr(eq + 2, at - eq - 2))) << err;
  EXPECT_NEAR(static_cast<double>(total) / reported, 1.0, 0.25) << "49 Hz samples against the accounted time";
  EXPECT_GE(static_cast<double>(known), 0.9 * static_cast<double>(total)) << "the known function dominates";

  // The SVG parses as XML and draws the known function.
  auto r = run({"python3", "-c",
                "import sys, xml.etree.ElementTree as E\n"
                "t = E.parse(sys.argv[1]).getroot()\n"
                "ns = '{http://www.w3.org/2000/svg}'\n"
                "titles = [x.text for x in t.iter(ns + 'title')]\n"
                "print(t.tag == ns + 'svg', len(list(t.iter(ns + 'rect'))), "
                "sum('fixture::preprocess_burn' in s for s in titles))",
                svg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream parsed(r.out);
  std::string is_svg;
  int rects = 0, named = 0;
  parsed >> is_svg >> rects >> named;
  EXPECT_EQ(is_svg, "True") << r.out;
  EXPECT_GE(rects, 4) << r.out;
  EXPECT_GE(named, 1) << r.out;
  unlink(folded.c_str());
  unlink(svg.c_str());
}

TEST(StarvationThread, BurnerAloneOnItsCpuIsCounted) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two CPUs";
  // Everything but the burner on CPU 0; the burner alone on CPU 1 (taskset), where it is never
  // switched out: only the samples see it.
  cpu_set_t old, zero;
  sched_getaffinity(0, sizeof old, &old);
  CPU_ZERO(&zero);
  CPU_SET(0, &zero);
  ASSERT_EQ(sched_setaffinity(0, sizeof zero, &zero), 0);
  PinDir d;
  StandinFile f;
  Fixture fx = Fixture::burn({"taskset", "-c", "1"});
  sched_setaffinity(0, sizeof old, &old);
  int pid = fx.pid(), burner = fx.num("burner");
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  sched_setaffinity(0, sizeof zero, &zero);
  Bridge b(d, f);
  Starvation s(d, {"--json", "-p", std::to_string(pid), "--min-idle-ms", "200"});
  sched_setaffinity(0, sizeof old, &old);
  std::this_thread::sleep_for(200ms);
  uint64_t s0 = schedstat(pid, burner), sw0 = switches(pid, burner);
  std::this_thread::sleep_for(3s);
  uint64_t s1 = schedstat(pid, burner), sw1 = switches(pid, burner);
  auto rows = s.stop();
  RecordProperty("burner_switches_in_window", static_cast<int>(sw1 - sw0));
  RecordProperty("burner_cpu_ns_in_window", std::to_string(s1 - s0));
  auto mine = rows_of(rows, burner);
  ASSERT_FALSE(mine.empty()) << s.p.out() << s.p.err();
  for (auto& r : mine) check_row_fields(r, pid, burner, "burner");
  double reported = static_cast<double>(cpu_of(mine)), actual = static_cast<double>(s1 - s0);
  // On a quiet machine the burner has CPU 1 to itself (about 3e9 ns here); a busy one shares it.
  EXPECT_GT(actual, 0.5e9) << "the burner ran";
  EXPECT_NEAR(reported / actual, 1.0, 0.2)
      << "reported " << reported << " ns, schedstat " << actual << " ns; switches in the window: " << sw1 - sw0;
}

// CPython 3.12 -X perf names its trampolines in /tmp/perf-PID.map, PID as the process sees it. Here
// the fixture runs in its own pid and mount namespaces (nspid 1, private /tmp) and burns through a
// trampoline in an anonymous executable page, which the test names in that file.
TEST(StarvationThread, PythonNamesFromThePerfMapInTheProcessOwnNamespace) {
  PinDir d;
  StandinFile f;
  // --kill-child: killing unshare kills the namespace's init, our fixture. The build tree may
  // itself live under /tmp, which the tmpfs hides: the fixture is run through a descriptor of
  // its directory opened before the mount (keeping its name, hence its comm).
  std::string fixture = STARV_FIXTURE;
  std::string dir = fixture.substr(0, fixture.rfind('/')), name = fixture.substr(fixture.rfind('/') + 1);
  Fixture fx({"unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private", "sh",
              "-c", "exec 3<'" + dir + "' && mount -t tmpfs tmpfs /tmp && exec /proc/self/fd/3/" + name + " burn"});
  ASSERT_EQ(fx.pid(), 1) << "pid 1 of its namespace";
  std::string children = gpuscope::read_file(fmt::format("/proc/{}/task/{}/children", fx.p->pid(), fx.p->pid()));
  int host_pid = atoi(children.c_str());
  ASSERT_GT(host_pid, 1) << children;
  ASSERT_EQ(gpuscope::proc_comm(host_pid), "starv_fixture");
  std::string map = fmt::format("/proc/{}/root/tmp/perf-1.map", host_pid);
  {
    std::ofstream m(map);
    uint64_t jit = std::stoull(fx.ready["jit"], nullptr, 16);
    m << fmt::format("{:x} {:x} py::load_batch:/app/train.py\n", jit - 0x100, 0x40);
    m << fmt::format("{:x} {:x} py::preprocess_burn:/app/train.py\n", jit, std::stoul(fx.ready["jit_size"]));
  }
  ASSERT_TRUE(fs::exists(map));
  f.write(standin_for(host_pid));
  Bridge b(d, f);
  Starvation s(d, {"--json", "-p", std::to_string(host_pid), "--min-idle-ms", "200", "--collect-ustack"});
  std::this_thread::sleep_for(2200ms);
  auto rows = s.stop();
  int n = 0;
  for (auto& r : rows) {
    if (r["pid"] != host_pid) continue;
    n++;
    EXPECT_EQ(r["thread"], "burner");
    std::vector<std::string> st = r["ustack"];
    auto at = [&](const std::string& name) {
      return std::find_if(st.begin(), st.end(), [&](auto& s) { return s.find(name) != std::string::npos; }) -
             st.begin();
    };
    auto leaf = at("fixture::preprocess_burn"), py = at("py::preprocess_burn:/app/train.py"),
         caller = at("burner_main");
    ASSERT_LT(py, static_cast<long>(st.size())) << r.dump();
    EXPECT_EQ(st[py], "py::preprocess_burn:/app/train.py");
    EXPECT_LT(leaf, py) << r.dump();
    EXPECT_LT(py, caller) << r.dump();
    EXPECT_EQ(at("py::load_batch"), static_cast<long>(st.size())) << "a neighbouring entry is not matched";
  }
  EXPECT_GE(n, 1) << s.p.out() << s.p.err();
  kill(host_pid, SIGKILL);
}

// Lines of a fixture file carrying "# mark:<tag>".
static std::vector<int> marked_lines(const std::string& file, const std::string& tag) {
  std::ifstream f(file);
  std::vector<int> r;
  int n = 0;
  for (std::string line; std::getline(f, line);)
    if (++n, line.find("# mark:" + tag) != std::string::npos) r.push_back(n);
  return r;
}

// The host tid of the thread that is ns_tid in host_pid's own pid namespace.
static int host_tid(int host_pid, int ns_tid) {
  for (auto& e : fs::directory_iterator(fmt::format("/proc/{}/task", host_pid))) {
    std::ifstream f(e.path() / "status");
    for (std::string line; std::getline(f, line);)
      if (line.starts_with("NSpid:")) {
        std::istringstream in(line.substr(6));
        int v = 0, last = 0;
        while (in >> v) last = v;
        if (last == ns_tid) return std::stoi(e.path().filename());
      }
  }
  return -1;
}

// Debian's python3 (3.11, no -X perf, no frame pointers) in its own pid and mount namespaces:
// the interpreter's frames, read in BPF, name the burner's Python chain in the rows and the
// folded stacks, innermost first, with file and line.
TEST(StarvationThread, PythonFramesFromTheInterpreterInItsOwnNamespace) {
  PinDir d;
  StandinFile f;
  std::string script = std::string(PY_FIXTURE_DIR) + "/burn.py";
  Fixture fx({"unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private",
              "/usr/bin/python3", script, "60"});
  ASSERT_EQ(fx.pid(), 1) << "pid 1 of its namespace";
  std::string children = gpuscope::read_file(fmt::format("/proc/{}/task/{}/children", fx.p->pid(), fx.p->pid()));
  int host_pid = atoi(children.c_str());
  ASSERT_GT(host_pid, 1) << children;
  int burner = host_tid(host_pid, fx.num("burner"));
  ASSERT_GT(burner, 0);
  ASSERT_NE(burner, fx.num("burner")) << "the namespace's tids differ from the host's";
  f.write(standin_for(host_pid));
  Bridge b(d, f);
  std::string folded = fmt::format("/tmp/gstest-starv-py-{}.folded", getpid());
  Starvation s(d, {"--json", "-p", std::to_string(host_pid), "--min-idle-ms", "200", "--collect-ustack", "--folded",
                   folded, "--sample-hz", "199"});
  std::this_thread::sleep_for(2500ms);
  auto rows = s.stop();
  auto mine = rows_of(rows, burner);
  ASSERT_FALSE(mine.empty()) << s.p.out() << s.p.err();
  auto in_lines = [&](const std::string& frame, const std::string& fn, const std::string& tag) {
    std::string head = "py::" + fn + " (" + script + ":";
    if (!frame.starts_with(head) || !frame.ends_with(")")) return false;
    int line = std::stoi(frame.substr(head.size()));
    auto want = marked_lines(script, tag);
    return std::find(want.begin(), want.end(), line) != want.end();
  };
  int named = 0;
  for (auto& r : mine) {
    EXPECT_EQ(r["pid"], host_pid);
    std::vector<std::string> st = r["ustack"];
    auto inner = std::find_if(st.begin(), st.end(), [](auto& x) { return x.starts_with("py::inner_burn ("); });
    if (inner == st.end()) continue;  // a sample taken before the interpreter was found
    named++;
    ASSERT_LE(inner - st.begin() + 3, static_cast<long>(st.size())) << r.dump();
    EXPECT_TRUE(in_lines(inner[0], "inner_burn", "inner")) << r.dump();
    EXPECT_TRUE(in_lines(inner[1], "middle", "middle")) << r.dump();
    EXPECT_TRUE(in_lines(inner[2], "outer", "outer")) << r.dump();
    EXPECT_TRUE(std::find_if(inner, st.end(), [](auto& x) { return x.starts_with("py::Thread._bootstrap ("); }) !=
                st.end())
        << r.dump();
  }
  EXPECT_GE(named, 1) << s.p.out() << s.p.err();
  // The flame graph's stacks run outer to inner: the chain in that order, under the thread.
  std::ifstream in(folded);
  uint64_t total = 0, chain = 0;
  for (std::string line; std::getline(in, line);) {
    uint64_t w = std::stoull(line.substr(line.rfind(' ') + 1));
    total += w;
    auto o = line.find(";py::outer ("), m = line.find(";py::middle ("), i = line.find(";py::inner_burn (");
    if (o != std::string::npos && m != std::string::npos && i != std::string::npos && o < m && m < i) chain += w;
  }
  EXPECT_GE(static_cast<double>(chain), 0.8 * static_cast<double>(total)) << "the chain leads the flame graph";
  EXPECT_EQ(s.p.err().find("Python chains"), std::string::npos) << "nothing cut or lost: " << s.p.err();
  unlink(folded.c_str());
  kill(host_pid, SIGKILL);
}

// The BPF walk on the other layouts this machine may have: 3.12 (table) and 3.13
// (_Py_DebugOffsets), from pyenv. CI has only Debian's 3.11 (the test above).
TEST(StarvationThread, PythonFramesOfOtherVersions) {
  std::vector<std::string> found;
  for (std::string p : {"/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.13.0/bin/python3.13"})
    if (fs::exists(p)) found.push_back(p);
  if (found.empty()) GTEST_SKIP() << "no pyenv 3.12.1 or 3.13.0 here (CI has only Debian's 3.11)";
  std::string script = std::string(PY_FIXTURE_DIR) + "/burn.py";
  for (auto& py : found) {
    SCOPED_TRACE(py);
    Sampled s;
    ASSERT_NO_FATAL_FAILURE(sample_python({py, script, "60"}, &s));
    int named = 0;
    for (auto& r : rows_of(s.rows, s.burner)) {
      std::vector<std::string> st = r["ustack"];
      auto inner = std::find_if(st.begin(), st.end(), [](auto& x) { return x.starts_with("py::inner_burn ("); });
      if (inner == st.end() || st.end() - inner < 3) continue;
      named++;
      EXPECT_TRUE(inner[1].starts_with("py::middle (" + script + ":")) << r.dump();
      EXPECT_TRUE(inner[2].starts_with("py::outer (" + script + ":")) << r.dump();
    }
    EXPECT_GE(named, 1) << s.out << s.err;
  }
}

// An interpreter with no layout (3.10 here) keeps its native frames, and says so once.
TEST(StarvationThread, PythonVersionWithoutLayoutSaidOnce) {
  std::string py = "/root/.pyenv/versions/3.10.13/bin/python3.10";
  if (!fs::exists(py)) GTEST_SKIP() << "no pyenv 3.10.13 here (CI has only Debian's 3.11)";
  PinDir d;
  StandinFile f;
  std::string script = std::string(PY_FIXTURE_DIR) + "/burn.py";
  Fixture a({py, script, "60"}), b2({py, script, "60"});
  ASSERT_GT(a.pid(), 0);
  ASSERT_GT(b2.pid(), 0);
  f.write(fmt::format("device 0 util 0\nprocess 0 {} 1048576\nprocess 0 {} 1048576\n", a.pid(), b2.pid()));
  Bridge b(d, f);
  Starvation s(d, {"--json", "-p", std::to_string(a.pid()), "-p", std::to_string(b2.pid()), "--min-idle-ms", "200",
                   "--collect-ustack"});
  std::this_thread::sleep_for(1500ms);
  auto rows = s.stop();
  std::string err = s.p.err();
  auto at = err.find("runs Python 3.10 (");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_NE(err.find("native frames only", at), std::string::npos) << err;
  EXPECT_EQ(err.find("runs Python 3.10 (", at + 1), std::string::npos) << "said once for two processes: " << err;
  EXPECT_FALSE(rows_of(rows, a.num("burner")).empty()) << s.p.out();
  for (auto& r : rows) EXPECT_FALSE(has_frame(r["ustack"], "py::inner_burn (")) << r.dump();
  kill(a.pid(), SIGKILL);
  kill(b2.pid(), SIGKILL);
}

// A chain deeper than the bound keeps its innermost 64 frames, and the drops line counts it.
TEST(StarvationThread, PythonChainsPastTheBoundAreCutAndCounted) {
  std::string script = std::string(PY_FIXTURE_DIR) + "/burn.py";
  Sampled s;
  ASSERT_NO_FATAL_FAILURE(sample_python({"/usr/bin/python3", script, "60", "100"}, &s));
  int cut = 0;
  for (auto& r : rows_of(s.rows, s.burner)) {
    std::vector<std::string> st = r["ustack"];
    auto py = std::count_if(st.begin(), st.end(), [](auto& x) { return x.starts_with("py::"); });
    if (!has_frame(r["ustack"], "py::inner_burn (")) continue;
    cut++;
    EXPECT_EQ(py, 64) << r.dump();
    EXPECT_FALSE(has_frame(r["ustack"], "py::Thread._bootstrap (")) << "the outermost frames are the ones cut";
  }
  EXPECT_GE(cut, 1) << s.out << s.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(s.err, m, std::regex(R"(Python chains: (\d+) cut at 64 frames)"))) << s.err;
  EXPECT_GT(std::stoull(m[1]), 0u);
}

// A GPU process that becomes Python by exec (a launcher script) is looked at again: its rows
// name Python frames once the interpreter runs.
TEST(StarvationThread, PythonFramesAfterAnExecIntoPython) {
  PinDir d;
  StandinFile f;
  std::string script = std::string(PY_FIXTURE_DIR) + "/burn.py";
  Process sh({"sh", "-c", "echo started; sleep 1.5; exec /usr/bin/python3 " + script + " 60"});
  ASSERT_TRUE(sh.wait_for("started", 10));
  f.write(standin_for(sh.pid()));
  Bridge b(d, f);
  Starvation s(
      d, {"--json", "-p", std::to_string(sh.pid()), "--min-idle-ms", "200", "--collect-ustack", "--sample-hz", "199"});
  ASSERT_TRUE(sh.wait_for("ready pid=", 10)) << sh.err();
  std::this_thread::sleep_for(3s);
  auto rows = s.stop();
  int named = 0;
  for (auto& r : rows)
    if (r["pid"] == sh.pid() && has_frame(r["ustack"], "py::inner_burn (" + script + ":")) named++;
  EXPECT_GE(named, 1) << s.p.out() << s.p.err();
  sh.signal(SIGKILL);
  sh.wait();
}

// A process starves only when every device it holds memory on is idle: A is on an idle and a
// busy device, C only on the busy one, B only on the idle one.
TEST(StarvationVerdict, NoneWhileAnyOfItsDevicesIsBusy) {
  PinDir d;
  StandinFile f;
  Fixture a = Fixture::burn(), bfx = Fixture::burn(), c = Fixture::burn();
  ASSERT_GT(a.pid(), 0);
  ASSERT_GT(bfx.pid(), 0);
  ASSERT_GT(c.pid(), 0);
  f.write(
      fmt::format("device 0 util 0\ndevice 1 util 60\nprocess 0 {0} 1048576\nprocess 1 {0} 1048576\n"
                  "process 0 {1} 1048576\nprocess 1 {2} 1048576\n",
                  a.pid(), bfx.pid(), c.pid()));
  Bridge b(d, f);
  Starvation s(d, {"--json", "--min-idle-ms", "200"});
  std::this_thread::sleep_for(2500ms);
  auto rows = s.stop();
  int from_b = 0;
  for (auto& r : rows) {
    EXPECT_NE(r["pid"], a.pid()) << "device 1 is busy: " << r.dump();
    EXPECT_NE(r["pid"], c.pid()) << "its only device is busy: " << r.dump();
    if (r["pid"] == bfx.pid()) {
      from_b++;
      EXPECT_EQ(r["tid"], bfx.num("burner"));
    }
  }
  EXPECT_GE(from_b, 1) << "the control on the idle device: " << s.p.out() << s.p.err();
}

TEST(StarvationVerdict, NoneOnStaleDataUntilABridgePublishesAgain) {
  PinDir d;
  StandinFile f;
  Fixture fx = Fixture::burn();
  int pid = fx.pid(), burner = fx.num("burner");
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  auto first = std::make_unique<Bridge>(d, f);
  Starvation s(d, {"--json", "-p", std::to_string(pid), "--min-idle-ms", "1000"});
  first->p.signal(SIGKILL);  // stale 300 ms later, before the GPU has been idle 1000 ms
  first->p.wait(10);
  first.reset();
  std::this_thread::sleep_for(2000ms);
  EXPECT_EQ(s.p.out(), "") << "no verdict on stale data";
  EXPECT_NE(s.p.err().find("went stale"), std::string::npos) << s.p.err();

  Bridge second(d, f);  // takes the pins over in place
  std::string needle = fmt::format("\"tid\":{}", burner);
  EXPECT_TRUE(s.p.wait_for(needle, 5)) << s.p.err();
  auto rows = s.stop();
  EXPECT_FALSE(rows_of(rows, burner).empty());
  auto err = s.p.err();
  EXPECT_NE(err.find("verdicts on", err.find("went stale")), std::string::npos) << err;
}

// No bridge publishing: starvation runs one itself (NVML here: the stand-in), says so once, and
// reports the burner as it does beside `gpuscope bridge`; its pins go with it.
TEST(StarvationVerdict, RunsTheBridgeItselfWhenNoneIsPublishing) {
  PinDir d;
  StandinFile f;
  Fixture fx = Fixture::burn();
  int pid = fx.pid(), burner = fx.num("burner");
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  Process s(starv_argv(d, {"--json", "-p", std::to_string(pid), "--min-idle-ms", "200", "--nvml", NVML_STANDIN}),
            {f.env()});
  EXPECT_TRUE(s.wait_for(fmt::format("\"tid\":{}", burner), 10)) << s.err();
  s.signal(SIGINT);
  EXPECT_EQ(s.wait(30), 0) << s.err();
  auto mine = rows_of(parse_lines(s.out()), burner);
  ASSERT_FALSE(mine.empty()) << s.out() << s.err();
  check_row_fields(mine[0], pid, burner, "burner");
  std::string says = fmt::format("gpuscope: no bridge was publishing under {}; starvation runs one\n", d.path);
  EXPECT_EQ(s.err().find(says), s.err().rfind(says)) << s.err();
  EXPECT_NE(s.err().find(says), std::string::npos) << s.err();
  EXPECT_EQ(s.err().find("no bridge data under"), std::string::npos) << s.err();
  kill(pid, SIGKILL);
}

// Thread "consumer" waits on a futex for "producer", which burns 200 ms per batch: both show,
// the producer by far the larger, the consumer at its futex wait.
TEST(StarvationBlocking, WaiterAndBurnerBothShowTheBurnerDominates) {
  PinDir d;
  StandinFile f;
  Fixture fx({STARV_FIXTURE, "block"});
  int pid = fx.pid(), producer = fx.num("producer"), consumer = fx.num("consumer");
  ASSERT_GT(pid, 0);
  f.write(standin_for(pid));
  Bridge b(d, f);
  Starvation s(d,
               {"--json", "-p", std::to_string(pid), "--min-idle-ms", "200", "--collect-ustack", "--collect-kstack"});
  std::this_thread::sleep_for(3200ms);
  auto rows = s.stop();
  auto prod = rows_of(rows, producer), cons = rows_of(rows, consumer);
  ASSERT_FALSE(prod.empty()) << s.p.out();
  ASSERT_FALSE(cons.empty()) << s.p.out();
  EXPECT_GT(cpu_of(prod), 10 * cpu_of(cons));
  for (auto& r : prod) {
    check_row_fields(r, pid, producer, "producer");
    EXPECT_TRUE(has_frame(r["ustack"], "fixture::produce_batch")) << r.dump();
  }
  int at_futex = 0;
  for (auto& r : cons) {
    check_row_fields(r, pid, consumer, "consumer");
    if (has_frame(r["kstack"], "futex") && has_frame(r["ustack"], "consumer_main")) at_futex++;
  }
  EXPECT_GE(at_futex, 1) << s.p.out();
}

TEST(StarvationBadInput, OneClearLineEach) {
  PinDir d, empty;
  StandinFile f;
  f.write("device 0 util 0\n");
  {
    Bridge b(d, f);
    auto r = run(starv_argv(d, {"--min-idle-ms", "150"}), {}, 20);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err,
              "gpuscope: --min-idle-ms 150 is below 2x the bridge's poll interval (100 ms): an idle spell shorter "
              "than two polls is not seen; use --min-idle-ms 200 or more\n");
    EXPECT_EQ(r.out, "");
    // 2x is enough.
    auto ok = run(starv_argv(d, {"--min-idle-ms", "200", "-d", "0.3"}), {}, 20);
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
  }
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  std::vector<Case> cases = {
      {{"--sample-hz", "0"}, "--sample-hz"},
      {{"--sample-hz", "5000"}, "--sample-hz"},
      {{"--min-idle-ms", "soon"}, "--min-idle-ms"},
      {{"--min-idle-ms", "0"}, "--min-idle-ms"},
      {{"--stale-threshold-ms", "0"}, "--stale-threshold-ms"},
      {{"--no-such-flag"}, "no-such-flag"},
      {{"-p", "999999999"}, "pid 999999999 does not exist"},
      {{"--folded", "/nonexistent/dir/x.folded"}, "/nonexistent/dir/x.folded"},
  };
  for (auto& c : cases) {
    auto r = run(starv_argv(d, c.args), {}, 20);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("gpuscope: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  auto r = run({gpuscope_bin(), "starvation", "--pin-dir", "/tmp"}, {}, 20);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "gpuscope: --pin-dir /tmp is not a directory on bpffs\n");

  // Stale pins: the bridge is gone and its data old. One line says so; nothing is reported.
  std::this_thread::sleep_for(400ms);
  auto stale = run(starv_argv(d, {"-d", "1"}), {}, 20);
  EXPECT_EQ(stale.exit_code, 0) << stale.err;
  EXPECT_EQ(stale.out, "");
  EXPECT_NE(stale.err.find(fmt::format("gpuscope: bridge data under {} is stale: last update ", d.path)),
            std::string::npos)
      << stale.err;
  EXPECT_NE(stale.err.find("(not running); no verdicts until a bridge publishes again\n"), std::string::npos)
      << stale.err;

  // No bridge at all, and none can run (no NVML here): it starts, says so once, and reports nothing.
  auto none = run(starv_argv(empty, {"-d", "1.2", "--nvml", "/nonexistent/libnvidia-ml.so.1"}), {}, 20);
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "");
  std::string says = fmt::format("gpuscope: no bridge data under {} (is `gpuscope bridge` running?)", empty.path);
  auto first = none.err.find(says);
  EXPECT_NE(first, std::string::npos) << none.err;
  EXPECT_EQ(none.err.find(says, first + 1), std::string::npos) << "said once: " << none.err;
  EXPECT_NE(none.err.find(fmt::format("gpuscope: no bridge is publishing under {} and none can run here (NVML not "
                                      "available: /nonexistent/libnvidia-ml.so.1 cannot be opened: No such file or "
                                      "directory)\n",
                                      empty.path)),
            std::string::npos)
      << none.err;
}

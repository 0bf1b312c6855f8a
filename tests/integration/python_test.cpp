// The userspace half of the CPython walk (src/python/pystacks.*) against running interpreters:
// Debian's /usr/bin/python3 (3.11, what CI has) and, where present, pyenv's 3.12 and 3.13. The
// layouts are checked against what the interpreter itself says: code object ids, threads'
// native ids, and line numbers from co_lines().
#include <fcntl.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/fd.h"
#include "harness.h"
#include "python/pystacks.h"

using namespace gstest;
using namespace gpuscope;

namespace {

std::string fixture(const std::string& name) { return std::string(PY_FIXTURE_DIR) + "/" + name; }

// Lines of `file` carrying "# mark:<tag>".
std::vector<int> marked(const std::string& file, const std::string& tag) {
  std::ifstream f(file);
  std::vector<int> r;
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    n++;
    if (line.find("# mark:" + tag) != std::string::npos) r.push_back(n);
  }
  return r;
}

struct Interp {
  std::string path;
  int minor;
};

// /usr/bin/python3 always (CI's); others where this machine has them.
std::vector<Interp> interpreters() {
  std::vector<Interp> v{{"/usr/bin/python3", 11}};
  for (auto& [p, m] : std::vector<std::pair<std::string, int>>{{"/root/.pyenv/versions/3.12.1/bin/python3.12", 12},
                                                               {"/root/.pyenv/versions/3.13.0/bin/python3.13", 13}})
    if (std::filesystem::exists(p)) v.push_back({p, m});
  return v;
}

std::map<std::string, std::string> ready_fields(Process& p) {
  std::map<std::string, std::string> r;
  if (!p.wait_for("ready pid=", 20)) return r;
  std::istringstream in(p.out().substr(p.out().find("ready ")));
  for (std::string w; in >> w;)
    if (auto eq = w.find('='); eq != std::string::npos) r[w.substr(0, eq)] = w.substr(eq + 1);
  return r;
}

}  // namespace

// Each interpreter's layout walks to the burner's frames and names them as the interpreter does.
TEST(PythonWalk, OffsetsMatchTheRunningInterpreter) {
  auto found = interpreters();
  if (found.size() < 3) std::cerr << "only " << found.size() << " interpreter(s) here; checking those\n";
  for (auto& in : found) {
    SCOPED_TRACE(in.path);
    auto v = run({in.path, "-c", "import sys; print(sys.version_info.major, sys.version_info.minor)"});
    ASSERT_EQ(v.exit_code, 0);
    ASSERT_EQ(v.out, fmt::format("3 {}\n", in.minor)) << "the version the test expects of " << in.path;
    Process p({in.path, fixture("burn.py"), "60"});
    auto r = ready_fields(p);
    ASSERT_TRUE(r.count("burner")) << p.err();
    std::string why;
    auto t = find_python(p.pid(), &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->major, 3);
    EXPECT_EQ(t->minor, in.minor);
    auto off = py_offsets(p.pid(), *t);
    ASSERT_TRUE(off) << "no layout for " << t->version();
    auto frames = py_walk_user(p.pid(), *off, static_cast<uint32_t>(std::stoul(r["burner"])));
    ASSERT_GE(frames.size(), 3u);
    // Innermost first: inner_burn, then its callers, each a code object Python gave the id of.
    EXPECT_EQ(frames[0].code, std::stoull(r["code_inner"], nullptr, 16));
    EXPECT_EQ(frames[1].code, std::stoull(r["code_middle"], nullptr, 16));
    EXPECT_EQ(frames[2].code, std::stoull(r["code_outer"], nullptr, 16));
    Fd mem(open(fmt::format("/proc/{}/mem", p.pid()).c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<std::string> names{"inner_burn", "middle", "outer"}, tags{"inner", "middle", "outer"};
    for (int i = 0; i < 3; i++) {
      auto c = py_read_code(mem.get(), *t, *off, frames[i].code, frames[i].tag);
      ASSERT_TRUE(c) << names[i];
      EXPECT_EQ(c->qualname, names[i]);
      EXPECT_EQ(c->filename, fixture("burn.py"));
      int line = py_line_at(c->linetable, c->firstlineno, frames[i].lasti);
      auto want = marked(fixture("burn.py"), tags[i]);
      EXPECT_NE(std::find(want.begin(), want.end(), line), want.end()) << names[i] << " at line " << line;
      // A different life of that address (another co_qualname) is not named.
      EXPECT_FALSE(py_read_code(mem.get(), *t, *off, frames[i].code, frames[i].tag ^ 1));
    }
    // Outer callers come from threading.py, up to the thread's bootstrap.
    bool bootstrap = false;
    for (auto& f : frames)
      if (auto c = py_read_code(mem.get(), *t, *off, f.code, f.tag))
        bootstrap |= c->qualname == "Thread._bootstrap" && c->filename.ends_with("threading.py");
    EXPECT_TRUE(bootstrap);
    p.signal(SIGKILL);
    p.wait();
  }
}

// py_line_at against co_lines() for every instruction of every function of a module.
TEST(PythonWalk, LineTableAsTheInterpreterReadsIt) {
  for (auto& in : interpreters()) {
    SCOPED_TRACE(in.path);
    // Per code object: firstlineno, the table in hex, then "start end line" ranges in code units.
    auto r = run({in.path, "-c", R"(
import threading, json, sys
def codes(c):
    yield c
    for k in c.co_consts:
        if hasattr(k, 'co_lines'):
            yield from codes(k)
src = open(sys.argv[1]).read()
for c in codes(compile(src, sys.argv[1], 'exec')):
    print(c.co_firstlineno, c.co_linetable.hex() or '-', ' '.join(f'{s//2},{e//2},{l}' for s, e, l in c.co_lines() if l is not None))
)",
                  fixture("burn.py")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in_lines(r.out);
    int checked = 0;
    for (std::string line; std::getline(in_lines, line);) {
      std::istringstream w(line);
      int first;
      std::string hex, range;
      w >> first >> hex;
      std::string table;
      for (size_t i = 0; hex != "-" && i + 1 < hex.size(); i += 2)
        table.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      while (w >> range) {
        unsigned s, e;
        int l;
        ASSERT_EQ(sscanf(range.c_str(), "%u,%u,%d", &s, &e, &l), 3);
        for (unsigned u = s; u < e; u++, checked++) ASSERT_EQ(py_line_at(table, first, u), l) << "unit " << u;
      }
    }
    EXPECT_GT(checked, 50);
  }
}

// Python groups take the place of the interpreter's C frames; perf-map frames give way.
TEST(PythonWalk, MergeIntoNativeFrames) {
  std::vector<PyFrame> py{{"py::c (f.py:3)", false}, {"py::b (f.py:2)", true}, {"py::a (f.py:1)", true}};
  std::vector<std::string> native{"memcpy",     "_PyEval_EvalFrameDefault",
                                  "0x958cc0",   "_PyFunction_Vectorcall",
                                  "py::b:f.py", "_PyEval_EvalFrameDefault+0x10 (python3.11)",
                                  "main"};
  EXPECT_EQ(py_merge(native, py), (std::vector<std::string>{"memcpy", "py::c (f.py:3)", "py::b (f.py:2)",
                                                            "_PyFunction_Vectorcall", "py::a (f.py:1)", "main"}));
  // A native stack cut short (no frame pointers): the chain goes to the outer end.
  EXPECT_EQ(py_merge({"lib_burn"}, py),
            (std::vector<std::string>{"lib_burn", "py::c (f.py:3)", "py::b (f.py:2)", "py::a (f.py:1)"}));
  // No chain: the native stack as it is, perf-map names and addresses included.
  EXPECT_EQ(py_merge(native, {}), native);
}

// A process that runs no Python, and one whose interpreter layout is unknown, get no walk.
TEST(PythonWalk, NoInterpreterNoWalk) {
  Process p({"sleep", "30"});
  std::string why;
  EXPECT_FALSE(find_python(p.pid(), &why));
  EXPECT_FALSE(why.empty());
  PyTarget old{3, 10, -1, 0x1000, "/usr/bin/python3.10"};
  EXPECT_FALSE(py_offsets(p.pid(), old));
  p.signal(SIGKILL);
  p.wait();
}

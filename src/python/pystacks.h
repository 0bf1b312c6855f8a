#pragma once
// The userspace half of the CPython frame walk (pyframes.bpf.h), written once for every
// capability that records user stacks: finds a process's interpreter and its version, gives
// the BPF walk that version's offsets (_Py_DebugOffsets from 3.13, a table for 3.11 and 3.12),
// names the code objects of recorded chains through /proc/PID/mem (cached per code object's
// life), and merges the Python frames into a symbolized native stack.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/bpf.h"
#include "python/pyframes.h"

namespace gpuscope {

// A process's interpreter, as found in its mappings.
struct PyTarget {
  int major = 0, minor = 0, micro = -1;  // micro -1: not known (no Py_Version before 3.11)
  uint64_t runtime_addr = 0;             // _PyRuntime
  std::string path;                      // the file holding it (python3.X or libpython3.X.so)
  std::string version() const;
};

// The interpreter of pid (through /proc/PID/root, so a container's files are read); nullopt
// when it runs none. `why` says what was missing.
std::optional<PyTarget> find_python(pid_t pid, std::string* why = nullptr);

// The walk's offsets for t's version: from the running interpreter's _Py_DebugOffsets (3.13),
// or the table (3.11, 3.12). nullopt: a version gpuscope has no layout for.
std::optional<gs_py_proc> py_offsets(pid_t pid, const PyTarget& t);

// What a frame needs to be named, read from one code object.
struct PyCode {
  std::string qualname, filename;
  int firstlineno = 0;
  std::string linetable;  // co_linetable (3.11+ location table)
};

// The code object at addr in pid, read through mem_fd (/proc/PID/mem); nullopt when unreadable,
// or when its co_qualname's address does not give `tag` (the object was freed and reused).
std::optional<PyCode> py_read_code(int mem_fd, const PyTarget& t, const gs_py_proc& off, uint64_t addr, uint32_t tag);

// The walk of pyframes.bpf.h done through /proc/PID/mem, for the thread whose id in the
// process's pid namespace is ns_tid: (code address, tag, lasti) innermost first. For tests
// and for checking a layout against a running interpreter.
std::vector<gs_py_frame> py_walk_user(pid_t pid, const gs_py_proc& off, uint32_t ns_tid);

// Line of code unit `lasti` from a 3.11+ location table; firstlineno when it has none.
int py_line_at(const std::string& linetable, int firstlineno, uint32_t lasti);

// One Python frame, named: "py::qualname (file:line)".
struct PyFrame {
  std::string name;
  bool entry = false;  // began a C-level call of the interpreter loop
};

// Native frames (innermost first, as the symbolizer names them) with the Python chain put where
// the interpreter's evaluation frames stand, a group of Python frames (up to an entry frame) for
// each; groups left over go to the outer end (a native stack cut short without frame pointers).
// Perf-map frames ("py::" from -X perf) give way to the walk's, and bare addresses (no mapping
// holds them: a frame-pointer walk gone astray in code without frame pointers) are left out.
std::vector<std::string> py_merge(const std::vector<std::string>& native, const std::vector<PyFrame>& py);

class PyStacks {
 public:
  struct Maps {
    int procs = -1, tstates = -1, stacks = -1, counters = -1, events = -1;
  };
  struct Counters {
    uint64_t walks = 0, truncated = 0, no_tstate = 0, read_errors = 0, stacks_full = 0, events_lost = 0;
  };
  // note: where "said once" lines go (the command prints them).
  PyStacks(Maps maps, std::function<void(const std::string&)> note);
  ~PyStacks();
  // Switches the walk on for pid when it runs a supported CPython. A pid found without one is
  // looked at again only once its executable changed (an exec). Returns whether the walk is on.
  bool track(pid_t pid);
  bool tracking(pid_t pid) const { return procs_.count(pid) > 0; }
  // The process exited or exec'd: its entry, chains, thread states and names go.
  void forget(pid_t pid);
  // Names new chains' code objects now, while their process lives.
  int poll();
  RingBuffer& events() { return *rb_; }
  // The chain `hash` of pid, named, innermost first; empty when none is kept.
  std::vector<PyFrame> frames(pid_t pid, uint64_t hash, bool* truncated = nullptr);
  Counters counters() const;
  // ", N Python chains cut at 64 frames, ..." for a drops line; "" when all are zero.
  std::string drops_text() const;

 private:
  struct Proc {
    PyTarget target;
    gs_py_proc offsets{};
  };
  using CodeKey = std::tuple<pid_t, uint64_t, uint32_t>;  // pid, code address, tag (its life)
  const PyCode* code(pid_t pid, uint64_t addr, uint32_t tag, int mem_fd);
  void on_new(const gs_py_new_stack& n);

  Maps maps_;
  std::function<void(const std::string&)> note_;
  std::unique_ptr<RingBuffer> rb_;
  std::map<pid_t, Proc> procs_;
  std::map<pid_t, std::string> not_python_;  // pid -> its /proc/PID/exe then
  std::set<std::string> said_;
  std::map<CodeKey, std::optional<PyCode>> codes_;
};

}  // namespace gpuscope

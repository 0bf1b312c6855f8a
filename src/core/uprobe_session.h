#pragma once
// The uprobe session: every CUDA object within the scope is found (--lib, the dynamic
// linker's cache, running processes, and each process again at its exec or dlopen), and each
// client's programs are attached at the rows of the site table (common/cuda_api.h) it selects,
// with the row as the cookie. A capability brings its programs and rows; discovery, attach,
// rescans, -p/-c and target liveness live here once.
#include <sys/types.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/cuda_api.h"
#include "core/discovery.h"
#include "core/event_loop.h"
#include "core/scope.h"
#include "core/system.h"

struct session_bpf;

namespace gpuscope {

// One program at the selected rows: entry, return, or both as a uprobe session (the session
// kind needs the collector loaded with open_and_load_session).
struct SiteProbe {
  bpf_program* prog;
  bool retprobe;
  std::vector<bool> rows;  // GS_API_COUNT entries
  bool session = false;
};

// Rows of the site table whose description satisfies pred.
std::vector<bool> rows_where(const std::function<bool(const gs_api_desc&)>& pred);

// A library of gpuscope's own (libgpuscope-cupti.so) rather than CUDA's: found by a part of its
// path in the maps of the processes in scope (-c included) at the scans and notices that find
// CUDA objects, attached once per file at named symbols, each process mapping a copy handed to
// `mapped` (at every scan that finds it: the client keeps what it has done).
struct LibrarySite {
  bpf_program* prog;
  std::string symbol;
  bool retprobe = false;
  uint64_t cookie = 0;
  bool optional = false;  // a file without it is still the library
};
// A process's copy: where its mapping of file offset 0 starts, and the file's symbols (the sites'
// and the data symbols the client asked for).
struct LibraryMapping {
  pid_t pid;
  uint64_t start;
  const ElfSymbols& symbols;
};
struct LibraryClient {
  std::string name;  // a part of the mapped path
  std::vector<LibrarySite> sites;
  ElfSymbols::Filter objects;
  std::function<void(const LibraryMapping&)> mapped;
  // The sites' programs were loaded as uprobe_multi: a file's sites of one program are one link,
  // whose detach waits for one grace period rather than one a site.
  bool multi = false;
};

struct SessionStats {
  size_t objects = 0;           // CUDA objects attached
  size_t probes = 0;            // probe sites attached, all clients
  size_t attach_failures = 0;   // probe sites that could not be
  size_t attach_retries = 0;    // objects whose attach was retried through another process
  size_t objects_given_up = 0;  // objects that could not be attached through any process
  size_t loader_hooks = 0;      // dynamic linkers watched for dlopen
  bool exec_hook = false;
  uint64_t notices_lost = 0;  // exec/dlopen notices the BPF side could not deliver
};

class UprobeSession {
 public:
  UprobeSession(Scope scope, bool verbose);
  ~UprobeSession();
  UprobeSession(const UprobeSession&) = delete;
  UprobeSession& operator=(const UprobeSession&) = delete;

  // A collector's programs; `multi` when they were loaded as uprobe_multi
  // (open_and_load_uprobes). `on_attached` runs after each object is attached.
  void add(std::vector<SiteProbe> probes, bool multi, std::function<void(const CudaObject&)> on_attached = {});
  // A library client; the handle names it below. It is scanned for until remove_library.
  size_t add_library(LibraryClient c);
  // Attaches a copy of the library outside any process (beside gpuscope, a flag's path); false,
  // with why in *err, when the file is not the library or cannot be attached.
  bool attach_library(size_t lib, const std::string& path, std::string* err);
  // Copies of the library attached.
  size_t library_files(size_t lib) const;
  // Detaches the library's probes and stops looking for it. It touches nothing else of the
  // session: detach() may run meanwhile in another thread.
  void remove_library(size_t lib);
  // fn(pid) for each process in scope whose mappings may have changed (exec, dlopen), before
  // it is rescanned.
  void on_maps_changed(std::function<void(pid_t)> fn) { maps_changed_.push_back(std::move(fn)); }
  // Reads the --lib files; throws UsageError for one that is not a CUDA object. start() does
  // it if it was not done: done first, a bad --lib is refused before anything is loaded.
  void open_libs();
  // Attaches everything reachable now and starts watching exec and dlopen. Throws UsageError
  // when nothing of a --lib file can be attached.
  void start();
  // Rescans on exec/dlopen notices as they arrive, all processes every few seconds, and stops
  // the loop once every -p pid has gone (unless !stop_when_gone: the agent keeps serving).
  void watch(EventLoop& loop, bool stop_when_gone = true);
  // With exec and dlopen hooks, how often every process is rescanned anyway (default 5 s): an
  // always-on process may rescan less often.
  void set_full_rescan_period(std::chrono::milliseconds p) { full_period_ = p; }
  // Takes the notices and rescans now (watch() does this on every wake-up).
  void refresh();
  // Deferred, the processes noticed at exec or dlopen are rescanned only by rescan_noticed()
  // (or once kMaxDeferredNotices are waiting): the agent's governor batches them into its refresh.
  void defer_rescans(bool d) { defer_ = d; }
  // Each process is named (its container) as it is found, at start, exec and rescans, so that
  // lines shown after it has gone keep its names. The agent turns it off: it names a process
  // when its first series is made.
  void name_processes_early(bool on) { name_early_ = on; }
  void rescan_noticed();
  static constexpr size_t kMaxDeferredNotices = 4096;
  bool targets_alive() const;
  // Processes in which objects were found by start().
  const std::vector<pid_t>& initial_pids() const { return initial_pids_; }
  const Scope& scope() const { return scope_; }
  SessionStats stats() const;
  // The "library discovery: ..." line of -v.
  std::string discovery_mode() const;
  // Detaches every probe but the libraries' (remove_library), in parallel: each detach waits
  // for an RCU grace period.
  void detach();

 private:
  struct Client {
    std::vector<SiteProbe> probes;
    bool multi;
    std::function<void(const CudaObject&)> on_attached;
  };
  // One program's sites in one file.
  struct Placement {
    bpf_program* prog;
    bool multi;
    UprobeMultiTarget sites;
  };
  struct Library {
    LibraryClient client;
    std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const ElfSymbols>> files;  // attached; null: not the library
    std::vector<Link> links;
    bool removed = false;
  };
  bool attach(const CudaObject& obj, bool from_lib);
  size_t attach_through(const CudaObject& obj, const std::string& path, std::string* err);
  size_t attach_placements(std::vector<Placement>& ps, const std::string& path, std::vector<Link>& links,
                           size_t& failures, std::string* err);
  const ElfSymbols* attach_library_file(Library& lib, const std::string& path, dev_t dev, ino_t ino, std::string* err);
  void scan_libraries(const std::vector<pid_t>* only);
  void name_processes();
  void rescan(const std::vector<pid_t>* only);
  bool wanted(std::string_view sym) const;

  Scope scope_;
  bool verbose_;
  std::vector<Client> clients_;
  std::vector<std::unique_ptr<Library>> libraries_;
  std::unique_ptr<Discovery> disc_;
  std::vector<CudaObject> libs_;
  std::unique_ptr<session_bpf, void (*)(session_bpf*)> skel_;
  std::unique_ptr<RingBuffer> notices_;
  std::vector<pid_t> noticed_;
  bool defer_ = false;
  bool name_early_ = true;
  std::vector<std::function<void(pid_t)>> maps_changed_;
  std::vector<Link> links_;
  std::vector<pid_t> initial_pids_;
  SessionStats stats_;
  bool event_driven_ = false;
  EventLoop::Clock::time_point next_full_{};
  std::chrono::milliseconds full_period_{5000};
};

// Opens and loads a skeleton (open, load: its generated functions) with its uprobe programs as
// uprobe_multi where the kernel has that (6.6+), else as one perf-event uprobe per site.
// `configure(skel)` sets what has to be set before load and returns the uprobe programs.
// Returns whether they are uprobe_multi; throws UsageError when neither way loads.
template <class Skel, class Ptr, class Configure>
bool open_and_load_uprobes(Ptr& skel, Skel* (*open)(), int (*load)(Skel*), Configure configure) {
  for (bool multi : {true, false}) {
    skel.reset(open());
    if (!skel) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
    std::vector<bpf_program*> progs = configure(skel.get());
    if (multi)
      for (bpf_program* p : progs) prepare_uprobe_multi(p);
    int err = load(skel.get());
    if (err == 0) return multi;
    if (!multi)
      throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) +
                       " (is the kernel built with BTF and uprobes? try 'gpuscope doctor')");
  }
  return false;
}

// The uprobe programs of a skeleton that has a session program: `legacy`, the entry and return
// programs the session program replaces; `shared`, those loaded either way.
// `sessions`: further session programs, loaded only where sessions load.
struct SessionPrograms {
  std::vector<bpf_program*> legacy, shared, sessions;
};
struct SessionLoad {
  bool session = false;  // the session program loaded
  bool multi = false;    // programs are uprobe_multi (always, with a session)
};
// Whether uprobe sessions may be tried (GPUSCOPE_UPROBE_SESSION=0: never).
bool uprobe_sessions_allowed();
// As open_and_load_uprobes, but first loads session_prog(skel) as a uprobe session (kernel 6.12+:
// one program at entry and return, whose entry decides whether the return probe runs) in place
// of the legacy programs that configure() returns, the shared ones as uprobe_multi; where that
// does not load, the legacy and shared programs as open_and_load_uprobes loads them, without
// the session program.
template <class Skel, class Ptr, class Configure, class Pick>
SessionLoad open_and_load_with_session(Ptr& skel, Skel* (*open)(), int (*load)(Skel*), Configure configure,
                                       Pick session_prog) {
  if (uprobe_sessions_allowed()) {
    skel.reset(open());
    if (!skel) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
    SessionPrograms progs = configure(skel.get());
    for (bpf_program* p : progs.legacy) bpf_program__set_autoload(p, false);
    for (bpf_program* p : progs.shared) prepare_uprobe_multi(p);
    for (bpf_program* p : progs.sessions) prepare_uprobe_session(p);
    prepare_uprobe_session(session_prog(skel.get()));
    if (load(skel.get()) == 0) return {true, true};
  }
  SessionLoad r;
  r.multi = open_and_load_uprobes(skel, open, load, [&](Skel* s) {
    bpf_program__set_autoload(session_prog(s), false);
    SessionPrograms progs = configure(s);
    for (bpf_program* p : progs.sessions) bpf_program__set_autoload(p, false);
    progs.legacy.insert(progs.legacy.end(), progs.shared.begin(), progs.shared.end());
    return progs.legacy;
  });
  return r;
}

}  // namespace gpuscope

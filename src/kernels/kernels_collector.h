#pragma once
// The kernels collector: launches counted in BPF per (process, layer, handle), each row named
// here (driver names, __cudaGetKernel, nvcc handle variables, symbols) while its process
// lives. kernels.h holds the layouts shared with kernels.bpf.c; this header is userspace only.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/event_loop.h"
#include "core/launch_timing.h"
#include "core/proc_maps.h"
#include "core/symbolizer.h"
#include "core/uprobe_session.h"
#include "python/pystacks.h"

struct kernels_bpf;
struct gs_k_event;
struct gs_k_sample_key;

namespace gpuscope {

// One counted row: the launches of one handle in one process.
struct KernelRow {
  uint32_t pid = 0;
  std::string comm;
  uint32_t layer = 0;      // enum gs_k_layer (kernels.h): GS_K_RUNTIME, GS_K_DRIVER, GS_K_GRAPH
  uint64_t handle = 0;     // what was launched: function, kernel or graph exec handle
  std::string kernel;      // demangled kernel name, "[graph 0x…]", or "[unknown MODULE]"
  std::string module;      // file name of the module the kernel is in (or the launch came from)
  uint64_t launches = 0;   // cumulative since the row appeared
  uint64_t cgroup_id = 0;  // the process's cgroup v2 id at its first launch (0: none)
  bool graph() const;
};

// A kernel a process launched lately (KernelsCollector::launched_since).
struct LaunchedKernel {
  std::string kernel, module;   // as KernelRow names them
  uint32_t layer = 0;           // enum gs_k_layer
  uint64_t launches = 0;        // cumulative, since the row appeared
  uint64_t last_launch_ns = 0;  // CLOCK_MONOTONIC of its latest launch
  // With Config::stacks: the stack most of its sampled launches came from (0 samples: none taken).
  std::string site;
  std::vector<std::string> stack;
  uint64_t site_samples = 0, samples = 0;  // the launches sampled from that stack, and from all
};

// A launch site (--stacks): the launches of one kernel in one process from one user stack.
struct LaunchSite {
  uint32_t pid = 0;
  std::string comm;
  uint64_t cgroup_id = 0;
  std::string kernel, module;      // as KernelRow names them
  std::vector<std::string> stack;  // innermost first: native frames, the CPython frames merged in
  std::string site;                // the innermost frame in user code; "[no user frame]" when none is
  uint64_t launches = 0;           // the kernel's counted launches split in its sampled stacks' proportions
  uint64_t samples = 0;            // sampled launches from this stack
  bool estimated = false;          // some launch of the kernel was not sampled: launches is a split, not a count
  // The native walk ended before the thread's start (outside the C library or the loader): code
  // without frame pointers, or deeper than GS_K_STACK_DEPTH. Its outer native frames are missing.
  bool cut_short = false;
};

// The frames a launch site skips unless --site-skip replaces the rule: matched against a Python
// frame's file and a native frame's file name.
extern const char* const kDefaultSiteSkip;

// Where launches are counted. Every launch that runs reaches the driver's exported entry
// points, so with a driver loaded one probe per launch at that layer counts them all; without
// one (no GPU), runtime launches fail before reaching it and are counted where they are made.
enum class CountLayer { Auto, Driver, Both };

class KernelsCollector {
 public:
  struct Config {
    Scope scope;
    CountLayer layer = CountLayer::Auto;
    // Only the naming calls are probed (trace names its launches): nothing is counted.
    bool naming_only = false;
    uint32_t max_rows = 0;  // (pid, kernel) counters; 0: GS_K_MAX_ROWS
    // The driver's launch programs load as uprobe sessions that can also time launches for a
    // latency collector (launch_timing_host), so that one program per launch serves both.
    bool offer_launch_timing = false;
    // Each row keeps the time of its latest launch, for launched_since (errors); off, launches
    // cost nothing more.
    bool track_last_launch = false;
    // Launch sites: every stack_every-th launch of a process, and the first of each row, takes
    // its user stack (and CPython frames with py_frames). Off, launches cost nothing more.
    bool stacks = false;
    uint32_t stack_every = 64;
    bool py_frames = true;
    std::string site_skip;  // a launch site skips frames that this matches; empty: kDefaultSiteSkip
  };
  struct Stats {
    uint64_t rows_full = 0;      // launches not counted: row map full
    uint64_t captured = 0;       // launches recorded in stream capture (counted when the graph runs)
    uint64_t lost = 0;           // naming and exit events lost (ring buffer full or no per-thread state)
    uint64_t naming_events = 0;  // naming calls read (a repeat with the same result is not sent)
    uint64_t stacks_lost = 0;    // sampled launches whose user stack was not kept (stack map full)
    uint64_t samples_full = 0;   // sampled launches not kept (sample map full)
    PyStacks::Counters py;       // the CPython walk's
  };
  // A process has exited: its final rows (possibly none). Its state is deleted after.
  using ExitSink = std::function<void(uint32_t pid, const std::vector<KernelRow>& rows)>;

  // Loads the programs, hands them to the session and attaches the exit hook.
  KernelsCollector(UprobeSession& session, Config cfg);
  ~KernelsCollector();
  // Whether exits are seen; when not, why (exited processes keep their rows).
  bool exits_hooked() const { return hooks_.exits(); }
  const std::string& exit_hook_error() const { return hooks_.exit_error(); }
  void on_exit(ExitSink sink) { exit_sink_ = std::move(sink); }
  // With Config::stacks: an exited process's launch sites go to `sink` (after its rows went to
  // on_exit's) instead of being kept for sites(), which then returns the running ones only.
  using ExitSitesSink = std::function<void(uint32_t pid, std::vector<LaunchSite> sites)>;
  void on_exit_sites(ExitSitesSink sink) { exit_sites_sink_ = std::move(sink); }
  // After session.start(): reads the handle variables of the processes already running.
  void start(UprobeSession& session);
  // The naming and exit events.
  void watch(EventLoop& loop);
  // Names rows new since, while their process still runs.
  void tick();
  // Exits are handled as their events are read; deferred, only when finish_exits() is called
  // (the agent's governor: at its refresh), all of them together. Their rows stay in the
  // count map until then (bounded by it: a full map counts rows_full).
  void defer_exits(bool d) { defer_exits_ = d; }
  void finish_exits();
  void drain();
  // Detaches the exit hook (a trampoline: its grace period is long, so callers overlap it with
  // the session's detach).
  void detach() { hooks_.detach(); }
  // Every current row, named (unknown rows are tried again), in (pid, layer, handle) order.
  std::vector<KernelRow> snapshot();
  Stats stats() const;
  bool driver_only() const { return driver_only_; }
  // Naming calls as one uprobe session program: one announced already takes no return probe.
  bool name_session() const { return name_session_; }
  // The launch programs as a latency collector's host: set where offer_launch_timing was and
  // sessions loaded.
  std::optional<LaunchTimingHost> launch_timing_host();
  // The kernel a launch's handle names (or the host function), from the same names the
  // counted rows get; empty while unknown (asked again after a second).
  std::string name_of(uint32_t pid, uint64_t handle, bool host_function);
  // The kernels `pid` launched after `since_ns` (CLOCK_MONOTONIC; 0: all), latest first, at most
  // `max`, named as snapshot() names rows; launches are the row's cumulative count. Needs
  // Config::track_last_launch (else empty), and the process's rows: call it before its exit is
  // finished (defer_exits).
  std::vector<LaunchedKernel> launched_since(uint32_t pid, uint64_t since_ns, size_t max);
  // With Config::stacks: the launch sites of every process seen, exited ones included, each
  // kernel's counted launches split across its sampled stacks.
  std::vector<LaunchSite> sites();
  // Why launches are counted where they are: the first line of -v.
  const std::string& layer_reason() const { return layer_reason_; }
  // What -v says once about naming (learned or failed driver layouts); emptied by the call.
  std::vector<std::string> take_notes() { return std::exchange(notes_, {}); }

 private:
  // The nvcc handle variables of one file (static `…__device_stub__…E8__handle` in .symtab),
  // 16 bytes each by address: libtorch_cuda has tens of thousands, and their names (13 MB as
  // strings beside PyTorch) stay in the file until a variable is found holding a handle.
  struct HandleVars {
    struct Var {
      uint64_t vaddr;
      uint32_t section, name;  // the symbol section and the name's offset in its string table
    };
    std::vector<Var> vars;  // by vaddr
    std::unique_ptr<ElfFile> file;
    uint64_t first_load_vaddr = 0;
    bool is_exec = false;
    std::set<pid_t> users;  // processes that map the file: an entry with variables goes with the last
    std::string symbol(const Var& v) const;
  };
  struct Name {
    std::string kernel, module;
    bool from_driver_object = false;  // read through the learned driver layout
    std::string mangled;              // exactly as the driver names it; empty when not known exactly
  };
  // Where the driver's function objects keep a pointer to the kernel's mangled name: the
  // driver's private layout, learned from handles named by their naming calls, per file.
  struct DriverLayout {
    std::string lib;
    int offset = -1;  // learned offset; -1 while unknown
    bool failed = false;
    bool said_waiting = false;
  };
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;  // (pid, layer, handle)
  using PH = std::pair<uint32_t, uint64_t>;              // (pid, handle)

  void choose_layer();
  std::vector<SiteProbe> site_probes() const;
  void on_event(const gs_k_event& e);
  const HandleVars& handle_vars(pid_t pid, const MapEntry& m);
  std::string module_of(pid_t pid, uint64_t addr) { return syms_.module_of(pid, addr); }
  std::optional<Name> symbolize(pid_t pid, uint64_t addr, bool exact);
  std::optional<Name> handle_var_name(pid_t pid, uint64_t addr);
  // f(address in the process, the variable, its file, the file's path) for every handle variable.
  void for_each_handle_var(
      pid_t pid, const std::vector<MapEntry>& maps,
      const std::function<void(uint64_t, const HandleVars::Var&, const HandleVars&, const std::string&)>& f);
  void scan_handle_vars(pid_t pid);
  Name resolve(const Key& k, uint64_t caller, bool may_scan = true);
  void learn_new_keys();
  void learn_keys(const std::map<Key, uint64_t>& counts);
  void name_fresh(const std::vector<Key>& fresh);
  void retry_unknown(const std::set<uint32_t>* only = nullptr);
  std::map<Key, uint64_t> read_counts(const std::set<uint32_t>* only = nullptr);
  std::vector<KernelRow> rows_of(const std::map<Key, uint64_t>& counts);
  void forget_announced(const std::set<uint32_t>& pids);  // at its exit: it calls nothing again
  void forget(const std::set<uint32_t>& pids);            // every name and state of exited processes
  DriverLayout* driver_layout(pid_t pid);
  // Launch sites.
  struct Frames {
    std::vector<std::string> stack;
    std::string site;
    bool cut_short = false;
  };
  void watch_stacks(pid_t pid);  // its maps and interpreter read while it lives
  const Frames& frames_of(const gs_k_sample_key& k);
  std::vector<LaunchSite> sites_of(const std::map<Key, uint64_t>& counts, const std::set<uint32_t>* only);
  void learn_layout(pid_t pid, DriverLayout& l);
  std::optional<Name> driver_object_name(pid_t pid, uint64_t handle, uint64_t caller);
  void check_layout(pid_t pid, uint64_t handle, const std::string& mangled);

  Config cfg_;
  std::unique_ptr<kernels_bpf, void (*)(kernels_bpf*)> skel_;
  OwnHooks hooks_;
  std::unique_ptr<RingBuffer> rb_;
  ExitSink exit_sink_;
  ExitSitesSink exit_sites_sink_;
  std::set<uint32_t> exits_;  // exited, not yet finished
  bool defer_exits_ = false;
  std::map<PH, Name> names_;          // handles named by the driver, __cudaGetKernel or handle variables
  std::map<PH, uint64_t> kernel_of_;  // CUfunction from cuKernelGetFunction -> its CUkernel
  std::map<Key, Name> resolved_;      // rows named for good
  std::map<Key, Name> guessed_;       // rows still unknown: retried each snapshot
  std::map<Key, uint64_t> callers_;
  std::map<uint32_t, std::string> comms_;
  std::map<uint32_t, uint64_t> cgroups_;  // pid -> cgroup v2 id of its first counted launch
  Symbolizer syms_;
  std::map<std::pair<dev_t, ino_t>, HandleVars> handle_vars_;  // by file: containers may share paths
  std::map<pid_t, std::chrono::steady_clock::time_point> var_scans_;
  std::map<pid_t, std::vector<MapEntry>> var_maps_;  // mappings handle_var_name read, per process
  bool driver_only_ = false;
  bool name_session_ = false;    // naming calls as one uprobe session program (kernel 6.12+)
  bool timed_launches_ = false;  // the driver's launch programs are the timing sessions
  std::string layer_reason_;
  std::map<std::pair<dev_t, ino_t>, DriverLayout> layouts_;
  std::map<pid_t, std::pair<dev_t, ino_t>> driver_file_;  // the driver library a process maps
  std::set<PH> object_read_;                              // handles read through the layout once
  std::set<PH> launched_;                                 // handles seen at a launch
  std::vector<std::string> notes_;
  std::unique_ptr<PyStacks> py_;
  std::regex site_skip_;
  std::set<uint32_t> stack_watched_;
  using StackKey = std::tuple<uint32_t, int32_t, uint64_t, uint64_t>;  // pid, stack id, caller, Python chain
  std::map<StackKey, Frames> frames_;
  std::vector<LaunchSite> exited_sites_;
  // name_of's misses: not asked again for a second, unless something was learned since (the
  // first launch trace formats may come before any that teaches the driver's layout).
  struct Miss {
    std::chrono::steady_clock::time_point until;
    uint64_t learned;
  };
  std::map<Key, Miss> unknown_until_;
  uint64_t learned_ = 0;
  uint64_t naming_events_ = 0;  // names, handle links and layouts learned so far
  std::deque<std::pair<uint32_t, std::chrono::steady_clock::time_point>> forget_at_;  // naming only
  std::chrono::steady_clock::time_point next_sweep_{};
  std::set<pid_t> seen_dead_;     // naming only: gone at the last sweep
  std::set<uint32_t> said_gone_;  // naming only: exited, their 'announced' entries not yet deleted
};

}  // namespace gpuscope

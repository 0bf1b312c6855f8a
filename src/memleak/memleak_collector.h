#pragma once
// The memleak collector: live GPU allocations and per-process counters kept in BPF, read back
// as typed summaries and leak rows; processes that exit or exec are reported once with what
// they never freed, then their state is deleted. memleak.h holds the layouts shared with
// memleak.bpf.c; this header is userspace only.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/bpf.h"
#include "core/event_loop.h"
#include "core/symbolizer.h"
#include "core/uprobe_session.h"
#include "memleak/memleak.h"
#include "python/pystacks.h"

struct memleak_bpf;

namespace gpuscope {

// Failed calls of one process by error name (cudaError_t or CUresult), as the error map holds
// them: one entry per (layer, code), so a name may come twice.
using MemleakErrors = std::vector<std::pair<std::string, uint64_t>>;

// Device memory (device, managed, VMM; not pinned host memory) one process holds on one device.
struct MemleakDevice {
  int32_t device = -1;  // CUDA ordinal, -1: not known
  uint64_t outstanding_bytes = 0;
  uint64_t outstanding_allocs = 0;
};

// One process's summary: its counters (gs_ml_proc, updated atomically in BPF) as they are now,
// or as they were when it exited or exec'd.
struct MemleakProcess {
  uint32_t pid = 0;
  std::string comm;
  std::string state;  // "running", "exited", "exec"
  gs_ml_proc counters{};
  MemleakErrors alloc_errors, free_errors;
  std::vector<MemleakDevice> devices;  // by ordinal, summed over its live allocations
};

// A context ended (cuCtxDestroy, a primary context reset or last release, cudaDeviceReset)
// while it still held allocations: they are gone, freed by the driver, and no longer counted.
struct MemleakContextRelease {
  uint32_t pid = 0;
  std::string comm;
  uint64_t ctx = 0;  // the CUcontext; for a primary context GS_ML_PRIMARY_CTX(device)
  bool primary = false;
  int32_t device = -1;  // -1: not known
  unsigned api = 0;     // site table row of the call that ended it
  unsigned layer = 0;
  uint64_t bytes = 0, allocs = 0;                // device memory released
  uint64_t pinned_bytes = 0, pinned_allocs = 0;  // pinned host memory released
};

// One live allocation (a pointer, or a VMM physical handle).
struct MemleakLeak {
  uint32_t pid = 0;
  std::string comm;
  std::string state;        // of the process: "running", "exited", "exec"
  uint64_t addr = 0;        // the pointer; a VMM handle's lowest mapping, or the handle when unmapped
  uint64_t size = 0;        // bytes
  uint64_t age_ns = 0;      // at the snapshot, or at the process's end
  uint64_t ts_boot_ns = 0;  // CLOCK_BOOTTIME when the allocating call returned
  unsigned api = 0;         // site table row of the allocating call
  unsigned layer = 0;       // enum gs_ml_layer
  unsigned category = 0;    // enum gs_ml_category
  int32_t device = -1;      // CUDA ordinal, -1 when not known
  bool vmm_handle = false;  // a VMM physical handle: the three below apply
  uint64_t handle = 0;
  bool released = false;           // cuMemRelease has returned success
  uint32_t mappings = 0;           // live mappings of it
  std::vector<std::string> stack;  // symbolized frames, innermost first (with stacks)
};

// A free that released nothing gpuscope saw.
struct MemleakFreeEvent {
  bool bad = false;  // true: freed before, never allocated, or failed (bad_free); false: untracked_free
  uint32_t pid = 0;
  std::string comm;
  uint64_t addr = 0;    // the pointer or handle freed
  unsigned api = 0;     // site table row
  unsigned layer = 0;   // enum gs_ml_layer: how to name ret
  unsigned reason = 0;  // enum gs_ml_reason
  int32_t ret = 0;      // cudaError_t / CUresult
};

struct MemleakSnapshot {
  std::vector<MemleakProcess> processes;  // running, by pid
  std::vector<MemleakLeak> allocations;   // old enough live allocations of those (when asked)
};

class MemleakCollector {
 public:
  struct Config {
    Scope scope;              // -p: their stacks' mappings are read from the start
    bool stacks = false;      // record and symbolize allocating stacks
    bool py_frames = true;    // with stacks: CPython frames read from the interpreter
    uint32_t max_allocs = 0;  // live allocations tracked, all processes; 0: GS_ML_MAX_ALLOCS
    uint32_t max_procs = 0;   // processes tracked; 0: GS_ML_MAX_PROCS
  };
  struct Stats {
    uint64_t allocs_map_full = 0;   // allocations not recorded: map full
    uint64_t procs_map_full = 0;    // calls of processes not tracked: map full
    uint64_t events_lost = 0;       // ring buffer full
    uint64_t no_thread_state = 0;   // calls without per-thread state
    uint64_t stacks_lost = 0;       // stack map full or stack unreadable
    uint64_t error_codes_lost = 0;  // failures counted without their code: map full
    PyStacks::Counters py;          // the CPython walk's
    uint64_t contexts_lost = 0;     // contexts not recorded (map full): their devices unknown
  };
  using FreeSink = std::function<void(const MemleakFreeEvent&)>;
  using ContextSink = std::function<void(const MemleakContextRelease&)>;
  // A process that ended (exit or exec): its final summary and what it never freed, oldest first.
  using EndSink = std::function<void(const MemleakProcess&, const std::vector<MemleakLeak>&)>;
  // Sees a leak row before its stack is read; rows it returns false for are left out.
  using LeakFilter = std::function<bool(const MemleakLeak&)>;

  // Loads the programs, hands them to the session and attaches the exit and exec hooks.
  MemleakCollector(UprobeSession& session, Config cfg);
  ~MemleakCollector();
  bool exits_hooked() const { return hooks_.exits(); }
  const std::string& exit_hook_error() const { return hooks_.exit_error(); }
  void on_free(FreeSink sink) { free_sink_ = std::move(sink); }
  void on_context_released(ContextSink sink) { ctx_sink_ = std::move(sink); }
  void on_end(EndSink sink) { end_sink_ = std::move(sink); }
  // After session.start(): frees of addresses allocated before now are untracked.
  void start(UprobeSession& session);
  void watch(EventLoop& loop);
  // After each wake-up: reports processes that ended, snapshots stacks of new processes.
  void tick();
  // Reports processes that are gone without an exit record (lost, or no exit hook).
  void sweep();
  // Where the CPython walk says what it cannot do (once per version).
  void on_note(std::function<void(const std::string&)> fn) { note_ = std::move(fn); }
  // Takes the records left and reports the processes that ended.
  void drain();
  // The running processes; with min_age_ns, also their live allocations at least that old.
  MemleakSnapshot snapshot(std::optional<uint64_t> min_age_ns = std::nullopt, const LeakFilter& select = {});
  Stats stats() const;

 private:
  // A process's life: its pid and the gen_ns of its counters.
  struct Life {
    uint32_t pid;
    uint64_t gen_ns;
    bool operator<(const Life& o) const { return std::tie(pid, gen_ns) < std::tie(o.pid, o.gen_ns); }
  };
  struct Ending {
    Life life;
    std::string state;  // "exited", "exec"
    std::string comm;
    uint64_t ts_boot_ns;
    gs_ml_proc counters;
  };
  void on_event(const gs_ml_event& e);
  void finish(const std::vector<Ending>& ends);
  void drop_ended(const std::map<Life, const Ending*>& by_life, const std::set<uint32_t>& pids);
  std::map<Life, MemleakErrors> read_errors(uint8_t op, const std::set<uint32_t>* only);
  MemleakLeak leak_row(const gs_ml_key& k, const gs_ml_alloc& a, uint64_t now, const std::string& comm,
                       const std::string& state, uint64_t mapped_at);
  void read_stack(const gs_ml_key& k, MemleakLeak& row);
  const std::string& comm_of(uint32_t pid);
  void set_watch_point();

  Config cfg_;
  std::unique_ptr<memleak_bpf, void (*)(memleak_bpf*)> skel_;
  OwnHooks hooks_;
  std::unique_ptr<RingBuffer> rb_;
  FreeSink free_sink_;
  std::function<void(const std::string&)> note_;
  ContextSink ctx_sink_;
  EndSink end_sink_;
  Symbolizer stacks_;  // snapshots maps and symbols while a process lives
  std::unique_ptr<PyStacks> py_;
  std::vector<Ending> pending_;
  std::set<pid_t> dying_;
  std::map<uint32_t, std::string> comms_;
  bool exec_hook_ = true, attached_new_ = false;
};

}  // namespace gpuscope

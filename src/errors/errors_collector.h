#pragma once
// The errors collector: GPU errors as typed records, each attributed to its process and container
// where that is known. Sources: the driver's Xid lines in the kernel log (KmsgReader), NVML's Xid
// and other critical events (handed in by the bridge, add_nvml_event), and the first sticky CUDA
// error of each process (errors.bpf.c, at the return of the calls that surface a fault), with the
// kernels it launched since its last successful synchronization (KernelsCollector). A sticky error
// and an Xid of the same process within a window are joined both ways. It never prints.
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/containers.h"
#include "core/event_loop.h"
#include "core/uprobe_session.h"
#include "errors/kmsg_reader.h"
#include "errors/xid_catalog.h"
#include "kernels/kernels_collector.h"

struct errors_bpf;
struct gs_err_event;

namespace gpuscope {

// nvmlEventTypeXidCriticalError, as src/bridge/nvml.h declares the event bits.
inline constexpr uint64_t kNvmlEventXid = 0x8;

// One NVML event as the bridge hands it over (thread-safe: add_nvml_event).
struct NvmlXid {
  uint64_t realtime_ns = 0;                      // when it was received (NVML stamps none)
  int gpu_index = -1;                            // NVML's device index
  std::string uuid;                              // "GPU-…"
  std::string pci_bus_id;                        // any form normalize_pci_bus_id reads
  uint64_t event_type = 0;                       // one nvmlEventType* bit (kNvmlEventXid: an Xid, in data)
  uint64_t data = 0;                             // NVML's eventData: the Xid of an Xid event
  int gpu_instance = -1, compute_instance = -1;  // MIG attribution, -1 without
  std::string event_name;                        // the bridge's name of a non-Xid event ("ecc_double_bit", …)
};

// A GPU as NVML names it: the bridge's list lets kernel-log Xids (PCI bus id only) carry the
// index and UUID, and NVML's (index) the PCI bus id.
struct GpuDevice {
  int index = -1;
  std::string uuid, pci_bus_id;
};

enum class ErrorKind { kXid, kSticky, kNvmlEvent };
const char* error_kind_name(ErrorKind k);  // "xid", "cuda_error", "nvml_event"

struct GpuError {
  uint64_t id = 0;  // 1, 2, … in the order they were taken
  ErrorKind kind = ErrorKind::kXid;
  uint64_t realtime_ns = 0;
  GpuDevice device;  // what is known (the PCI bus id as the kernel log writes it: 0000:3b:00.0)
  // The process, where known (a kernel-log Xid names it; NVML's never do).
  std::optional<uint32_t> pid;
  uint32_t tid = 0;  // sticky: the thread whose call returned it
  std::string comm;
  uint64_t cgroup_id = 0;
  ContainerInfo container;  // resolved when taken (unresolved: container "")

  // Xid and NVML events.
  int xid = 0;
  XidInfo info;                               // meaning, class, action (xid_catalog)
  bool from_kmsg = false, from_nvml = false;  // an Xid both report is one record
  bool injected = false;                      // written into /dev/kmsg by a process, not the kernel
  uint64_t kmsg_seq = 0;
  uint64_t kmsg_ts_us = 0;  // the log's own time of the line (0: none)
  std::string message;      // the driver's text after the Xid
  uint64_t nvml_event_type = 0;
  std::string nvml_event;  // its name, for kNvmlEvent
  int gpu_instance = -1, compute_instance = -1;

  // Sticky CUDA errors.
  unsigned api = 0;      // site-table row of the call
  std::string api_name;  // "cudaDeviceSynchronize"
  std::string layer;     // "runtime", "driver"
  int32_t code = 0;
  std::string code_name;                      // "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS"
  uint64_t last_ok_sync_ns = 0;               // realtime of the process's last successful sync; 0: none seen
  std::vector<LaunchedKernel> kernels_since;  // latest first, at most Config::max_kernels
  bool kernels_truncated = false;

  std::optional<uint64_t> joined;  // the other record's id: a sticky error and an Xid of its process
};

// Counts for the agent: cumulative since start.
struct XidCount {
  GpuDevice device;
  int xid = 0;
  XidClass cls = XidClass::kOther;
  std::optional<uint32_t> pid;
  std::string comm;
  ContainerInfo container;
  uint64_t count = 0;
};
struct StickyCount {
  uint32_t pid = 0;
  std::string comm;
  ContainerInfo container;
  unsigned api = 0;
  int32_t code = 0;
  std::string first_kernel;  // the latest kernel launched before the first one ("" unknown)
  uint64_t count = 0;        // the first and every later one of this (pid, api, code)
};

struct ErrorsStats {
  KmsgStats kmsg;          // records, lost, overruns of the kernel log
  bool kmsg_open = false;  // the kernel log is read
  uint64_t nvml_events = 0;
  uint64_t sticky_events = 0;    // first sticky errors received
  uint64_t bpf_lost_events = 0;  // first sticky errors the ring buffer had no room for
  uint64_t bpf_procs_full = 0;   // syncs or errors not recorded: per-process map full
  uint64_t bpf_counts_full = 0;  // later sticky errors not counted: count map full
  uint64_t records_dropped = 0;  // oldest records let go past Config::max_records
  uint64_t counts_dropped = 0;   // counter rows not kept past kMaxCounts
};

class ErrorsCollector {
 public:
  struct Config {
    Scope scope;
    // The kernel log: /dev/kmsg, or a saved log to replay (read to its end, then what is
    // appended); "" reads none.
    std::string kmsg_path = "/dev/kmsg";
    std::string kmsg_state;   // KmsgOptions::state_path
    bool from_start = false;  // KmsgOptions::from_start
    bool sticky = true;       // probe for sticky CUDA errors
    double window_s = 5;      // a sticky error and an Xid of its process this close are joined
    size_t max_records = 4096;
    size_t max_kernels = 16;  // kernels_since kept per record
    // The launch sites of its own kernels collector (KernelsCollector::Config's): each kernel of a
    // record then names the stack most of its sampled launches came from.
    bool stacks = false;
    uint32_t stack_every = 64;
    std::string site_skip;
  };
  static constexpr size_t kMaxCounts = 8192;

  // Loads and hands the probes to the session (with Config::sticky), opens the kernel log. The
  // kernels launched since a sync are named by `kernels` where given (made with
  // track_last_launch and naming_only false, and outliving this), else by a collector of its own.
  ErrorsCollector(UprobeSession& session, Config cfg, KernelsCollector* kernels = nullptr);
  ~ErrorsCollector();
  ErrorsCollector(const ErrorsCollector&) = delete;
  ErrorsCollector& operator=(const ErrorsCollector&) = delete;

  // Why the kernel log is not read ("cannot read /dev/kmsg: Permission denied"), "" when it is:
  // said once by the caller; the rest keeps working.
  const std::string& kmsg_error() const { return kmsg_error_; }
  // Whether sticky errors are probed (Config::sticky; where the programs cannot load the
  // constructor throws UsageError).
  bool sticky_probed() const { return skel_ != nullptr; }
  // After session.start() (starts its own kernels collector).
  void start(UprobeSession& session);
  // The ring buffers, and poll() after each wake-up and every 0.2 s (the kernel log is read then).
  void watch(EventLoop& loop);
  // Reads what waits: sticky events, the kernel log, the later sticky counts. Then, with its own
  // kernels collector, finishes that collector's exits (after the sticky events named them).
  void poll();
  // A shared kernels collector must not finish a process's exit before poll() has read the
  // sticky events: the owner calls poll() first, then its finish_exits().

  // NVML's events, from the bridge's thread.
  void add_nvml_event(const NvmlXid& e);
  // The GPUs as NVML lists them (from any thread): fills the device fields of later records.
  void set_devices(std::vector<GpuDevice> devices);

  // Records not yet handed out that are ready: joined, past the window, or never joinable (no
  // process). `all`: every waiting record (at exit). In the order they were taken.
  std::vector<GpuError> take_ready(bool all = false);
  // Every record kept (at most max_records, the newest), joins filled in both ways.
  std::vector<GpuError> records() const;
  std::vector<XidCount> xid_counts() const;
  std::vector<StickyCount> sticky_counts() const;
  ErrorsStats stats() const;
  // Detaches the exit hook (the session detaches the probes).
  void detach();

 private:
  void on_sticky(const gs_err_event& e);
  void take_kmsg();
  void read_counts();
  // Adds a record (mu_ held): merges an Xid both sources report, joins, counts.
  void add(GpuError r);
  void fill_device(GpuDevice& d) const;
  ContainerInfo container_of(uint32_t pid, uint64_t cgroup_id);
  uint64_t mono_to_realtime(uint64_t mono_ns) const;

  Config cfg_;
  std::unique_ptr<errors_bpf, void (*)(errors_bpf*)> skel_;
  OwnHooks hooks_;
  std::unique_ptr<RingBuffer> rb_;
  std::unique_ptr<KernelsCollector> own_kernels_;
  KernelsCollector* kernels_ = nullptr;
  std::unique_ptr<KmsgReader> kmsg_;
  std::string kmsg_error_;
  bool kmsg_file_ = false;  // a replayed file: its times are of another boot
  int64_t real_minus_mono_ns_ = 0;

  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  std::deque<GpuError> records_;
  std::deque<uint64_t> waiting_;  // ids not yet handed out by take_ready
  std::vector<GpuDevice> devices_;
  using XidKey =
      std::tuple<int, std::string, std::string, int, uint32_t, std::string>;  // index, uuid, pci, xid, pid+1, comm
  std::map<XidKey, XidCount> xid_counts_;
  using StickyKey = std::tuple<uint32_t, unsigned, int32_t>;  // pid, api, code
  std::map<StickyKey, StickyCount> sticky_counts_;
  std::map<StickyKey, uint64_t> bpf_later_;  // later ones counted in BPF, per key
  ErrorsStats stats_;
};

}  // namespace gpuscope

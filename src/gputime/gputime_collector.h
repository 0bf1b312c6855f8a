#pragma once
// The GPU-time collector: has the uprobe session find and probe libgpuscope-cupti.so's hand-off
// functions (beside gpuscope, --cupti-lib, and in every process in scope), tells each process's
// copy that a gpuscope is attached, and decodes the records into per-kernel GPU time, per-device
// busy time and, for the timeline, the records themselves. It never prints.
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/event_loop.h"
#include "core/uprobe_session.h"
#include "gputime/gputime.h"

struct gputime_bpf;

namespace gpuscope {

// The library's file name, and where gpuscope looks for it first: beside its own binary.
inline constexpr const char* kCuptiLibName = "libgpuscope-cupti.so";
std::string cupti_lib_beside_self();

class GpuTimeCollector;
// The GPU-time collector of a subcommand that works the same without it (kernels, copies): its
// records drained as they come through a 1 MiB ring. Null when it cannot load (said with
// `verbose`); a named --cupti-lib that cannot be probed is a UsageError.
std::unique_ptr<GpuTimeCollector> optional_gpu_time(UprobeSession& session, const std::vector<std::string>& libs,
                                                    bool verbose);

// GPU time of one kernel name in one process. le_log2_us[k] counts durations in
// (2^(k-1), 2^k] microseconds (k = 0: up to 1 µs; the last also takes longer ones): upper
// bounds inclusive, as a Prometheus histogram's `le`, so an agent exports it as it is.
struct KernelGpuTime {
  static constexpr size_t kBuckets = 32;
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t max_ns = 0;
  std::array<uint64_t, kBuckets> le_log2_us{};
  void add(uint64_t duration_ns);
  KernelGpuTime& operator+=(const KernelGpuTime& o);
};

// One process's GPU time, for a view that outlives processes (the agent).
struct GpuTimeProcess {
  uint32_t pid = 0;
  std::string comm;  // read when its first record came ("" if it had gone by then)
  bool exited = false;
  std::map<std::string, KernelGpuTime> kernels;  // by kernel name
  std::map<uint32_t, uint64_t> busy_ns;          // by device: ns in which at least one of its kernels ran
};

// One record as delivered: times already on CLOCK_BOOTTIME.
struct GpuRecord {
  uint32_t pid = 0;
  gs_gt_record r{};
};

class GpuTimeCollector {
 public:
  static constexpr size_t kMaxKernelRows = 65536;  // (pid, kernel) rows of GPU time kept, by default
  // -p and -c are the session's scope.
  struct Config {
    std::vector<std::string> libs;  // also these copies of the library
    bool keep_records = false;      // the timeline wants every record
    size_t max_records = 2u << 20;  // bound of what is kept (88 bytes each); past it counted as lost
    size_t max_kernel_rows = kMaxKernelRows;
    uint32_t ring_bytes = 0;      // the ring buffer's size (a power of 2 of pages); 0: the BPF object's 8 MiB
    bool release_exited = false;  // snapshot() forgets an ended process after the one holding its final values
    // What the libraries record for this client (gs_gt_mode): kernels exact, with launch calls
    // (the timeline), or in windows of duty_on_ms every duty_period_ms (the agent).
    uint32_t mode = GS_GT_MODE_KERNELS;
    uint32_t duty_on_ms = 0, duty_period_ms = 0;
  };
  struct Stats {
    uint64_t records = 0, names = 0;
    uint64_t lost_ringbuf = 0, lost_read = 0, lost_too_many = 0, lost_names = 0;
    uint64_t lost_kept = 0;      // past max_records
    uint64_t rows_full = 0;      // kernel records of a (pid, kernel) row past kMaxKernelRows
    uint64_t cupti_dropped = 0;  // reported by the libraries (CUPTI had no buffer), summed over processes
    uint64_t lib_dropped = 0;
    size_t files = 0;      // copies of the library probed
    size_t processes = 0;  // processes told that gpuscope is attached
    uint64_t no_slot = 0;  // times a library had no free client slot for this gpuscope
    size_t max_kernel_rows = 0;
  };
  using Sink = std::function<void(const GpuRecord&)>;

  // Loads the programs and hands the library's sites to the session, which finds the copies,
  // attaches them and hands over each process that maps one. The session outlives it.
  GpuTimeCollector(UprobeSession& session, Config cfg);
  ~GpuTimeCollector();
  GpuTimeCollector(const GpuTimeCollector&) = delete;
  GpuTimeCollector& operator=(const GpuTimeCollector&) = delete;

  void on_record(Sink s) { sink_ = std::move(s); }
  // Probes the copies beside gpuscope and of --cupti-lib (after the session's start, which
  // probed those the processes in scope map and told them).
  void start();
  // Records as they arrive; every process told is told again every 0.5 s.
  void watch(EventLoop& loop);
  void drain();
  // Tells every process that this gpuscope has gone, then removes the probes.
  void stop();

  // Kernel name of an id a process handed over (demangled), or "" when unknown.
  std::string name(uint32_t pid, uint32_t id) const;
  // (pid, kernel name) -> GPU time since start.
  const std::map<std::pair<uint32_t, std::string>, KernelGpuTime>& kernel_times() const { return times_; }
  // (pid, device) -> nanoseconds in which at least one of the process's kernels ran; records
  // of a duty window count for the whole period (scaled by the batch's share).
  const std::map<std::pair<uint32_t, uint32_t>, uint64_t>& busy_ns() const { return busy_; }
  // Drains, then every process with GPU time, by pid. With release_exited, a process that has
  // ended is in it once more (exited), with its final values, and then forgotten.
  std::vector<GpuTimeProcess> snapshot();
  const std::vector<GpuRecord>& records() const { return kept_; }
  // Command name of a process with kept records, read when its first record came.
  std::string kept_comm(uint32_t pid) const;
  // Whether any copy of the library is probed.
  bool probing() const { return session_.library_files(lib_) > 0; }
  Stats stats() const;

 private:
  struct Told {
    uint64_t addr = 0;  // of its gs_gt_control
    int slot = -1;      // client slot held (version 2), -1: none yet
    uint32_t beat = 0;
    uint32_t version = 0;  // of the library's control word
    uint32_t flush = 0;    // the forced flush asked for (version 3), 0: none
  };
  // Asks each library told for a forced flush and waits, draining, until each has done it or
  // timeout_s has passed.
  void flush_all(double timeout_s);
  void handle(const void* data, size_t size);
  void on_records(const gs_gt_chunk& c);
  void add_kernel(const GpuRecord& g, uint32_t share_ppm);
  void mapped(const LibraryMapping& m);
  void tell(pid_t pid, Told& t, bool attach);
  void forget_exited();
  void release(uint32_t pid);

  Config cfg_;
  UprobeSession& session_;
  size_t lib_ = 0;  // the session's handle of the library
  Sink sink_;
  std::unique_ptr<gputime_bpf, void (*)(gputime_bpf*)> skel_;
  std::unique_ptr<RingBuffer> rb_;
  std::map<pid_t, Told> told_;
  unsigned ticks_ = 0;
  std::map<std::pair<uint32_t, uint32_t>, std::string> names_;
  std::map<std::pair<uint32_t, std::string>, KernelGpuTime> times_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> busy_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> busy_end_;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> dropped_;  // pid -> (cupti, lib), latest
  std::pair<uint64_t, uint64_t> dropped_released_{};           // the same, of processes forgotten
  std::map<uint32_t, std::string> comms_;
  std::vector<GpuRecord> kept_;
  // Processes with kept records: their names outlive them (the timeline is written at the end).
  std::map<uint32_t, std::string> kept_pids_;
  uint64_t records_ = 0, names_n_ = 0, lost_kept_ = 0, rows_full_ = 0, no_slot_ = 0;
  uint32_t generation_ = 0;
};

// One line on stderr when GPU records were lost (by reason); nothing otherwise.
void report_gpu_losses(const GpuTimeCollector::Stats& s);

// GPU-record kinds by name ("kernel", "memcpy", ...), and CUPTI's memcpy kinds.
const char* gpu_kind_name(unsigned kind);
const char* gpu_copy_kind_name(unsigned kind);

}  // namespace gpuscope

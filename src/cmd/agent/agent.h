#pragma once
// The agent's view: per-process, per-kernel and host-wide state from the collectors, turned
// into Prometheus text and JSON API bodies once per refresh. The loop thread feeds and
// publishes; the HTTP thread only reads what was published.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cmd/agent/anomaly.h"
#include "cmd/agent/devices.h"
#include "cmd/agent/governor.h"
#include "cmd/agent/http.h"
#include "cmd/agent/labels.h"
#include "cmd/agent/prom.h"
#include "core/bpf.h"
#include "gputime/gputime_collector.h"
#include "ioctl/ioctl_collector.h"
#include "kernels/kernels_collector.h"
#include "latency/latency_collector.h"
#include "memleak/memleak_collector.h"
#include "starvation/starvation_collector.h"

namespace gpuscope {

struct CollectorStatus {
  std::string name;
  bool up = false;
  std::string why;  // when down
};

// What one refresh hands the view.
struct AgentInput {
  const std::vector<KernelRow>* kernels = nullptr;              // null: collector off
  const MemleakSnapshot* memleak = nullptr;                     // null: collector off
  const LatencySnapshot* latency = nullptr;                     // null: collector off
  const std::vector<DeviceSample>* devices = nullptr;           // null: bridge off or not readable
  const std::vector<ProcessGpuSample>* process_gpus = nullptr;  // with devices: the processes on them
  const IoctlSnapshot* ioctl = nullptr;                         // null: collector off
  unsigned uvm_major = 0;                                       // nvidia-uvm's major, for ioctl names
  const StarvationReport* starvation = nullptr;                 // null: collector off
  const std::vector<GpuTimeProcess>* gputime = nullptr;         // null: collector off
  double gputime_duty = 1;                                      // share of the time GPU activity is recorded
  std::string hostname;
  double bridge_age_s = 0;
  std::vector<CollectorStatus> collectors;                       // every collector asked for
  std::map<std::pair<std::string, std::string>, uint64_t> lost;  // (collector, reason) -> events
  const AnomalyRules* anomalies = nullptr;                       // null: rules off
  const Governor* governor = nullptr;                            // null: governor off
  // The agent's BPF programs by name; null while kernel.bpf_stats_enabled is 0 (nothing counted).
  const std::map<std::string, ProgramStats>* programs = nullptr;
};

class AgentView {
 public:
  struct Config {
    unsigned max_kernels_per_process = 50;
    double retain_exited_s = 60;  // drop an exited process's series even if nobody scraped
    std::string pods_dir = "/var/log/pods";
    size_t max_folded_stacks = 10000;  // /api/starvation/folded; further stacks are counted lost
  };
  explicit AgentView(Config cfg) : cfg_(std::move(cfg)), labels_(cfg_.pods_dir) {}

  // Loop thread: a process's final kernel rows, or its final memory summary and leaks.
  void kernels_exited(uint32_t pid, const std::vector<KernelRow>& rows);
  void memleak_ended(const MemleakProcess& p, const std::vector<MemleakLeak>& leaks);
  // Loop thread: takes the snapshots, folds processes gone and scraped, and publishes.
  void refresh(const AgentInput& in);
  // Any thread.
  HttpReply serve(const std::string& path);
  // Folded stacks not kept (max_folded_stacks reached).
  uint64_t folded_lost() const { return folded_lost_; }
  // Series in the last published /metrics.
  size_t series() const;
  // Seconds the last refresh took to render everything.
  double render_s() const { return render_s_; }

 private:
  using KernelKey = std::pair<std::string, std::string>;  // (kernel, module)
  struct Proc {
    uint32_t pid = 0;
    std::string comm;
    ProcLabels labels;
    std::map<KernelKey, uint64_t> kernels;  // launches, handles naming the same kernel summed
    uint64_t graph_launches = 0;
    std::set<KernelKey> named;  // kernels with their own series (sticky, at most max_kernels)
    bool has_mem = false;
    gs_ml_proc mem{};
    bool has_ioctl = false;
    uint64_t ioctl_calls = 0, ioctl_errors = 0;
    bool has_gpu = false;
    std::map<std::string, KernelGpuTime> gpu_kernels;  // by kernel name
    std::map<uint32_t, uint64_t> gpu_busy_ns;          // by device
    std::set<std::string> gpu_named;                   // GPU-time kernels with their own series (sticky)
    std::map<unsigned, gpu_pid_device> on_gpus;        // by device, as the bridge lists it now
    bool exited = false;
    std::chrono::steady_clock::time_point exited_at{};
    uint64_t published_seq = 0;  // the first publication that held its final values
    bool seen = false;           // in this refresh's snapshots
  };
  // Totals of one comm in one container: what exited processes leave behind.
  using CommKey = std::tuple<std::string, std::string, std::string, std::string>;  // comm, container, pod, ns
  struct CommTotals {
    uint64_t launches = 0, graph_launches = 0, allocations = 0;
  };
  struct IoctlTotals {
    uint64_t calls = 0, errors = 0, total_ns = 0;
  };
  // A thread's CPU time while its process's GPUs sat idle, since the agent started.
  struct StarvingThread {
    uint32_t pid = 0, tid = 0;
    std::string comm, thread;
    ProcLabels labels;
    uint64_t cpu_ns = 0;
    uint64_t published_seq = 0;  // once gone: the first publication without further change
    bool gone = false;
  };
  struct LeakTotals {
    uint64_t bytes = 0, allocations = 0;
  };
  struct LeakReport {
    uint32_t pid;
    std::string comm, container, state;
    uint64_t bytes = 0;
    std::vector<MemleakLeak> leaks;  // the largest few
  };
  struct Published {
    uint64_t seq = 0;
    size_t series = 0;
    std::string metrics, processes, kernels, leaks, health, anomalies, folded;
    bool has_folded = false;
  };

  Proc& proc(uint32_t pid, const std::string& comm);
  Proc* gone(uint32_t pid);
  void retire(uint32_t pid);
  void set_kernels(Proc& p, const std::vector<KernelRow>& rows);
  void take_ioctl(const AgentInput& in);
  void take_starvation(const StarvationReport& r, uint64_t seq, uint64_t scraped);
  void take_gputime(const std::vector<GpuTimeProcess>& procs);
  void take_process_gpus(const std::vector<ProcessGpuSample>& samples);
  static CommKey comm_key(const Proc& p) { return {p.comm, p.labels.container, p.labels.pod, p.labels.ns}; }
  void choose_named(Proc& p);
  void choose_gpu_named(Proc& p);
  std::string render_metrics(const AgentInput& in, size_t* series);
  std::string render_processes();
  std::string render_kernels();
  std::string render_leaks();
  std::string render_health(const AgentInput& in, size_t series);

  Config cfg_;
  LabelCache labels_;
  std::map<uint32_t, Proc> live_;
  std::deque<Proc> gone_;  // exited, still exported until scraped once
  std::map<CommKey, CommTotals> folded_;
  std::map<std::pair<std::string, std::string>, LeakTotals> leaked_;  // (comm, container)
  std::deque<LeakReport> leak_reports_;
  std::map<std::string, IoctlTotals> ioctl_exited_;                   // by request name: rows of exited processes
  std::map<std::string, IoctlTotals> ioctl_now_;                      // by request name: exited plus live
  std::map<std::pair<uint32_t, uint32_t>, StarvingThread> starving_;  // by (pid, tid)
  std::map<CommKey, uint64_t> starving_exited_;                       // CPU ns of threads gone
  Folded stacks_;                                                     // /api/starvation/folded
  uint64_t folded_lost_ = 0;
  bool has_folded_ = false;
  uint64_t seq_ = 0;
  double render_s_ = 0;

  mutable std::mutex mu_;
  std::shared_ptr<const Published> pub_;
  uint64_t scraped_seq_ = 0;  // the latest publication /metrics has served
  uint64_t scrapes_ = 0;
};

// The agent's own footprint (Prometheus's process_* metrics).
void add_process_metrics(PromSet& m);

}  // namespace gpuscope

// The GPUs and the processes on them, from a running bridge's pins, else from a bridge run here
// (before starvation, which reads the same pins). Pins whose writer has gone (the agent or bridge
// before this one, within the readers' 10 s of staleness) are taken over at once, now and
// whenever their writer goes.
#include <CLI/CLI.hpp>
#include <mutex>
#include <optional>

#include "bridge/bridge.h"
#include "bridge/nvml.h"
#include "cmd/agent/registry.h"
#include "cmd/agent/devices.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

class BridgeAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "bridge"; }

  void add_flags(CLI::App* cmd) override {
    add_number(cmd, "--bridge-poll-interval-ms", poll_ms_,
               "NVML poll interval of the bridge the agent runs when none is running (default 100)", "milliseconds", 10,
               60000);
    add_number(cmd, "--bridge-detail-interval-ms", detail_ms_,
               "How often that bridge reads device details and processes; utilization is read every poll "
               "(default 1000)",
               "milliseconds", 0, 3600000);
  }

  void check(const AgentOptions& o) const override { nvml::check_library(o.nvml); }

  void load(AgentHost& host) override {
    host_ = &host;
    reader_ = std::make_unique<BridgeReader>(host.options.pin_dir, host.options.nvml);
    take_if_free();
  }

  // The bridge read may stop publishing at any time; so may the agent's own, taken over by
  // another bridge that may stop in turn.
  void start(AgentHost&, EventLoop& loop) override {
    loop.every(0.5, [this] {
      if (own_ && own_->done()) {
        std::string why = own_->why();
        own_.reset();
        std::lock_guard g(mu_);
        if (!why.empty()) own_why_ = why;
      }
      take_if_free();
    });
  }

  // Read from the pins each refresh: a bridge may start or stop while the agent runs.
  void take() override {
    auto& scope = host_->options.scope;
    health_ = {};
    devices_.clear();
    on_gpus_.clear();
    read_ok_ = false;
    try {
      devices_ = reader_->read(&age_s_);
      on_gpus_ = reader_->read_processes();
      std::erase_if(on_gpus_, [&](const ProcessGpuSample& p) { return !scope.wants(p.pid, p.comm); });
      read_ok_ = true;
    } catch (const std::exception& e) {
      health_ = {false, e.what()};
      std::lock_guard g(mu_);
      if (!own_why_.empty()) health_.why += "; no bridge could run in the agent: " + own_why_;
      if (said_ != health_.why) fprintf(stderr, "gpuscope: agent: collector bridge is off: %s\n", health_.why.c_str());
    }
    said_ = health_.why;
    // The processes the bridge lists on the GPUs now; one it lists is running unless it has
    // gone: NVML lists a process for a second or two after its exit (seen on the H200, check 99), and
    // its series must leave on the agent's one rule, not on the driver's clean-up.
    host_->procs.each([&](const ProcEntry& e) {
      if (!e.exited) procs_.erase(e.id);
    });
    if (!read_ok_) return;
    for (auto& s : on_gpus_) {
      if (!pid_exists(static_cast<pid_t>(s.pid))) continue;
      ProcEntry& p = host_->procs.any(s.pid, s.comm);
      if (p.exited) continue;
      procs_[p.id][s.gpu] = s.m;
      p.seen = true;
    }
  }

  void fold(const ProcEntry& e) override { procs_.erase(e.id); }

  void metrics(PromSet& m) override {
    if (!read_ok_) return;
    add_device_metrics(m, devices_, reader_->hostname(), age_s_);
    m.family("gpuscope_process_gpu_utilization_ratio", T::gauge,
             "SM utilization by the process on the GPU, 0-1 (NVML's per-process samples, the highest of the bridge's "
             "last tick)");
    m.family("gpuscope_process_gpu_memory_utilization_ratio", T::gauge,
             "Memory controller utilization by the process on the GPU, 0-1");
    m.family("gpuscope_process_gpu_memory_used_bytes", T::gauge, "Device memory the process holds on the GPU (NVML)");
    host_->procs.each([&](const ProcEntry& e) {
      auto* gpus = procs_.find(e.id);
      if (!gpus) return;
      for (auto& [gpu, g] : *gpus) {
        const PromLabels d{{"gpu", std::to_string(gpu)}};
        m.add("gpuscope_process_gpu_utilization_ratio", e.prom_labels(), d, g.sm_util_pct / 100.0);
        m.add("gpuscope_process_gpu_memory_utilization_ratio", e.prom_labels(), d, g.mem_util_pct / 100.0);
        m.add("gpuscope_process_gpu_memory_used_bytes", e.prom_labels(), d,
              static_cast<double>(g.used_gpu_memory_bytes));
      }
    });
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    auto* gpus = procs_.find(e.id);
    if (!gpus || gpus->empty()) return;
    j.begin_array("gpus");
    for (auto& [gpu, g] : *gpus) {
      j.begin_object().num("gpu", gpu).real("sm_utilization_ratio", g.sm_util_pct / 100.0, 2);
      j.real("memory_utilization_ratio", g.mem_util_pct / 100.0, 2).num("memory_used_bytes", g.used_gpu_memory_bytes);
      j.boolean("compute", g.kinds & GPU_PROC_COMPUTE).boolean("graphics", g.kinds & GPU_PROC_GRAPHICS);
      j.end_object();
    }
    j.end_array();
  }

  CollectorHealth health() const override { return health_; }
  std::string describe() const override { return own_ ? "bridge (in the agent)" : "bridge"; }
  void detach() override { own_.reset(); }

 private:
  bool take_if_free() {
    if (own_) return false;
    const AgentOptions& o = host_->options;
    BridgeHolder h = bridge_holder(o.pin_dir);
    if (h.publishing) return false;
    // A failed try is repeated when the pins change hands, and at most every 30 s otherwise.
    auto now = std::chrono::steady_clock::now();
    if (tried_ && tried_->pid == h.pid && now - tried_at_ < std::chrono::seconds(30)) return false;
    try {
      BridgeOptions b;
      b.nvml = o.nvml;
      b.pin_dir = o.pin_dir;
      b.poll_interval_ms = poll_ms_;
      b.detail_interval_ms = detail_ms_;
      b.verbose = o.common.verbose;
      own_ = std::make_unique<BridgeThread>(b);
      tried_.reset();
      std::lock_guard g(mu_);
      own_why_.clear();
      if (h.pid)
        fprintf(stderr, "gpuscope: agent: bridge pid %u under %s is not publishing; the agent runs one\n", h.pid,
                o.pin_dir.c_str());
      else
        fprintf(stderr, "gpuscope: agent: no bridge was publishing under %s; the agent runs one\n", o.pin_dir.c_str());
      return true;
    } catch (const std::exception& e) {
      tried_ = h;
      tried_at_ = now;
      std::lock_guard g(mu_);
      own_why_ = e.what();
      return false;
    }
  }

  AgentHost* host_ = nullptr;
  unsigned poll_ms_ = 100;
  unsigned detail_ms_ = 1000;
  std::unique_ptr<BridgeReader> reader_;
  std::unique_ptr<BridgeThread> own_;
  std::mutex mu_;
  std::string own_why_;                // under mu_: why the agent runs no bridge
  std::optional<BridgeHolder> tried_;  // the holder at the last failed try
  std::chrono::steady_clock::time_point tried_at_ = std::chrono::steady_clock::now();
  CollectorHealth health_{false, "unread"};
  std::string said_ = "unread";
  std::vector<DeviceSample> devices_;
  std::vector<ProcessGpuSample> on_gpus_;
  bool read_ok_ = false;
  double age_s_ = 0;
  PerProcess<std::map<unsigned, gpu_pid_device>> procs_;  // by device, as the bridge lists it now
};

}  // namespace

std::unique_ptr<AgentCollector> make_bridge_collector() { return std::make_unique<BridgeAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_bridge_collector, 60);

}  // namespace gpuscope

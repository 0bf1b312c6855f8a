// ioctl calls on NVIDIA device nodes, by request name and per process.
#include <cstring>

#include "cmd/agent/registry.h"
#include "core/output.h"
#include "ioctl/decode.h"
#include "ioctl/ioctl_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

class IoctlAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "ioctl"; }

  void load(AgentHost& host) override {
    host_ = &host;
    collector_ = std::make_unique<IoctlCollector>(IoctlCollector::Config{host.options.scope, false, false, kMaxRows});
  }

  void take() override {
    IoctlSnapshot snap = collector_->snapshot();
    drivers_.clear();
    for (auto& [rdev, driver] : snap.drm_drivers)
      drivers_[nv_device_name(rdev >> GS_KDEV_MINORBITS, rdev & ((1u << GS_KDEV_MINORBITS) - 1), 0)] = driver;
    now_ = exited_;
    struct PerPid {
      std::string comm;
      uint64_t calls = 0, errors = 0;
      bool exited = false;
    };
    std::map<uint32_t, PerPid> per_pid;
    for (auto& r : snap.ioctls) {
      auto req = decode_ioctl(r.key.rdev >> GS_KDEV_MINORBITS, collector_->uvm_major(), r.key.request);
      std::string name = req.name.empty() ? fmt::format("0x{:x}", r.key.request) : req.name;
      now_[name] += r.val;
      if (r.exited) exited_[name] += r.val;
      auto& pp = per_pid[r.key.pid];
      pp.comm = std::string(r.val.comm, strnlen(r.val.comm, sizeof r.val.comm));
      pp.calls += r.val.count;
      pp.errors += r.val.errors;
      pp.exited = pp.exited || r.exited;
    }
    for (auto& [pid, pp] : per_pid) {
      ProcEntry& p = host_->procs.any(pid, pp.comm);
      procs_[p.id] = {pp.calls, pp.errors};
      // Final values: not seen, so an exited process leaves with this refresh.
      if (!pp.exited && !p.exited) p.seen = true;
    }
  }

  void fold(const ProcEntry& e) override { procs_.erase(e.id); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_ioctl_calls_total", T::counter,
             "ioctl calls on NVIDIA device nodes by request, exited processes included");
    m.family("gpuscope_ioctl_errors_total", T::counter, "ioctl calls on NVIDIA device nodes that failed, by request");
    m.family("gpuscope_ioctl_duration_seconds_total", T::counter,
             "Time spent in ioctl calls on NVIDIA device nodes, by request");
    for (auto& [req, t] : now_) {
      m.add("gpuscope_ioctl_calls_total", {{"request", req}}, static_cast<double>(t.calls));
      m.add("gpuscope_ioctl_errors_total", {{"request", req}}, static_cast<double>(t.errors));
      m.add("gpuscope_ioctl_duration_seconds_total", {{"request", req}}, static_cast<double>(t.total_ns) / 1e9);
    }
    m.family("gpuscope_drm_device_info", T::gauge,
             "A DRM device node's kernel driver, as its DRM_IOCTL_VERSION answered a process (1 for each seen)");
    for (auto& [device, driver] : drivers_)
      m.add("gpuscope_drm_device_info", {{"device", device}, {"driver", driver}}, 1);
    m.family("gpuscope_process_ioctl_calls_total", T::counter, "ioctl calls on NVIDIA device nodes per process");
    host_->procs.each([&](const ProcEntry& e) {
      if (auto* p = procs_.find(e.id)) m.add("gpuscope_process_ioctl_calls_total", e.prom_labels(), p->calls);
    });
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    if (auto* p = procs_.find(e.id)) j.num("ioctl_calls", p->calls).num("ioctl_errors", p->errors);
  }

  void lost(LostCounts& out) const override {
    auto s = collector_->stats();
    out["state_map_full"] = s.state_full;
    out["counter_map_full"] = s.map_full;
  }

  void drain() override { collector_->detach(); }

 private:
  static constexpr uint32_t kMaxRows = 4096;
  struct Totals {
    uint64_t calls = 0, errors = 0, total_ns = 0;
    Totals& operator+=(const gs_ioctl_val& v) {
      calls += v.count;
      errors += v.errors;
      total_ns += v.total_ns;
      return *this;
    }
  };
  struct OfProcess {
    uint64_t calls = 0, errors = 0;
  };

  AgentHost* host_ = nullptr;
  std::unique_ptr<IoctlCollector> collector_;
  std::map<std::string, Totals> exited_;        // by request name: rows of exited processes
  std::map<std::string, Totals> now_;           // by request name: exited plus live
  std::map<std::string, std::string> drivers_;  // DRM device name -> kernel driver
  PerProcess<OfProcess> procs_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_ioctl_collector() { return std::make_unique<IoctlAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_ioctl_collector, 40);

}  // namespace gpuscope

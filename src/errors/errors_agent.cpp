// GPU errors in the agent: Xids (kernel log, NVML) and sticky CUDA errors counted with their
// device, process and kernel, and /api/errors with the joined records.
#include <CLI/CLI.hpp>

#include "cmd/agent/labels.h"
#include "cmd/agent/registry.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/uprobe_session.h"
#include "errors/errors_collector.h"
#include "errors/errors_nvml.h"
#include "errors/errors_json.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

PromLabels process_labels(const std::optional<uint32_t>& pid, const std::string& comm, const ContainerInfo& c) {
  if (!pid) return {{"pid", ""}, {"comm", ""}, {"container", ""}, {"pod", ""}, {"namespace", ""}};
  ProcLabels l = labels_of(c);
  return {
      {"pid", std::to_string(*pid)}, {"comm", comm}, {"container", l.container}, {"pod", l.pod}, {"namespace", l.ns}};
}

class ErrorsAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "errors"; }
  bool uses_session() const override { return true; }

  void add_flags(CLI::App* cmd) override {
    cmd->add_option("--kmsg", kmsg_,
                    "The kernel log the errors collector reads Xids from: /dev/kmsg (default), or a saved log to "
                    "replay");
  }

  // The kernels collector's rows name the kernels launched before a sticky error.
  void plan(CollectorServices& s) const override { s.need<KernelsCollector>(); }

  void load(AgentHost& host) override {
    ErrorsCollector::Config cfg;
    cfg.scope = host.options.scope;
    cfg.kmsg_path = kmsg_;
    collector_ = std::make_unique<ErrorsCollector>(*host.session, cfg, host.services.get<KernelsCollector>());
    if (!collector_->kmsg_error().empty())
      host.log("errors",
               collector_->kmsg_error() + ": no Xids from the kernel log; sticky CUDA errors are still counted");
    host.services.provide<ErrorsCollector>(collector_.get(), this);
  }

  void start(AgentHost& host, EventLoop& loop) override {
    collector_->start(*host.session);
    collector_->watch(loop);
    // Once the session started: a bad --lib is then the one line the agent says.
    try {
      nvml_ = std::make_unique<ErrorsNvml>(host.options.nvml, *collector_, host.options.common.verbose);
    } catch (const UsageError& e) {
      host.log("errors", std::string(e.what()) + ": no NVML events, Xids from the kernel log only");
    }
  }

  void take() override {
    for (auto& r : collector_->take_ready()) count(r);
  }

  void metrics(PromSet& m) override {
    m.family("gpuscope_xid_errors_total", T::counter,
             "Xid errors per GPU, Xid, NVIDIA's class and action, source (kmsg: the kernel log reported it, nvml: "
             "only NVML did) and process (empty labels where the driver named none)");
    m.family("gpuscope_cuda_sticky_errors_total", T::counter,
             "Sticky CUDA errors (the process's context is lost) per process, API, error and the kernel the process "
             "launched last before the first one");
    m.family("gpuscope_errors_kmsg_lost_records_total", T::counter,
             "Kernel-log records overwritten before the errors collector read them");
    m.family("gpuscope_errors_dropped_total", T::counter, "GPU errors the errors collector did not keep, by reason");
    for (auto& [k, n] : xids_) {
      auto& [gpu, uuid, pci, xid, cls, action, source, proc] = k;
      PromLabels l{{"gpu", gpu},   {"uuid", uuid},     {"pci_bus_id", pci}, {"xid", xid},
                   {"class", cls}, {"action", action}, {"source", source}};
      m.add("gpuscope_xid_errors_total", l, proc, static_cast<double>(n));
    }
    for (auto& c : collector_->sticky_counts()) {
      PromLabels l = process_labels(c.pid, c.comm, c.container);
      bool runtime = api_desc(c.api).layer == GS_LAYER_RUNTIME;
      m.add("gpuscope_cuda_sticky_errors_total", l,
            {{"api", api_symbol(c.api)},
             {"error", runtime ? cuda_runtime_error_name(c.code) : cuda_driver_error_name(c.code)},
             {"kernel", c.first_kernel}},
            static_cast<double>(c.count));
    }
    ErrorsStats s = collector_->stats();
    m.add("gpuscope_errors_kmsg_lost_records_total", {}, static_cast<double>(s.kmsg.lost));
    for (auto& [reason, n] : dropped(s))
      m.add("gpuscope_errors_dropped_total", {{"reason", reason}}, static_cast<double>(n));
  }

  std::vector<std::string> paths() const override { return {"/api/errors"}; }

  void endpoints(std::map<std::string, Endpoint>& out) override {
    fmt::memory_buffer b;
    JsonLine j(b);
    j.begin_array("errors");
    for (auto& r : collector_->records()) {
      j.begin_object();
      put_gpu_error(j, r);
      j.end_object();
    }
    j.end_array();
    ErrorsStats s = collector_->stats();
    j.str("kmsg", kmsg_).str("kmsg_error", collector_->kmsg_error()).num("kmsg_records", s.kmsg.records);
    j.num("kmsg_lost", s.kmsg.lost).num("records_dropped", s.records_dropped).end();
    out["/api/errors"] = {std::string(b.data(), b.size())};
  }

  // Errors not counted (an /api/errors record let go past the newest 4096 still is).
  void lost(LostCounts& out) const override {
    for (auto& [reason, n] : dropped(collector_->stats()))
      if (reason != "records_evicted") out[reason] = n;
  }

  void detach() override {
    nvml_.reset();
    collector_->detach();
  }
  void drain() override {
    collector_->poll();
    for (auto& r : collector_->take_ready(true)) count(r);
  }

 private:
  using XidKey =
      std::tuple<std::string, std::string, std::string, std::string, std::string, std::string, std::string, PromLabels>;

  std::map<std::string, uint64_t> dropped(const ErrorsStats& s) const {
    return {{"ring_buffer_full", s.bpf_lost_events}, {"process_map_full", s.bpf_procs_full},
            {"count_map_full", s.bpf_counts_full},   {"counts_full", s.counts_dropped},
            {"xid_series_full", xids_dropped_},      {"records_evicted", s.records_dropped}};
  }

  // Each Xid once, as the collector hands it out (joined, or past the join window).
  void count(const GpuError& r) {
    if (r.kind != ErrorKind::kXid) return;
    XidKey k{r.device.index >= 0 ? std::to_string(r.device.index) : "",
             r.device.uuid,
             r.device.pci_bus_id,
             std::to_string(r.xid),
             xid_class_name(r.info.cls),
             xid_action_name(r.info.action),
             r.from_kmsg ? "kmsg" : "nvml",
             process_labels(r.pid, r.comm, r.container)};
    auto it = xids_.find(k);
    if (it != xids_.end())
      it->second++;
    else if (xids_.size() < ErrorsCollector::kMaxCounts)
      xids_.emplace(std::move(k), 1);
    else
      xids_dropped_++;
  }

  std::string kmsg_ = "/dev/kmsg";
  std::unique_ptr<ErrorsCollector> collector_;
  std::unique_ptr<ErrorsNvml> nvml_;  // after collector_: its thread ends first
  std::map<XidKey, uint64_t> xids_;
  uint64_t xids_dropped_ = 0;  // Xid series not made past kMaxCounts
};

}  // namespace

std::unique_ptr<AgentCollector> make_errors_collector() { return std::make_unique<ErrorsAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_errors_collector, 55);

}  // namespace gpuscope

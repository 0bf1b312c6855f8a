// GPU time: kernel durations and busy time from libgpuscope-cupti.so's records. Costs nothing
// where no process loads the library: one uprobe per handed buffer.
#include "gputime/gputime_agent.h"

#include <CLI/CLI.hpp>

#include "cmd/agent/registry.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/uprobe_session.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
// Kernel duration buckets: 4^i µs, 1 µs to 16.8 s. Kernels run from about a microsecond to
// seconds; powers of 4 span that in 13 buckets (powers of 2 would double every kernel's series
// within the same cardinality bound), and each bound is one of the collector's log2 bounds, so
// the counts are exact.
constexpr size_t kKernelBuckets = 13;

const std::vector<double>& kernel_bounds_s() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (size_t i = 0; i < kKernelBuckets; i++) v.push_back(static_cast<double>(uint64_t{1} << (2 * i)) * 1e-6);
    return v;
  }();
  return b;
}

// The collector's (2^(k-1), 2^k] µs counts folded into kernel_bounds_s(), +Inf last.
std::vector<uint64_t> kernel_bucket_counts(const KernelGpuTime& t) {
  std::vector<uint64_t> c(kKernelBuckets + 1, 0);
  for (size_t k = 0; k < KernelGpuTime::kBuckets; k++) c[std::min((k + 1) / 2, kKernelBuckets)] += t.le_log2_us[k];
  return c;
}

// --gputime-duty ON/PERIOD (seconds), or a share of the default 10 s period; 1: always exact.
void parse_duty(const std::string& v, uint32_t& on_ms, uint32_t& period_ms) {
  const std::string flag = "--gputime-duty";
  size_t slash = v.find('/');
  double on, period = 10;
  if (slash == std::string::npos) {
    on = period * parse_number(flag, v, "the share of time recorded (or ON/PERIOD seconds)", 0.005, 1, false);
  } else {
    period = parse_number(flag, v.substr(slash + 1), "seconds per period in ON/PERIOD", 0.1, 3600, false);
    on = parse_number(flag, v.substr(0, slash), "seconds on in ON/PERIOD", 0.05, 3600, false);
    if (on > period) throw UsageError("--gputime-duty ON/PERIOD: ON (" + v.substr(0, slash) + ") exceeds PERIOD");
  }
  on_ms = static_cast<uint32_t>(on * 1000 + 0.5);
  period_ms = static_cast<uint32_t>(period * 1000 + 0.5);
}

class GpuTimeAgent final : public AgentCollector, public GpuTimeByProcess {
 public:
  std::string_view name() const override { return "gputime"; }
  std::string_view subcommand() const override { return "kernels"; }

  void add_flags(CLI::App* cmd) override {
    cmd->add_option_function<std::string>(
           "--gputime-duty", [this](const std::string& v) { parse_duty(v, on_ms_, period_ms_); },
           "GPU time recorded ON seconds in every PERIOD (ON/PERIOD), or a share of 10 s; 1: always (default 1/10)")
        ->type_name("ON/PERIOD");
  }

  bool uses_session() const override { return true; }

  void load(AgentHost& host) override {
    host_ = &host;
    GpuTimeCollector::Config c;
    c.max_kernel_rows = kMaxKernelRows;
    c.ring_bytes = kRingBytes;
    c.release_exited = true;
    c.mode = on_ms_ < period_ms_ ? GS_GT_MODE_DUTY : GS_GT_MODE_KERNELS;
    c.duty_on_ms = on_ms_;
    c.duty_period_ms = period_ms_;
    collector_ = std::make_unique<GpuTimeCollector>(*host.session, std::move(c));
    host.services.provide<GpuTimeByProcess>(this, this);
  }

  void start(AgentHost&, EventLoop& loop) override {
    try {
      collector_->start();
    } catch (...) {
      collector_.reset();
      throw;
    }
    collector_->watch(loop);
  }

  void take() override {
    for (auto& g : collector_->snapshot()) {
      ProcEntry& p = host_->procs.any(g.pid, g.comm);
      if (p.comm.empty()) p.comm = g.comm;
      auto& s = procs_[p.id];
      s.kernels = g.kernels;
      s.busy_ns = g.busy_ns;
      // Final values: not seen, so an ended process leaves with this refresh.
      if (!g.exited && !p.exited) p.seen = true;
    }
  }

  // As the kernels collector's, ranked by GPU time: the kernels that take the GPU longest get their own series.
  void settle(const RefreshSeq&) override {
    const size_t max = host_->options.max_kernels;
    for (auto& [_, p] : procs_) {
      std::erase_if(p.named, [&](const std::string& k) { return !p.kernels.count(k); });
      std::vector<std::pair<uint64_t, const std::string*>> fresh;
      for (auto& [k, t] : p.kernels)
        if (!p.named.count(k)) fresh.push_back({t.total_ns, &k});
      std::stable_sort(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (auto& [_, k] : fresh) {
        if (p.named.size() >= max) break;
        p.named.insert(*k);
      }
    }
  }

  void fold(const ProcEntry& p) override { procs_.erase(p.id); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_kernel_duration_seconds", T::histogram,
             "GPU execution time of the kernels recorded (all, or those in --gputime-duty's windows) per process and "
             "kernel, from libgpuscope-cupti.so's records; kernels beyond the --max-kernels-per-process with the most "
             "GPU time are summed in kernel=\"other\"");
    m.family("gpuscope_gpu_busy_seconds_total", T::counter,
             "Time in which at least one kernel of the process ran on the device (overlapping kernels counted once); "
             "a duty window's share counts for its whole period");
    m.family("gpuscope_gputime_duty_ratio", T::gauge,
             "Share of the time this agent asks libgpuscope-cupti.so to record (--gputime-duty; 1: always)");
    m.add("gpuscope_gputime_duty_ratio", {}, static_cast<double>(on_ms_) / period_ms_);
    host_->procs.each([&](const ProcEntry& e) {
      const GpuTimeOfProcess* g = procs_.find(e.id);
      if (!g) return;
      const GpuTimeOfProcess& p = *g;
      auto l = e.prom_labels();
      auto one = [&](const std::string& kernel, const KernelGpuTime& t) {
        auto x = l;
        x.push_back({"kernel", kernel});
        m.histogram("gpuscope_kernel_duration_seconds", x, kernel_bounds_s(), kernel_bucket_counts(t),
                    static_cast<double>(t.total_ns) / 1e9);
      };
      KernelGpuTime other;
      for (auto& [k, t] : p.kernels)
        if (p.named.count(k))
          one(k, t);
        else
          other += t;
      if (p.kernels.size() > p.named.size()) one("other", other);
      for (auto& [dev, ns] : p.busy_ns)
        m.add("gpuscope_gpu_busy_seconds_total", l, {{"device", std::to_string(dev)}}, static_cast<double>(ns) / 1e9);
    });
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    const GpuTimeOfProcess* g = procs_.find(e.id);
    if (!g) return;
    j.begin_array("gpu_busy");
    for (auto& [dev, ns] : g->busy_ns) j.begin_object().num("device", dev).num("busy_ns", ns).end_object();
    j.end_array();
  }

  // Up while a copy of the library is probed: beside gpuscope, or one a process in scope loaded.
  CollectorHealth health() const override {
    if (!collector_) return {false, "stopped"};
    if (collector_->probing()) return {};
    return {false, "no libgpuscope-cupti.so probed: none beside gpuscope (" + cupti_lib_beside_self() +
                       ") and no process in scope has loaded one"};
  }

  void lost(LostCounts& out) const override {
    if (!collector_) return;
    auto s = collector_->stats();
    out["ring_buffer_full"] = s.lost_ringbuf;
    out["unreadable"] = s.lost_read;
    out["over_batch_limit"] = s.lost_too_many;
    out["names_lost"] = s.lost_names;
    out["row_map_full"] = s.rows_full;
    out["cupti_no_buffer"] = s.cupti_dropped;
    out["library_dropped"] = s.lib_dropped;
    out["no_client_slot"] = s.no_slot;
  }

  void detach() override {
    if (collector_) collector_->stop();
  }

  const GpuTimeOfProcess* of(uint64_t id) const override { return procs_.find(id); }

 private:
  // 512 KiB of ring buffer holds 3 full hand-offs (2048 records each), drained as they come; the
  // subcommands' 8 MiB would put the agent's maps past 20 MB.
  static constexpr uint32_t kRingBytes = 1u << 19;
  static constexpr size_t kMaxKernelRows = 16384;
  AgentHost* host_ = nullptr;
  std::unique_ptr<GpuTimeCollector> collector_;
  // CUPTI's activity costs a launch-bound loop ~20 %: on 1 s in every 10 s (--gputime-duty).
  uint32_t on_ms_ = 1000, period_ms_ = 10000;
  PerProcess<GpuTimeOfProcess> procs_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_gputime_collector() { return std::make_unique<GpuTimeAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_gputime_collector, 50);

}  // namespace gpuscope

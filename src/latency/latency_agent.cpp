// CUDA API calls by API, layer and result, and their durations as Prometheus histograms.
#include <CLI/CLI.hpp>

#include <algorithm>

#include "cmd/agent/registry.h"
#include "core/cuda_api.h"
#include "core/output.h"
#include "core/uprobe_session.h"
#include "core/histogram.h"
#include "latency/latency_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
// API duration buckets: everything up to 1.023 µs in the first, up to about 17 s in the last.
constexpr unsigned kFirstBucket = 9, kLastBucket = 33;

class LatencyAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "latency"; }
  bool uses_session() const override { return true; }

  void add_flags(CLI::App* cmd) override {
    cmd->add_option("--latency-apis", apis_,
                    "CUDA APIs the latency collector times (comma-separated; default: synchronization, memory, "
                    "copies, graphs and the driver's launches, not the per-operation device and context queries)")
        ->delimiter(',');
    add_number(cmd, "--latency-sample-launches", sample_,
               "Time one kernel launch in N (needs uprobe sessions, kernel 6.12+; default 64; 1: every launch)", "N", 1,
               65535);
  }

  void check(const AgentOptions&) const override { rows(); }
  void plan(CollectorServices& s) const override { s.need<LaunchTimingHost>(); }

  void load(AgentHost& host) override {
    LatencyCollector::Config cfg{rows(), false, host.options.scope, sample_};
    // kernels loads first: its launch programs time the driver's launches, one program per launch.
    if (auto* t = host.services.get<LaunchTimingHost>()) cfg.launch_host = *t;
    collector_ = std::make_unique<LatencyCollector>(*host.session, std::move(cfg));
  }

  std::string describe() const override {
    const auto& h = collector_ ? collector_->hosted_rows() : std::vector<bool>{};
    return std::find(h.begin(), h.end(), true) != h.end() ? "latency (launches timed by kernels' programs)" : "latency";
  }

  void take() override { snap_ = collector_->snapshot(); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_api_calls_total", T::counter, "CUDA API calls by API, layer and result (return code name)");
    m.family("gpuscope_api_duration_seconds", T::histogram,
             "CUDA API call duration, from the in-kernel log2 histograms; _sum is estimated from bucket midpoints");
    std::vector<double> bounds;
    for (unsigned b = kFirstBucket; b <= kLastBucket; b++) bounds.push_back(static_cast<double>(bucket_le(b)) / 1e9);
    for (auto& [key, row] : snap_.rows) {
      unsigned api = key.second;
      PromLabels l = api_labels(api);
      for (auto& [ret, n] : row.rets) m.add("gpuscope_api_calls_total", l, {{"result", latency_ret_name(api, ret)}}, n);
      std::vector<uint64_t> counts(bounds.size() + 1, 0);
      double sum_s = 0;
      for (unsigned b = 0; b < kLatBuckets; b++) {
        uint64_t n = row.buckets[b];
        if (!n) continue;
        unsigned i = b <= kFirstBucket ? 0 : b - kFirstBucket;
        counts[std::min<size_t>(i, bounds.size())] += n;
        double hi = std::min<double>(static_cast<double>(bucket_le(b)), row.max_ns ? row.max_ns : 1e300);
        sum_s += n * (static_cast<double>(bucket_low(b)) + hi) / 2 * 1e-9;
      }
      m.histogram("gpuscope_api_duration_seconds", l, bounds, counts, sum_s);
    }
    probe_hits(m);
  }

  void lost(LostCounts& out) const override {
    auto s = collector_->stats();
    out["no_thread_state"] = s.untimed_no_state;
    out["histogram_map_full"] = s.uncounted_hist_full;
  }

  void observe(AnomalyInput& in) const override {
    for (auto& [key, row] : snap_.rows)
      for (auto& [ret, n] : row.rets)
        if (ret != 0 && ret != 600) in.errors[api_symbol(key.second)] += n;  // 600: not ready (polling), not failed
  }

 private:
  // An always-on agent times one launch in 64: a launch-bound process still fills the histogram
  // with hundreds a second, and 63 launches in 64 cost one entry probe (kernels' program, where
  // it times them). Each timed launch adds a return probe: one in 64 is a quarter of those of
  // one in 16 (on H100s the two read within their noise, docs/gpu-runs/2026-12-06-round17).
  static constexpr unsigned kLaunchSample = 64;

  std::vector<bool> rows() const { return apis_.empty() ? always_on_latency_rows() : select_apis(apis_, "all"); }

  static PromLabels api_labels(unsigned api) {
    return {{"api", api_symbol(api)}, {"layer", layer_name(api_desc(api).layer)}};
  }

  void probe_hits(PromSet& m) const {
    m.family("gpuscope_api_probe_hits_total", T::counter,
             "Entries of the latency collector's probes by API and outcome: timed, or not timed as nested in an "
             "outer call of the same layer, filtered out (-c), or an unsampled launch");
    for (unsigned api = 0; api < snap_.sites.size(); api++) {
      const LatencySiteCounts& c = snap_.sites[api];
      if (!c.entries) continue;
      PromLabels l = api_labels(api);
      for (auto [outcome, n] : {std::pair<const char*, uint64_t>{"timed", c.timed()},
                                {"nested", c.nested},
                                {"filtered", c.filtered},
                                {"unsampled", c.unsampled}})
        m.add("gpuscope_api_probe_hits_total", l, {{"outcome", outcome}}, static_cast<double>(n));
    }
    m.family("gpuscope_api_launch_sample", T::gauge,
             "The latency collector times one kernel launch in this many (gpuscope_api_calls_total and "
             "gpuscope_api_duration_seconds of launch APIs count the timed ones)");
    m.add("gpuscope_api_launch_sample", {}, static_cast<double>(snap_.launch_sample));
  }

  std::vector<std::string> apis_;
  unsigned sample_ = kLaunchSample;
  std::unique_ptr<LatencyCollector> collector_;
  LatencySnapshot snap_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_latency_collector() { return std::make_unique<LatencyAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_latency_collector, 30);

}  // namespace gpuscope

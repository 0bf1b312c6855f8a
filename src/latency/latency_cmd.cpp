// gpuscope latency: the command and its views (bcc-style text histograms, JSON lines).
#include <memory>
#include <time.h>

#include <cstdio>
#include <tuple>

#include "core/cli.h"
#include "core/clock.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "core/histogram.h"
#include "latency/latency_collector.h"

namespace gpuscope {

namespace {

struct LatencyOptions {
  CommonFlags common;
  Scope scope;
  std::vector<std::string> apis{
      "cudaMalloc",     "cudaFree",     "cudaMemcpy", "cudaStreamSynchronize", "cudaDeviceSynchronize",
      "cuLaunchKernel", "cuMemAlloc_v2"};
  bool per_process = false;
  double interval_s = 0;  // 0: print once, at the end
  unsigned launch_sample = 1;
};

// Processes that have exited since keep their histogram but lose their name.
std::string comm_suffix(pid_t pid) {
  std::string c = proc_comm(pid);
  return c.empty() ? "" : " (" + c + ")";
}

// The latency view: what was counted since the previous print, from two cumulative snapshots.
class LatencyView {
 public:
  explicit LatencyView(const LatencyOptions& o) : o_(o) {}
  void print(const LatencySnapshot& now, bool final, const LatencyCollector::Stats* stats);
  // What each probed row's probes took, and why calls were not timed (JSON lines, or with -v).
  void print_probes(const std::vector<LatencySiteCounts>& sites);

 private:
  const LatencyRow* prev_row(const LatencySnapshot::Key& key) const;
  void write_json(const LatencySnapshot::Key& key, const LatencyStats& s);
  void write_text(const LatencySnapshot::Key& key, const LatencyStats& s, const LatencyRow& row);
  void write_errors_json(const LatencySnapshot& now);
  std::string container_cell(pid_t pid) {
    std::vector<std::string> c;
    where_.cells_of(pid, c);
    std::string s = c[0];
    for (size_t i = 1; i < c.size(); i++) s += (i == 1 ? " pod " : " namespace ") + c[i];
    return s;
  }

  const LatencyOptions& o_;
  WhereView where_{o_.scope};
  Writer out_;
  LatencySnapshot prev_;
  uint64_t now_ns_ = 0;  // the ts_ns of this print's lines
};

// Calls of one return code since the previous snapshot's row (none: all of them).
uint64_t ret_delta(const LatencyRow* old, int32_t ret, uint64_t n) {
  if (!old) return n;
  auto r = old->rets.find(ret);
  return n - (r == old->rets.end() ? 0 : r->second);
}

const LatencyRow* LatencyView::prev_row(const LatencySnapshot::Key& key) const {
  auto p = prev_.rows.find(key);
  return p == prev_.rows.end() ? nullptr : &p->second;
}

void LatencyView::write_json(const LatencySnapshot::Key& key, const LatencyStats& s) {
  auto [pid, api] = key;
  JsonLine j(out_.buf());
  j.record("latency", now_ns_);
  if (o_.per_process) where_.process(j, static_cast<pid_t>(pid), {});
  j.str("api", api_symbol(api)).str("layer", layer_name(api_desc(api).layer));
  unsigned first = kLatBuckets, last = 0;
  for (unsigned i = 0; i < kLatBuckets; i++)
    if (s.buckets[i]) first = std::min(first, i), last = i;
  j.begin_array("buckets");
  for (unsigned i = first; i <= last; i++)
    j.begin_object().num("le_ns", bucket_le(i)).num("count", s.buckets[i]).end_object();
  j.end_array();
  j.num("count", s.count());
  // The calls are counted in BPF by log2 bucket: a percentile is known to its bucket, not inside.
  for (auto [q, lo, hi] : {std::tuple{0.50, "p50_lo_ns", "p50_hi_ns"}, std::tuple{0.95, "p95_lo_ns", "p95_hi_ns"},
                           std::tuple{0.99, "p99_lo_ns", "p99_hi_ns"}}) {
    const BucketRange r = percentile_range(s.buckets, q, s.max_ns);
    j.num(lo, r.lo).num(hi, r.hi);
  }
  j.num("max_ns", s.max_ns).end();
}

void LatencyView::write_text(const LatencySnapshot::Key& key, const LatencyStats& s, const LatencyRow& row) {
  auto it = std::back_inserter(out_.buf());
  auto [pid, api] = key;
  std::string title = fmt::format("{} ({}){}", api_symbol(api), layer_name(api_desc(api).layer),
                                  o_.per_process ? fmt::format(" pid {}{} container {}", pid, comm_suffix(pid),
                                                               container_cell(static_cast<pid_t>(pid)))
                                                 : "");
  render_histogram(out_.buf(), title, s);
  fmt::format_to(it, "  return codes:\n");
  const LatencyRow* old = prev_row(key);
  for (auto& [ret, n] : row.rets)
    if (uint64_t d = ret_delta(old, ret, n)) fmt::format_to(it, "    {:<40} {}\n", latency_ret_name(api, ret), d);
  fmt::format_to(it, "\n");
}

void LatencyView::write_errors_json(const LatencySnapshot& now) {
  for (auto& [key, row] : now.rows) {
    auto [pid, api] = key;
    const LatencyRow* old = prev_row(key);
    for (auto& [ret, n] : row.rets) {
      uint64_t d = ret_delta(old, ret, n);
      if (!d) continue;
      JsonLine j(out_.buf());
      j.record("errors", now_ns_);
      if (o_.per_process) where_.process(j, static_cast<pid_t>(pid), {});
      j.str("api", api_symbol(api)).num("ret", ret).str("ret_name", latency_ret_name(api, ret)).num("count", d);
      j.end();
    }
  }
}

void LatencyView::print(const LatencySnapshot& now, bool final, const LatencyCollector::Stats* stats) {
  auto it = std::back_inserter(out_.buf());
  bool any = false;
  now_ns_ = realtime_ns();
  if (!o_.common.json && o_.interval_s > 0) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  for (auto& [key, row] : now.rows) {
    LatencyStats s;
    const LatencyRow* old = prev_row(key);
    for (unsigned b = 0; b < kLatBuckets; b++) s.buckets[b] = row.buckets[b] - (old ? old->buckets[b] : 0);
    if (s.count() == 0) continue;
    s.max_ns = row.max_ns;
    any = true;
    if (o_.common.json)
      write_json(key, s);
    else
      write_text(key, s, row);
  }
  if (o_.common.json) write_errors_json(now);
  if (!any && !o_.common.json && (final || o_.interval_s > 0)) fmt::format_to(it, "no calls of the selected APIs\n\n");
  if (stats && (stats->untimed_no_state || stats->uncounted_hist_full))
    fprintf(stderr, "gpuscope: %llu calls not timed (no per-thread state), %llu not counted (histogram map full)\n",
            (unsigned long long)stats->untimed_no_state, (unsigned long long)stats->uncounted_hist_full);
  prev_ = now;
  out_.flush();
}

void LatencyView::print_probes(const std::vector<LatencySiteCounts>& sites) {
  auto it = std::back_inserter(out_.buf());
  bool header = false;
  for (unsigned api = 0; api < sites.size(); api++) {
    const auto& c = sites[api];
    if (!c.entries) continue;
    const uint64_t timed = c.timed();
    if (o_.common.json) {
      JsonLine(out_.buf())
          .record("probes", realtime_ns())
          .str("api", api_symbol(api))
          .str("layer", layer_name(api_desc(api).layer))
          .num("entries", c.entries)
          .num("timed", timed)
          .num("nested", c.nested)
          .num("filtered", c.filtered)
          .num("unsampled", c.unsampled)
          .end();
    } else if (o_.common.verbose) {
      if (!header)
        fmt::format_to(it, "probe hits:\n  {:<32} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "API", "LAYER",
                       "ENTRIES", "TIMED", "NESTED", "FILTERED", "UNSAMPLED");
      header = true;
      fmt::format_to(it, "  {:<32} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12}\n", api_symbol(api),
                     layer_name(api_desc(api).layer), c.entries, timed, c.nested, c.filtered, c.unsampled);
    }
  }
  out_.flush();
}

int run_latency(const LatencyOptions& o) {
  std::vector<bool> apis = select_apis(o.apis, "all");
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  LatencyCollector latency(session, {apis, o.per_process, o.scope, o.launch_sample});
  LatencyView view(o);
  session.start();
  EventLoop loop(o.common.duration_s);
  session.watch(loop);
  if (o.interval_s > 0) loop.every(o.interval_s, [&] { view.print(latency.snapshot(), false, nullptr); });
  auto st = session.stats();
  fprintf(stderr, "gpuscope: timing %zu probes in %zu CUDA objects (%s); %s. Ctrl-C to end.\n", st.probes, st.objects,
          latency.session() ? fmt::format("uprobe sessions, 1 launch in {} timed", latency.launch_sample()).c_str()
                            : "entry and return probes",
          o.interval_s > 0 ? fmt::format("printing every {} s", o.interval_s).c_str() : "printing at the end");
  loop.run();
  session.detach();
  auto stats = latency.stats();
  LatencySnapshot last = latency.snapshot();
  view.print(last, true, &stats);
  view.print_probes(last.sites);
  return 0;
}

}  // namespace

void register_latency(CLI::App& app) {
  auto [cmd, o] = new_command<LatencyOptions>(
      app, "latency", "Histograms of CUDA API call latency and return-code counts, aggregated in BPF", run_latency);
  cmd->add_option("--api", o->apis,
                  "APIs to time (comma-separated; default cudaMalloc,cudaFree,cudaMemcpy,"
                  "cudaStreamSynchronize,cudaDeviceSynchronize,cuLaunchKernel,cuMemAlloc_v2)")
      ->delimiter(',');
  cmd->add_flag("--per-process", o->per_process, "One histogram per process");
  add_number(cmd, "--sample-launches", o->launch_sample,
             "Time one kernel launch in N (with uprobe sessions, kernel 6.12+; default 1: every launch)", "N", 1,
             65535);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default: once, at the end)", "seconds", 0.01,
             86400);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope latency -d 10                       # default APIs, host-wide, printed at the end\n"
      "  gpuscope latency --api cudaMalloc --interval 1 --per-process\n"
      "  gpuscope latency -p 1234 --json");
}
GPUSCOPE_COMMAND(register_latency, 20);
GPUSCOPE_NEEDS(latency, 20, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {});

}  // namespace gpuscope

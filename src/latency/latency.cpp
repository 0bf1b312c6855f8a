#include <bpf/bpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_set>

#include "common/events.h"
#include "core/bpf.h"
#include "core/cuda_errors.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/map_walk.h"
#include "core/uprobe_session.h"
#include "core/output.h"
#include "core/system.h"
#include "latency.skel.h"
#include "latency/histogram.h"
#include "latency/latency.h"
#include "latency/latency_cmd.h"

namespace gpuscope {

namespace {

struct SkelDeleter {
  void operator()(latency_bpf* s) const { latency_bpf__destroy(s); }
};

using Key = std::pair<uint32_t, unsigned>;  // (pid or 0, api row)

struct Snapshot {
  std::map<Key, Buckets> hist;
  std::map<Key, uint64_t> max;  // since start: BPF keeps one running maximum
  std::map<std::tuple<uint32_t, unsigned, int32_t>, uint64_t> rets;
};

class Latency {
 public:
  explicit Latency(const LatencyOptions& o) : o_(o), selected_(select_apis(o.apis, "all")) {}
  int run();

 private:
  void open_and_load(UprobeSession& session);
  Snapshot read() const;
  void print(bool final);

  const LatencyOptions& o_;
  std::vector<bool> selected_;
  std::unique_ptr<latency_bpf, SkelDeleter> skel_;
  Writer out_;
  Snapshot prev_;
};

void Latency::open_and_load(UprobeSession& session) {
  bool multi = open_and_load_uprobes(skel_, latency_bpf__open, latency_bpf__load, [&](latency_bpf* skel) {
    auto* ro = skel->rodata;
    ro->per_process = o_.per_process;
    set_comm_filter(ro, o_.comm);
    return std::vector<bpf_program*>{skel->progs.gs_lat_enter, skel->progs.gs_lat_exit};
  });
  session.add({{skel_->progs.gs_lat_enter, false, selected_}, {skel_->progs.gs_lat_exit, true, selected_}}, multi);
}

Snapshot Latency::read() const {
  Snapshot s;
  for_each_percpu_entry<gs_lat_key, gs_lat_stats>(bpf_map__fd(skel_->maps.stats),
                                                  [&](const gs_lat_key& key, auto& vals) {
                                                    auto& h = s.hist[{key.pid, key.api}];
                                                    auto& m = s.max[{key.pid, key.api}];
                                                    for (auto& v : vals) {
                                                      for (unsigned b = 0; b < kLatBuckets; b++) h[b] += v.buckets[b];
                                                      m = std::max<uint64_t>(m, v.max_ns);
                                                      if (v.ret_zero) s.rets[{key.pid, key.api, 0}] += v.ret_zero;
                                                    }
                                                  });
  for_each_percpu_entry<gs_lat_ret_key, uint64_t>(bpf_map__fd(skel_->maps.rets), [&](const gs_lat_ret_key& k, auto& v) {
    uint64_t n = 0;
    for (auto x : v) n += x;
    s.rets[{k.pid, k.api, k.ret}] += n;
  });
  return s;
}

// Processes that have exited since keep their histogram but lose their name.
std::string comm_suffix(pid_t pid) {
  std::string c = proc_comm(pid);
  return c.empty() ? "" : " (" + c + ")";
}

std::string ret_name(unsigned api, int32_t ret) {
  return api_desc(api).layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(ret) : cuda_driver_error_name(ret);
}

void Latency::print(bool final) {
  Snapshot now = read();
  auto it = std::back_inserter(out_.buf());
  bool any = false;
  if (!o_.json && o_.interval_s > 0) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  for (auto& [key, cum] : now.hist) {
    LatencyStats s;
    const Buckets* old = prev_.hist.count(key) ? &prev_.hist.at(key) : nullptr;
    for (unsigned b = 0; b < kLatBuckets; b++) s.buckets[b] = cum[b] - (old ? (*old)[b] : 0);
    if (s.count() == 0) continue;
    s.max_ns = now.max[key];
    any = true;
    auto [pid, api] = key;
    if (o_.json) {
      JsonLine j(out_.buf());
      j.str("type", "latency");
      if (o_.per_process) j.num("pid", pid);
      j.str("api", api_symbol(api)).str("layer", layer_name(api_desc(api).layer));
      unsigned first = kLatBuckets, last = 0;
      for (unsigned i = 0; i < kLatBuckets; i++)
        if (s.buckets[i]) first = std::min(first, i), last = i;
      j.begin_array("buckets");
      for (unsigned i = first; i <= last; i++)
        j.begin_object().num("le_ns", bucket_le(i)).num("count", s.buckets[i]).end_object();
      j.end_array();
      j.num("count", s.count())
          .num("p50_ns", static_cast<uint64_t>(percentile(s.buckets, 0.50, s.max_ns)))
          .num("p95_ns", static_cast<uint64_t>(percentile(s.buckets, 0.95, s.max_ns)))
          .num("p99_ns", static_cast<uint64_t>(percentile(s.buckets, 0.99, s.max_ns)))
          .num("max_ns", s.max_ns)
          .end();
    } else {
      std::string title = fmt::format("{} ({}){}", api_symbol(api), layer_name(api_desc(api).layer),
                                      o_.per_process ? fmt::format(" pid {}{}", pid, comm_suffix(pid)) : "");
      render_histogram(out_.buf(), title, s);
      fmt::format_to(it, "  return codes:\n");
      for (auto& [rk, n] : now.rets) {
        auto [rpid, rapi, ret] = rk;
        if (rpid != pid || rapi != api) continue;
        uint64_t d = n - (prev_.rets.count(rk) ? prev_.rets.at(rk) : 0);
        if (d) fmt::format_to(it, "    {:<40} {}\n", ret_name(api, ret), d);
      }
      fmt::format_to(it, "\n");
    }
  }
  if (o_.json) {
    for (auto& [rk, n] : now.rets) {
      uint64_t d = n - (prev_.rets.count(rk) ? prev_.rets.at(rk) : 0);
      if (!d) continue;
      auto [pid, api, ret] = rk;
      JsonLine j(out_.buf());
      j.str("type", "errors");
      if (o_.per_process) j.num("pid", pid);
      j.str("api", api_symbol(api)).num("ret", ret).str("ret_name", ret_name(api, ret)).num("count", d);
      j.end();
    }
  }
  if (!any && !o_.json && (final || o_.interval_s > 0)) fmt::format_to(it, "no calls of the selected APIs\n\n");
  if (final) {
    uint64_t lost_state = percpu_sum(bpf_map__fd(skel_->maps.drops), GS_LAT_DROP_STATE_FULL);
    uint64_t lost_hist = percpu_sum(bpf_map__fd(skel_->maps.drops), GS_LAT_DROP_HIST_FULL);
    if (lost_state || lost_hist)
      fprintf(stderr, "gpuscope: %llu calls not timed (no per-thread state), %llu not counted (histogram map full)\n",
              (unsigned long long)lost_state, (unsigned long long)lost_hist);
  }
  prev_ = std::move(now);
  out_.flush();
}

int Latency::run() {
  Scope scope{o_.pids, o_.comm, o_.libs};
  scope.validate();
  require_bpf_privileges();
  set_libbpf_verbose(o_.verbose);
  UprobeSession session(scope, o_.verbose);
  open_and_load(session);
  session.start();
  EventLoop loop(o_.duration_s);
  session.watch(loop);
  if (o_.interval_s > 0) loop.every(o_.interval_s, [this] { print(false); });
  auto st = session.stats();
  fprintf(stderr, "gpuscope: timing %zu probes in %zu CUDA objects; %s. Ctrl-C to end.\n", st.probes, st.objects,
          o_.interval_s > 0 ? fmt::format("printing every {} s", o_.interval_s).c_str() : "printing at the end");
  loop.run();
  session.detach();
  print(true);
  return 0;
}

}  // namespace

int run_latency(const LatencyOptions& opts) {
  Latency l(opts);
  return l.run();
}

}  // namespace gpuscope

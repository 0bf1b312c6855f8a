#include "latency/latency_collector.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/bpf.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/map_walk.h"
#include "latency.skel.h"
#include "latency/latency.h"

namespace gpuscope {

LatencyCollector::LatencyCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), hosted_(GS_API_COUNT, false), skel_(nullptr, latency_bpf__destroy) {
  if (cfg_.launch_sample == 0) cfg_.launch_sample = 1;
  const LaunchTimingHost* host = cfg_.per_process ? nullptr : cfg_.launch_host ? &*cfg_.launch_host : nullptr;
  SessionLoad ld = open_and_load_with_session(
      skel_, latency_bpf__open, latency_bpf__load,
      [&](latency_bpf* skel) {
        auto* ro = skel->rodata;
        ro->lat_per_process = cfg_.per_process;
        ro->launch_sample = cfg_.launch_sample;
        apply_scope(skel, cfg_.scope);
        if (host) {
          bpf_map* m;
          bpf_object__for_each_map(m, skel->obj) {
            auto it = host->maps.find(bpf_map__name(m));
            if (it != host->maps.end() && bpf_map__reuse_fd(m, it->second) != 0)
              throw std::runtime_error(std::string("cannot share latency's map ") + it->first + ": " + strerror(errno));
          }
        }
        return SessionPrograms{{skel->progs.gs_lat_enter, skel->progs.gs_lat_exit}, {}};
      },
      [](latency_bpf* skel) { return skel->progs.gs_lat_session; });
  session_ = ld.session;
  std::vector<bool> own = cfg_.apis;
  // The host's programs are sessions: where this object's session did not load, neither would theirs.
  if (host && session_) {
    for (unsigned r = 0; r < GS_API_COUNT && r < own.size(); r++)
      if (own[r] && r < host->rows.size() && host->rows[r]) {
        hosted_[r] = true;
        own[r] = false;
      }
    host->time(hosted_, cfg_.launch_sample);
  }
  if (session_)
    session.add({{skel_->progs.gs_lat_session, false, own, true}}, true);
  else
    session.add({{skel_->progs.gs_lat_enter, false, own}, {skel_->progs.gs_lat_exit, true, own}}, ld.multi);
}

LatencyCollector::~LatencyCollector() = default;

LatencySnapshot LatencyCollector::snapshot() const {
  LatencySnapshot s;
  for_each_percpu_entry<gs_lat_key, gs_lat_stats>(bpf_map__fd(skel_->maps.lat_stats),
                                                  [&](const gs_lat_key& key, auto& vals) {
                                                    auto& row = s.rows[{key.pid, key.api}];
                                                    for (auto& v : vals) {
                                                      for (unsigned b = 0; b < kLatBuckets; b++)
                                                        row.buckets[b] += v.buckets[b];
                                                      row.max_ns = std::max<uint64_t>(row.max_ns, v.max_ns);
                                                      if (v.ret_zero) row.rets[0] += v.ret_zero;
                                                    }
                                                  });
  for_each_percpu_entry<gs_lat_ret_key, uint64_t>(bpf_map__fd(skel_->maps.lat_rets),
                                                  [&](const gs_lat_ret_key& k, auto& v) {
                                                    uint64_t n = 0;
                                                    for (auto x : v) n += x;
                                                    s.rows[{k.pid, k.api}].rets[k.ret] += n;
                                                  });
  s.sites = sites();
  s.launch_sample = launch_sample();
  return s;
}

LatencyCollector::Stats LatencyCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.lat_drops);
  return {percpu_sum(fd, GS_LAT_DROP_STATE_FULL), percpu_sum(fd, GS_LAT_DROP_HIST_FULL)};
}

std::vector<LatencySiteCounts> LatencyCollector::sites() const {
  std::vector<LatencySiteCounts> out(GS_API_COUNT);
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<gs_lat_site> v(static_cast<size_t>(ncpu));
  int fd = bpf_map__fd(skel_->maps.lat_sites);
  for (uint32_t api = 0; api < GS_API_COUNT; api++) {
    if (bpf_map_lookup_elem(fd, &api, v.data()) != 0) continue;
    for (auto& c : v) {
      out[api].entries += c.entries;
      out[api].nested += c.nested;
      out[api].filtered += c.filtered;
      out[api].unsampled += c.unsampled;
    }
  }
  return out;
}

std::vector<bool> always_on_latency_rows() {
  return rows_where([](const gs_api_desc& d) {
    if (!(d.roles & GS_ROLE_CALL)) return false;
    if (d.layer == GS_LAYER_RUNTIME && (d.roles & GS_ROLE_LAUNCH)) return false;
    if (d.ctx_op == GS_CTX_RT_SET_DEVICE || d.ctx_op == GS_CTX_SET_CURRENT || d.ctx_op == GS_CTX_PUSH ||
        d.ctx_op == GS_CTX_POP)
      return false;
    return d.out != GS_OUT_DEVICE;  // cudaGetDevice
  });
}

std::string latency_ret_name(unsigned api, int32_t ret) {
  return api_desc(api).layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(ret) : cuda_driver_error_name(ret);
}

}  // namespace gpuscope

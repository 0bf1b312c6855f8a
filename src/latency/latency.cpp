#include "latency/latency_collector.h"

#include <bpf/bpf.h>

#include <algorithm>

#include "core/bpf.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/map_walk.h"
#include "latency.skel.h"
#include "latency/latency.h"

namespace gpuscope {

LatencyCollector::LatencyCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), skel_(nullptr, latency_bpf__destroy) {
  bool multi = open_and_load_uprobes(skel_, latency_bpf__open, latency_bpf__load, [&](latency_bpf* skel) {
    auto* ro = skel->rodata;
    ro->per_process = cfg_.per_process;
    set_comm_filter(ro, cfg_.comm);
    return std::vector<bpf_program*>{skel->progs.gs_lat_enter, skel->progs.gs_lat_exit};
  });
  session.add({{skel_->progs.gs_lat_enter, false, cfg_.apis}, {skel_->progs.gs_lat_exit, true, cfg_.apis}}, multi);
}

LatencyCollector::~LatencyCollector() = default;

LatencySnapshot LatencyCollector::snapshot() const {
  LatencySnapshot s;
  for_each_percpu_entry<gs_lat_key, gs_lat_stats>(bpf_map__fd(skel_->maps.stats),
                                                  [&](const gs_lat_key& key, auto& vals) {
                                                    auto& row = s.rows[{key.pid, key.api}];
                                                    for (auto& v : vals) {
                                                      for (unsigned b = 0; b < kLatBuckets; b++)
                                                        row.buckets[b] += v.buckets[b];
                                                      row.max_ns = std::max<uint64_t>(row.max_ns, v.max_ns);
                                                      if (v.ret_zero) row.rets[0] += v.ret_zero;
                                                    }
                                                  });
  for_each_percpu_entry<gs_lat_ret_key, uint64_t>(bpf_map__fd(skel_->maps.rets), [&](const gs_lat_ret_key& k, auto& v) {
    uint64_t n = 0;
    for (auto x : v) n += x;
    s.rows[{k.pid, k.api}].rets[k.ret] += n;
  });
  return s;
}

LatencyCollector::Stats LatencyCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.drops);
  return {percpu_sum(fd, GS_LAT_DROP_STATE_FULL), percpu_sum(fd, GS_LAT_DROP_HIST_FULL)};
}

std::string latency_ret_name(unsigned api, int32_t ret) {
  return api_desc(api).layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(ret) : cuda_driver_error_name(ret);
}

}  // namespace gpuscope

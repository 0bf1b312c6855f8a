#pragma once
// One NCCL record's JSON fields, as `gpuscope nccl --json` writes each line and the agent's
// /api/nccl each object: one writer, so that the two keep the same names.
#include "core/output.h"
#include "core/where.h"
#include "nccl/nccl_collector.h"

namespace gpuscope {

// nccl-tests' algbw (data size over time, GB/s = bytes per ns) and busbw, from the calls' time.
struct NcclBandwidth {
  double alg = 0, bus = 0;
  bool known = false;
};
inline NcclBandwidth nccl_bandwidth(const NcclOpRow& r) {
  NcclBandwidth b;
  if (r.op == GS_NCCL_GROUP_START || r.op == GS_NCCL_GROUP_END || r.call_ns == 0 || r.rank.nranks <= 0) return b;
  b.alg = static_cast<double>(r.bytes) * nccl_algbw_size_factor(r.op, r.rank.nranks) / static_cast<double>(r.call_ns);
  b.bus = b.alg * nccl_busbw_factor(r.op, r.rank.nranks);
  b.known = true;
  return b;
}

// Its type and ts_ns, the process's fields and the communicator's; the caller adds the record's
// own and closes it.
inline void put_nccl_head(JsonLine& j, WhereView& where, std::string_view type, uint64_t ts_ns, const NcclRank& r) {
  j.record(type, ts_ns);
  where.process(j, r.pid, r.process, r.cgroup_id);
  j.str("comm_id", r.comm_id ? nccl_comm_id_str(r.comm_id) : "")
      .num("rank", r.rank)
      .num("nranks", r.nranks)
      .num("device", r.device)
      .hex("handle", r.handle);
}

inline void put_nccl_row(JsonLine& j, const NcclOpRow& r) {
  const NcclBandwidth b = nccl_bandwidth(r);
  j.str("op", nccl_op_name(r.op)).num("calls", r.calls).num("bytes", r.bytes).num("grouped", r.grouped);
  j.num("call_ns", r.call_ns);
  if (b.known)
    j.real("algbw_gbps", b.alg, 3).real("busbw_gbps", b.bus, 3);
  else
    j.null("algbw_gbps").null("busbw_gbps");
  j.begin_object("errors");
  for (auto& [ret, n] : r.errors) j.num(nccl_result_name(ret), n);
  j.end_object().boolean("finalized", r.rank.finalized);
}

inline void put_nccl_straggler(JsonLine& j, const NcclStraggler& st) {
  j.num("matched", st.matched)
      .num("lag_p50_ns", st.lag_p50_ns)
      .num("lag_p95_ns", st.lag_p95_ns)
      .num("lag_max_ns", st.lag_max_ns)
      .num("last_arrivals", st.last_arrivals)
      .boolean("slowest", st.slowest);
  if (st.before_count)
    j.num("before_ns", st.before_wall_ns / st.before_count).num("before_cpu_ns", st.before_cpu_ns / st.before_count);
  else
    j.null("before_ns").null("before_cpu_ns");
}

inline void put_nccl_error(JsonLine& j, int32_t error) {
  j.num("error", error).str("error_name", nccl_result_name(error));
}

}  // namespace gpuscope

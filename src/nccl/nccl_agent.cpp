// NCCL in the agent: per communicator id, rank and op the calls, bytes and call time, and each
// local rank's arrival lag behind the first rank on this host; ranks on other hosts join by the
// communicator id in Prometheus (deploy/prometheus/rules.yml). /api/nccl: the same records as
// `gpuscope nccl --json`, summed since the agent first saw each rank.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <deque>

#include "cmd/agent/registry.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/histogram.h"
#include "core/output.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "core/where.h"
#include "nccl/nccl_collector.h"
#include "nccl/nccl_json.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
// Call time and lag buckets: everything up to 1.023 µs in the first, up to about 17 s in the last.
constexpr unsigned kFirstBucket = 9, kLastBucket = 33;
// Rank-op and lag series at most (each a histogram of 27 samples beside its counters): a host's
// ranks times their communicators times a dozen ops stay far below.
constexpr size_t kMaxSeries = 4096;
constexpr size_t kMaxErrors = 100;  // async and communicator errors kept for /api/nccl

const std::vector<double>& bounds() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (unsigned i = kFirstBucket; i <= kLastBucket; i++) v.push_back(static_cast<double>(bucket_le(i)) / 1e9);
    return v;
  }();
  return b;
}

std::vector<uint64_t> bucket_counts(const Buckets& b) {
  std::vector<uint64_t> c(bounds().size() + 1, 0);
  for (unsigned i = 0; i < kLatBuckets; i++)
    if (b[i]) c[std::min<size_t>(i <= kFirstBucket ? 0 : i - kFirstBucket, bounds().size())] += b[i];
  return c;
}

// The lag as a histogram rather than a gauge of each interval's p50 and max: a gauge shows only
// the intervals a scrape happens to read and cannot be summed or averaged across hosts and
// windows, where _sum/_count's rate gives the mean lag over any window (the recording rule).
struct LagTotals {
  uint64_t matched = 0, last = 0, sum_ns = 0;
  uint64_t before_wall_ns = 0, before_cpu_ns = 0, before_count = 0;
  Buckets buckets{};
  Percentiles pct;
};

struct RankSeries {
  NcclRank info;  // as last seen
  uint64_t proc_id = 0;
  std::map<uint32_t, NcclOpRow> ops;  // summed
  std::unique_ptr<LagTotals> lag;
  uint64_t ts_ns = 0;  // last changed
  bool ended = false;
  uint64_t published_seq = 0;  // once ended: the first publication that held its final values
};

class NcclAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "nccl"; }
  bool uses_session() const override { return true; }

  void add_flags(CLI::App* cmd) override {
    cmd->add_option("--nccl-lib", lib_,
                    "The nccl collector probes this libnccl.so.2 too, before any process maps it (copies processes "
                    "map are found)");
  }

  void check(const AgentOptions&) const override {
    if (!lib_.empty() && access(lib_.c_str(), R_OK) != 0)
      throw UsageError("--nccl-lib " + lib_ + ": " + strerror(errno));
  }

  void load(AgentHost& host) override {
    host_ = &host;
    where_ = std::make_unique<WhereView>(host.options.scope);
    collector_ = std::make_unique<NcclCollector>(*host.session, NcclCollector::Config{host.options.scope});
  }

  void start(AgentHost& host, EventLoop& loop) override {
    if (!lib_.empty()) {
      std::string err;
      if (!collector_->attach_library(lib_, &err)) host.log("nccl", "--nccl-lib " + lib_ + ": " + err);
    }
    if (host.options.scope.pids.empty()) collector_->attach_system_libraries();
    collector_->watch(loop);
  }

  void take() override {
    for (auto& a : collector_->take_attached()) {
      if (a.missing.empty()) continue;
      std::string names;
      for (auto& m : a.missing) names += (names.empty() ? "" : ", ") + m;
      host_->log("nccl", (a.path.empty() ? "the libnccl mapped by pid " + std::to_string(a.pid) : a.path) + " has no " +
                             names + " (an older NCCL): the rest is probed");
    }
    add(collector_->take());
    for (pid_t pid : collector_->nccl_pids()) {
      const auto p = static_cast<uint32_t>(pid);
      if (process_running(pid)) host_->procs.live(p, host_->procs.running(p) ? "" : proc_comm(pid)).seen = true;
    }
  }

  void settle(const RefreshSeq& r) override {
    for (auto it = ranks_.begin(); it != ranks_.end();) {
      if (it->second.ended && it->second.published_seq && r.scraped >= it->second.published_seq) {
        it = erase(it);
        continue;
      }
      if (it->second.ended && !it->second.published_seq) it->second.published_seq = r.seq;
      ++it;
    }
  }

  void fold(const ProcEntry& e) override {
    for (auto it = ranks_.begin(); it != ranks_.end();) it = it->second.proc_id == e.id ? erase(it) : std::next(it);
  }

  void metrics(PromSet& m) override {
    m.family("gpuscope_nccl_calls_total", T::counter,
             "NCCL calls per communicator id (equal on every rank, on every host), rank, op and process");
    m.family("gpuscope_nccl_bytes_total", T::counter,
             "Bytes of NCCL calls (count x element size) per communicator id, rank, op and process");
    m.family("gpuscope_nccl_call_seconds", T::histogram,
             "Time from entering an NCCL call to its return, per communicator id, rank, op and process");
    m.family("gpuscope_nccl_arrival_lag_seconds", T::histogram,
             "Per collective matched by its sequence number on the communicator: how long after the first rank on "
             "this host this rank entered it, per communicator id and rank (ranks alone on their host: none)");
    m.family("gpuscope_nccl_last_arrivals_total", T::counter,
             "Collectives matched on this host at which this rank arrived last, per communicator id and rank");
    std::map<uint64_t, const ProcEntry*> procs;
    host_->procs.each([&](const ProcEntry& e) { procs[e.id] = &e; });
    for (auto& [key, rs] : ranks_) {
      auto p = procs.find(rs.proc_id);
      if (p == procs.end()) continue;
      PromLabels l{{"comm_id", nccl_comm_id_str(rs.info.comm_id)},
                   {"rank", std::to_string(rs.info.rank)},
                   {"nranks", std::to_string(rs.info.nranks)}};
      for (auto& kv : p->second->prom_labels()) l.push_back(kv);
      for (auto& [op, row] : rs.ops) {
        PromLabels o{{"op", nccl_op_name(op)}};
        m.add("gpuscope_nccl_calls_total", l, o, static_cast<double>(row.calls));
        m.add("gpuscope_nccl_bytes_total", l, o, static_cast<double>(row.bytes));
        PromLabels lo = l;
        lo.push_back(o[0]);
        m.histogram("gpuscope_nccl_call_seconds", lo, bounds(), bucket_counts(row.call_buckets),
                    static_cast<double>(row.call_ns) / 1e9);
      }
      if (rs.lag) {
        m.histogram("gpuscope_nccl_arrival_lag_seconds", l, bounds(), bucket_counts(rs.lag->buckets),
                    static_cast<double>(rs.lag->sum_ns) / 1e9);
        m.add("gpuscope_nccl_last_arrivals_total", l, static_cast<double>(rs.lag->last));
      }
    }
  }

  std::vector<std::string> paths() const override { return {"/api/nccl"}; }

  void endpoints(std::map<std::string, Endpoint>& out) override {
    // The rank that arrived last most often, per communicator, over everything seen.
    std::map<uint64_t, const RankSeries*> slowest;
    for (auto& [_, rs] : ranks_) {
      if (!rs.lag || !rs.lag->last) continue;
      const RankSeries*& b = slowest[rs.info.comm_id];
      if (!b || rs.lag->last > b->lag->last ||
          (rs.lag->last == b->lag->last && rs.lag->pct.at(0.5) > b->lag->pct.at(0.5)))
        b = &rs;
    }
    fmt::memory_buffer buf;
    JsonLine j(buf);
    j.begin_array("records");
    for (auto& [_, rs] : ranks_) {
      for (auto& [op, row] : rs.ops) {
        NcclOpRow r = row;
        r.rank = rs.info;
        j.begin_object();
        put_nccl_head(j, *where_, "collective", rs.ts_ns, r.rank);
        put_nccl_row(j, r);
        j.end_object();
      }
      if (rs.lag) {
        const LagTotals& t = *rs.lag;
        NcclStraggler st;
        st.rank = rs.info;
        st.matched = t.matched;
        st.lag_p50_ns = t.pct.at(0.50);
        st.lag_p95_ns = t.pct.at(0.95);
        st.lag_max_ns = t.pct.max();
        st.last_arrivals = t.last;
        st.slowest = slowest[rs.info.comm_id] == &rs;
        st.before_wall_ns = t.before_wall_ns;
        st.before_cpu_ns = t.before_cpu_ns;
        st.before_count = t.before_count;
        j.begin_object();
        put_nccl_head(j, *where_, "straggler", rs.ts_ns, rs.info);
        put_nccl_straggler(j, st);
        j.end_object();
      }
      if (rs.ended) {
        j.begin_object();
        put_nccl_head(j, *where_, "comm_end", rs.ts_ns, rs.info);
        j.end_object();
      }
    }
    for (auto& e : errors_) {
      j.begin_object();
      put_nccl_head(j, *where_, e.type, e.ts_ns, e.rank);
      if (e.op) j.str("op", nccl_op_name(*e.op));
      put_nccl_error(j, e.error);
      j.end_object();
    }
    j.end_array();
    NcclCollector::Stats s = collector_->stats();
    j.num("events", s.delivered).num("unmatched", s.unmatched).num("library_files", collector_->library_files());
    j.num("series_dropped", dropped_).end();
    out["/api/nccl"] = {std::string(buf.data(), buf.size())};
  }

  void lost(LostCounts& out) const override {
    NcclCollector::Stats s = collector_->stats();
    out["ring_buffer_full"] = s.lost_ringbuf;
    out["no_thread_state"] = s.lost_state;
    out["comm_map_full"] = s.lost_comms;
    out["series_full"] = dropped_;
  }

  void detach() override { collector_->detach(); }
  void drain() override { collector_->drain(); }

 private:
  using Key = std::tuple<uint64_t, uint64_t, int>;  // process life, communicator id, rank
  struct ErrorRecord {
    const char* type;
    uint64_t ts_ns;
    NcclRank rank;
    std::optional<uint32_t> op;
    int32_t error;
  };

  std::map<Key, RankSeries>::iterator erase(std::map<Key, RankSeries>::iterator it) {
    series_ -= it->second.ops.size() + (it->second.lag ? 1 : 0);
    return ranks_.erase(it);
  }

  RankSeries& series_of(const NcclRank& r, uint64_t now) {
    ProcEntry& p = host_->procs.any(static_cast<uint32_t>(r.pid), r.process);
    RankSeries& rs = ranks_[{p.id, r.comm_id, r.rank}];
    rs.proc_id = p.id;
    rs.info = r;
    rs.ts_ns = now;
    if (!r.ended) rs.ended = false, rs.published_seq = 0;  // the same key in use again
    return rs;
  }

  bool room(size_t n = 1) {
    if (series_ + n <= kMaxSeries) return true;
    dropped_++;
    return false;
  }

  void add(const NcclSnapshot& s) {
    const uint64_t now = realtime_ns();
    for (auto& r : s.rows) {
      RankSeries& rs = series_of(r.rank, now);
      auto it = rs.ops.find(r.op);
      if (it == rs.ops.end()) {
        if (!room()) continue;
        series_++;
        it = rs.ops.emplace(r.op, NcclOpRow{}).first;
        it->second.op = r.op;
      }
      NcclOpRow& t = it->second;
      t.calls += r.calls;
      t.bytes += r.bytes;
      t.call_ns += r.call_ns;
      t.grouped += r.grouped;
      for (unsigned b = 0; b < kLatBuckets; b++) t.call_buckets[b] += r.call_buckets[b];
      for (auto& [ret, n] : r.errors) t.errors[ret] += n;
    }
    for (auto& st : s.stragglers) {
      RankSeries& rs = series_of(st.rank, now);
      if (!rs.lag) {
        if (!room()) continue;
        series_++;
        rs.lag = std::make_unique<LagTotals>();
      }
      LagTotals& t = *rs.lag;
      t.matched += st.matched;
      t.last += st.last_arrivals;
      t.sum_ns += st.lag_sum_ns;
      t.before_wall_ns += st.before_wall_ns;
      t.before_cpu_ns += st.before_cpu_ns;
      t.before_count += st.before_count;
      for (uint64_t v : st.lags_ns) {
        t.buckets[bucket_of(v)]++;
        t.pct.add(v);
      }
    }
    for (auto& r : s.ended) {
      auto it = ranks_.find({host_->procs.any(static_cast<uint32_t>(r.pid), r.process).id, r.comm_id, r.rank});
      if (it == ranks_.end()) continue;  // no calls: no series
      it->second.info = r;
      it->second.ended = true;
      it->second.ts_ns = now;
    }
    for (auto& a : s.async_errors) errors_.push_back({"async_error", now, a.rank, std::nullopt, a.error});
    for (auto& c : s.comm_errors) errors_.push_back({"comm_error", now, c.rank, c.op, c.error});
    while (errors_.size() > kMaxErrors) errors_.pop_front();
  }

  std::string lib_;
  AgentHost* host_ = nullptr;
  std::unique_ptr<WhereView> where_;
  std::unique_ptr<NcclCollector> collector_;
  std::map<Key, RankSeries> ranks_;
  std::deque<ErrorRecord> errors_;
  size_t series_ = 0;
  uint64_t dropped_ = 0;  // rank-op and lag series not made past kMaxSeries (each interval's rows)
};

}  // namespace

std::unique_ptr<AgentCollector> make_nccl_collector() { return std::make_unique<NcclAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_nccl_collector, 75);

}  // namespace gpuscope

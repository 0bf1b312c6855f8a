// gpuscope nccl: every interval, per communicator, rank and op the calls, bytes, bandwidths and
// call time, and the straggler view (table or JSON lines).
#include <unistd.h>

#include <cstdio>
#include <set>

#include "core/cli.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "nccl/nccl_collector.h"
#include "nccl/nccl_json.h"

namespace gpuscope {

namespace {

struct NcclOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 1;
  std::string comm;  // a communicator id, as shown
  int rank = -1;
  std::string nccl_lib;
};

std::string rank_cell(int r) { return r < 0 ? "?" : std::to_string(r); }
std::string id_cell(uint64_t id) { return id ? nccl_comm_id_str(id) : "?"; }

std::string duration_cell(uint64_t ns) {
  if (ns >= 1'000'000'000) return fmt::format("{:.2f}s", ns / 1e9);
  if (ns >= 1'000'000) return fmt::format("{:.2f}ms", ns / 1e6);
  if (ns >= 1'000) return fmt::format("{:.1f}us", ns / 1e3);
  return fmt::format("{}ns", ns);
}

class NcclView {
 public:
  explicit NcclView(const NcclOptions& o, uint64_t comm) : o_(o), comm_(comm) {}
  void print(const NcclSnapshot& s);
  void attached(const NcclCollector::Attached& a);
  void summary(const NcclCollector::Stats& st, size_t files);
  // Says once that the --communicator or --rank asked for has not been seen (yet).
  void check_filters();

 private:
  bool wanted(const NcclRank& r) const {
    return (!o_.comm.size() || r.comm_id == comm_) && (o_.rank < 0 || r.rank == o_.rank);
  }
  const NcclOptions& o_;
  uint64_t comm_;
  WhereView where_{o_.scope};
  Writer out_;
  std::set<uint64_t> comms_seen_;
  std::set<int> ranks_seen_;
  bool filters_checked_ = false;
  Table rows_ = where_.table({{"COMM", -16},
                              {"RANK", 4},
                              {"NRANKS", 6},
                              {"PID", 7},
                              {"OP", -17},
                              {"CALLS", 7},
                              {"BYTES", 12},
                              {"ALGBW", 9},
                              {"BUSBW", 9},
                              {"CPU/CALL", 9}},
                             10);
  Table lags_ = where_.table({{"COMM", -16},
                              {"RANK", 4},
                              {"PID", 7},
                              {"MATCHED", 7},
                              {"LAG-P50", 9},
                              {"LAG-P95", 9},
                              {"LAG-MAX", 9},
                              {"LAST", 5},
                              {"LAST-MOST-OFTEN", -15},
                              {"BEFORE", 9},
                              {"BEFORE-CPU", 10}},
                             11);
};

void NcclView::attached(const NcclCollector::Attached& a) {
  std::string where = a.path.empty() ? fmt::format("the libnccl mapped by pid {}", a.pid) : a.path;
  if (a.missing.empty()) {
    if (o_.common.verbose) fprintf(stderr, "gpuscope: probing %s\n", where.c_str());
    return;
  }
  std::string names;
  for (auto& m : a.missing) names += (names.empty() ? "" : ", ") + m;
  fprintf(stderr, "gpuscope: %s has no %s (an older NCCL): the rest is probed\n", where.c_str(), names.c_str());
}

void NcclView::check_filters() {
  if (filters_checked_) return;
  filters_checked_ = true;
  if (!o_.comm.empty() && !comms_seen_.count(comm_))
    fprintf(stderr, "gpuscope: communicator %s not seen yet; still watching for it\n", nccl_comm_id_str(comm_).c_str());
  if (o_.rank >= 0 && !ranks_seen_.count(o_.rank))
    fprintf(stderr, "gpuscope: rank %d not seen yet; still watching for it\n", o_.rank);
}

void NcclView::print(const NcclSnapshot& s) {
  const uint64_t now = realtime_ns();
  for (auto& r : s.rows) comms_seen_.insert(r.rank.comm_id), ranks_seen_.insert(r.rank.rank);
  auto it = std::back_inserter(out_.buf());
  if (o_.common.json) {
    for (auto& r : s.rows) {
      if (!wanted(r.rank)) continue;
      JsonLine j(out_.buf());
      put_nccl_head(j, where_, "collective", now, r.rank);
      put_nccl_row(j, r);
      j.end();
    }
    for (auto& st : s.stragglers) {
      if (!wanted(st.rank)) continue;
      JsonLine j(out_.buf());
      put_nccl_head(j, where_, "straggler", now, st.rank);
      put_nccl_straggler(j, st);
      j.end();
    }
    for (auto& a : s.async_errors) {
      if (!wanted(a.rank)) continue;
      JsonLine j(out_.buf());
      put_nccl_head(j, where_, "async_error", now, a.rank);
      put_nccl_error(j, a.error);
      j.end();
    }
    for (auto& c : s.comm_errors) {
      if (!wanted(c.rank)) continue;
      JsonLine j(out_.buf());
      put_nccl_head(j, where_, "comm_error", now, c.rank);
      j.str("op", nccl_op_name(c.op));
      put_nccl_error(j, c.error);
      j.end();
    }
    for (auto& r : s.ended) {
      if (!wanted(r)) continue;
      JsonLine j(out_.buf());
      put_nccl_head(j, where_, "comm_end", now, r);
      j.end();
    }
  } else {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
    bool any = false;
    for (auto& r : s.rows) {
      if (!wanted(r.rank)) continue;
      if (!any) rows_.header(out_.buf());
      where_.of(r.rank.pid, r.rank.cgroup_id);  // kept for row(): the process may have gone
      any = true;
      const NcclBandwidth b = nccl_bandwidth(r);
      rows_.row(out_.buf(),
                where_.row({id_cell(r.rank.comm_id), rank_cell(r.rank.rank), rank_cell(r.rank.nranks),
                            std::to_string(r.rank.pid), nccl_op_name(r.op), std::to_string(r.calls),
                            std::to_string(r.bytes), b.known ? fmt::format("{:.2f}", b.alg) : "-",
                            b.known ? fmt::format("{:.2f}", b.bus) : "-", duration_cell(r.call_ns / r.calls)},
                           10, r.rank.pid));
    }
    if (!any) fmt::format_to(it, "no NCCL calls\n");
    bool header = false;
    for (auto& st : s.stragglers) {
      if (!wanted(st.rank)) continue;
      if (!header) {
        fmt::format_to(it, "arrival lag behind each collective's first rank (ranks on this host):\n");
        lags_.header(out_.buf());
      }
      header = true;
      where_.of(st.rank.pid, st.rank.cgroup_id);
      const bool before = st.slowest && st.before_count;
      lags_.row(out_.buf(),
                where_.row({id_cell(st.rank.comm_id), rank_cell(st.rank.rank), std::to_string(st.rank.pid),
                            std::to_string(st.matched), duration_cell(st.lag_p50_ns), duration_cell(st.lag_p95_ns),
                            duration_cell(st.lag_max_ns), std::to_string(st.last_arrivals), st.slowest ? "yes" : "",
                            before ? duration_cell(st.before_wall_ns / st.before_count) : "",
                            before ? duration_cell(st.before_cpu_ns / st.before_count) : ""},
                           11, st.rank.pid));
    }
    for (auto& a : s.async_errors)
      if (wanted(a.rank))
        fmt::format_to(it, "async error: comm {} rank {} pid {}: {}\n", id_cell(a.rank.comm_id), rank_cell(a.rank.rank),
                       a.rank.pid, nccl_result_name(a.error));
    for (auto& c : s.comm_errors)
      if (wanted(c.rank))
        fmt::format_to(it, "failed: {} pid {} comm {} rank {}: {}\n", nccl_op_name(c.op), c.rank.pid,
                       id_cell(c.rank.comm_id), rank_cell(c.rank.rank), nccl_result_name(c.error));
    for (auto& r : s.ended)
      if (wanted(r))
        fmt::format_to(it, "ended: comm {} rank {} pid {}\n", id_cell(r.comm_id), rank_cell(r.rank), r.pid);
    fmt::format_to(it, "\n");
  }
  out_.flush();
}

void NcclView::summary(const NcclCollector::Stats& st, size_t files) {
  if (o_.common.json) {
    JsonLine(out_.buf())
        .record("summary", realtime_ns())
        .num("events", st.delivered)
        .num("lost_ringbuf_full", st.lost_ringbuf)
        .num("lost_thread_state", st.lost_state)
        .num("unsequenced_comm_map_full", st.lost_comms)
        .num("unmatched", st.unmatched)
        .num("library_files", files)
        .end();
    out_.flush();
  } else if (st.lost_ringbuf || st.lost_state || st.lost_comms) {
    fprintf(stderr,
            "gpuscope: %llu NCCL calls lost (ring buffer full), %llu not seen (no thread state), %llu "
            "without a sequence number (communicator map full)\n",
            (unsigned long long)st.lost_ringbuf, (unsigned long long)st.lost_state, (unsigned long long)st.lost_comms);
  }
}

int run_nccl(const NcclOptions& o) {
  uint64_t comm = 0;
  if (!o.comm.empty() && !nccl_parse_comm_id(o.comm, &comm))
    throw UsageError("--communicator: '" + o.comm +
                     "' is not a communicator id (1 to 16 hex digits, as gpuscope nccl shows)");
  if (!o.nccl_lib.empty() && access(o.nccl_lib.c_str(), R_OK) != 0)
    throw UsageError("--nccl-lib " + o.nccl_lib + ": " + strerror(errno));
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  NcclCollector nccl(session, {o.scope});
  NcclView view(o, comm);
  session.start();
  if (!o.nccl_lib.empty()) {
    std::string err;
    if (!nccl.attach_library(o.nccl_lib, &err)) throw UsageError("--nccl-lib " + o.nccl_lib + ": " + err);
  }
  if (o.scope.pids.empty()) {
    nccl.attach_system_libraries();
  } else {
    for (pid_t pid : o.scope.pids)
      if (!nccl.nccl_pids().count(pid)) throw UsageError("pid " + std::to_string(pid) + " maps no libnccl.so.2");
  }
  for (auto& a : nccl.take_attached()) view.attached(a);
  EventLoop loop(o.common.duration_s);
  session.watch(loop);
  nccl.watch(loop);
  loop.every(o.interval_s, [&] {
    for (auto& a : nccl.take_attached()) view.attached(a);
    view.print(nccl.take());
    view.check_filters();
  });
  fprintf(stderr,
          "gpuscope: watching NCCL through %zu libnccl files (and every copy processes map); printing every %g s. "
          "Ctrl-C to end.\n",
          nccl.library_files(), o.interval_s);
  loop.run();
  const size_t files = nccl.library_files();
  session.detach();
  nccl.detach();
  view.print(nccl.take());
  view.summary(nccl.stats(), files);
  return 0;
}

}  // namespace

void register_nccl(CLI::App& app) {
  auto [cmd, o] = new_command<NcclOptions>(
      app, "nccl", "NCCL collectives per communicator, rank and op, and the rank the others wait for", run_nccl, false);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  cmd->add_option("--communicator", o->comm, "Only this communicator (its id as shown: 16 hex digits)")
      ->type_name("ID");
  add_number(cmd, "--rank", o->rank, "Only this rank", "rank", 0, 1 << 24);
  cmd->add_option("--nccl-lib", o->nccl_lib,
                  "Probe this libnccl.so.2 too, before any process maps it (copies processes map are found)");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope nccl                          # every rank on this host, every second\n"
      "  gpuscope nccl --communicator 3f2a9c0d11e4b7a2 --json\n"
      "  gpuscope nccl -p 1234 --interval 5");
}
GPUSCOPE_COMMAND(register_nccl, 67);
GPUSCOPE_NEEDS(nccl, 120, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {"tp_btf"});

}  // namespace gpuscope

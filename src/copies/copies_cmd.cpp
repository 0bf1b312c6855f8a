// gpuscope copies: the command and its views (a table per interval, JSON lines).
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <utility>

#include "copies/copies_collector.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"

namespace gpuscope {

namespace {

struct CopiesOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 1;
};

// Where the container columns go: after PID and COMM.
constexpr size_t kWhereAt = 2;

// The copies view: every row's cumulative counts at each interval; a process's final rows once,
// marked exited.
class CopiesView {
 public:
  explicit CopiesView(const CopiesOptions& o)
      : o_(o),
        where_(o.scope),
        table_(where_.table({{"PID", 7}, {"COMM", -16}, {"DIRECTION", -9}, {"CALLS", 12}, {"BYTES", 16}, {"FAILED", 0}},
                            kWhereAt)) {}

  void print(const std::vector<CopyRow>& rows) {
    const uint64_t ts_ns = realtime_ns();
    if (!o_.common.json) {
      time_t t = time(nullptr);
      struct tm tm;
      localtime_r(&t, &tm);
      fmt::format_to(std::back_inserter(out_.buf()), "{:02}:{:02}:{:02}  {} rows\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     rows.size());
      table_.header(out_.buf());
    }
    for (auto& r : rows) {
      if (o_.common.json) {
        JsonLine j(out_.buf());
        j.record("copy", ts_ns);
        where_.process(j, static_cast<pid_t>(r.pid), r.comm, r.cgroup_id);
        j.str("direction", copy_direction_name(r.direction)).num("calls", r.calls).num("bytes", r.bytes);
        j.num("failed", r.failed);
        if (r.exited) j.boolean("exited", true);
        j.end();
      } else {
        table_.row(out_.buf(), where_.row({std::to_string(r.pid), r.comm, copy_direction_name(r.direction),
                                           std::to_string(r.calls), std::to_string(r.bytes), std::to_string(r.failed)},
                                          kWhereAt, static_cast<pid_t>(r.pid)));
      }
    }
    if (!o_.common.json) fmt::format_to(std::back_inserter(out_.buf()), "\n");
    out_.flush();
  }

 private:
  const CopiesOptions& o_;
  WhereView where_;
  Table table_;
  Writer out_;
};

int run_copies(const CopiesOptions& o) {
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  CopiesCollector copies(session, {o.scope});
  if (!copies.exits_hooked())
    fprintf(stderr, "gpuscope: no tp_btf (%s): exited processes keep their rows\n", copies.exit_hook_error().c_str());
  CopiesView view(o);
  session.start();
  EventLoop loop(o.common.duration_s);
  session.watch(loop);
  loop.every(o.interval_s, [&] { view.print(copies.snapshot()); });
  auto st = session.stats();
  fprintf(stderr, "gpuscope: counting copies at %zu probes in %zu CUDA objects; printing every %g s. Ctrl-C to end.\n",
          st.probes, st.objects, o.interval_s);
  loop.run();
  copies.detach();
  session.detach();
  view.print(copies.snapshot());
  auto s = copies.stats();
  if (s.rows_full || s.no_state || s.lost)
    fprintf(stderr,
            "gpuscope: %llu copies not counted (row map full), %llu not counted (no per-thread state), %llu exits "
            "lost\n",
            (unsigned long long)s.rows_full, (unsigned long long)s.no_state, (unsigned long long)s.lost);
  return 0;
}

}  // namespace

void register_copies(CLI::App& app) {
  auto [cmd, o] = new_command<CopiesOptions>(
      app, "copies",
      "Memory copies and memsets per process and direction (H2D, D2H, D2D, H2H, peer, default, memset): calls, "
      "bytes, failed calls, counted in BPF",
      run_copies);
  add_number(cmd, "-i,--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope copies -d 10                  # every process, a table every second\n"
      "  gpuscope copies -p 1234 --json -i 5");
}
GPUSCOPE_COMMAND(register_copies, 35);
GPUSCOPE_NEEDS(copies, 35, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {"tp_btf"});

}  // namespace gpuscope

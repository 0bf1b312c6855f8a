// gpuscope copies: the command and its views (a table per interval, JSON lines).
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "copies/copies_collector.h"
#include "gputime/gputime_collector.h"
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
  std::vector<std::string> cupti_libs;
};

// The copies and memsets that libgpuscope-cupti.so timed on the GPU, of one process and direction
// (CUPTI's own kind: a cudaMemcpyDefault copy shows under the direction it took).
struct GpuCopies {
  std::string comm;  // read at its first record: the process may be gone when it is printed
  uint64_t count = 0, bytes = 0, ns = 0;
  // Achieved bandwidth, bytes per nanosecond = GB/s.
  double gbps() const { return ns ? static_cast<double>(bytes) / static_cast<double>(ns) : 0; }
};
using GpuCopyMap = std::map<std::pair<uint32_t, unsigned>, GpuCopies>;  // (pid, direction)

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
                            kWhereAt)),
        gpu_table_(where_.table({{"PID", 7},
                                 {"COMM", -16},
                                 {"DIRECTION", -9},
                                 {"CALLS", 12},
                                 {"BYTES", 16},
                                 {"FAILED", 8},
                                 {"GPU_ms", 10},
                                 {"GB/s", 0}},
                                kWhereAt)) {}

  // `gpu`: what the CUPTI library timed, null without it. A (pid, direction) it timed that no
  // counted call has (a cudaMemcpyDefault copy, or copies made before gpuscope came) is a row
  // of 0 calls, so that no GPU time is hidden.
  void print(std::vector<CopyRow> rows, const GpuCopyMap* gpu) {
    const uint64_t ts_ns = realtime_ns();
    if (gpu) {
      std::set<std::pair<uint32_t, unsigned>> have;
      for (auto& r : rows) have.insert({r.pid, r.direction});
      for (auto& [k, g] : *gpu)
        if (!have.count(k)) rows.push_back({k.first, g.comm, 0, k.second});
      std::stable_sort(rows.begin(), rows.end(),
                       [](auto& a, auto& b) { return std::pair(a.pid, a.direction) < std::pair(b.pid, b.direction); });
    }
    const bool gpu_cols = gpu && !gpu->empty();
    if (!o_.common.json) {
      time_t t = time(nullptr);
      struct tm tm;
      localtime_r(&t, &tm);
      fmt::format_to(std::back_inserter(out_.buf()), "{:02}:{:02}:{:02}  {} rows\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     rows.size());
      (gpu_cols ? gpu_table_ : table_).header(out_.buf());
    }
    for (auto& r : rows) {
      const GpuCopies* g = nullptr;
      if (gpu)
        if (auto it = gpu->find({r.pid, r.direction}); it != gpu->end()) g = &it->second;
      if (o_.common.json) {
        JsonLine j(out_.buf());
        j.record("copy", ts_ns);
        where_.process(j, static_cast<pid_t>(r.pid), r.comm, r.cgroup_id);
        j.str("direction", copy_direction_name(r.direction)).num("calls", r.calls).num("bytes", r.bytes);
        j.num("failed", r.failed);
        if (g) j.num("gpu_copies", g->count).num("gpu_bytes", g->bytes).num("gpu_ns", g->ns).real("gbps", g->gbps(), 3);
        if (r.exited) j.boolean("exited", true);
        j.end();
      } else {
        std::vector<std::string> cells{std::to_string(r.pid),
                                       r.comm,
                                       copy_direction_name(r.direction),
                                       std::to_string(r.calls),
                                       std::to_string(r.bytes),
                                       std::to_string(r.failed)};
        if (gpu_cols) {
          cells.push_back(g ? fmt::format("{:.3f}", static_cast<double>(g->ns) / 1e6) : "-");
          cells.push_back(g ? fmt::format("{:.2f}", g->gbps()) : "-");
        }
        (gpu_cols ? gpu_table_ : table_)
            .row(out_.buf(), where_.row(std::move(cells), kWhereAt, static_cast<pid_t>(r.pid)));
      }
    }
    if (!o_.common.json) fmt::format_to(std::back_inserter(out_.buf()), "\n");
    out_.flush();
  }

 private:
  const CopiesOptions& o_;
  WhereView where_;
  Table table_, gpu_table_;
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
  std::unique_ptr<GpuTimeCollector> gpu = optional_gpu_time(session, o.cupti_libs, o.common.verbose);
  GpuCopyMap gpu_copies;
  if (gpu)
    gpu->on_record([&](const GpuRecord& g) {
      if (g.r.kind != GS_GT_MEMCPY && g.r.kind != GS_GT_MEMSET) return;
      GpuCopies& c =
          gpu_copies[{g.pid, g.r.kind == GS_GT_MEMSET ? GS_DIR_MEMSET : copy_direction_of_cupti(g.r.sub_kind)}];
      if (!c.count) c.comm = proc_comm(static_cast<pid_t>(g.pid));
      c.count++;
      c.bytes += g.r.bytes;
      c.ns += g.r.end_ns > g.r.start_ns ? g.r.end_ns - g.r.start_ns : 0;
    });
  // A process gone is printed once more (its final rows), then its GPU rows go too.
  auto print = [&] {
    view.print(copies.snapshot(), gpu ? &gpu_copies : nullptr);
    std::erase_if(gpu_copies, [](auto& kv) { return !pid_exists(static_cast<pid_t>(kv.first.first)); });
  };
  session.start();
  if (gpu) gpu->start();
  EventLoop loop(o.common.duration_s);
  session.watch(loop);
  if (gpu) gpu->watch(loop);
  loop.every(o.interval_s, print);
  auto st = session.stats();
  fprintf(stderr, "gpuscope: counting copies at %zu probes in %zu CUDA objects; printing every %g s. Ctrl-C to end.\n",
          st.probes, st.objects, o.interval_s);
  loop.run();
  if (gpu) gpu->stop();
  copies.detach();
  session.detach();
  view.print(copies.snapshot(), gpu ? &gpu_copies : nullptr);
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
  cmd->add_option("--cupti-lib", o->cupti_libs,
                  "Also probe this copy of libgpuscope-cupti.so (the one beside gpuscope is always probed): the "
                  "copies' GPU time and achieved bandwidth");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope copies -d 10                  # every process, a table every second\n"
      "  gpuscope copies -p 1234 --json -i 5");
}
GPUSCOPE_COMMAND(register_copies, 35);
GPUSCOPE_NEEDS(copies, 35, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {"tp_btf"});

}  // namespace gpuscope

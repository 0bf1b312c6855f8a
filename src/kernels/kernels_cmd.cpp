// gpuscope kernels: the command and its views (a refreshed table, JSON lines).
#include <memory>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/cli.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"
#include "kernels/kernels.h"
#include "kernels/kernels_collector.h"

namespace gpuscope {

namespace {

struct KernelsOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 1;
  unsigned top = 0;  // 0: every row
  std::string count_layer = "auto";
};

// The kernels view: rows of one kernel per process (handles that name the same kernel are
// summed), the busiest first, with the launch rate since the previous print.
class KernelsView {
 public:
  explicit KernelsView(const KernelsOptions& o) : o_(o) {}
  // The periodic print of every row.
  void interval(const std::vector<KernelRow>& now) {
    auto now_t = std::chrono::steady_clock::now();
    double secs = std::chrono::duration<double>(now_t - last_print_).count();
    last_print_ = now_t;
    print(now, secs, false);
    prev_.clear();
    for (auto& r : now) prev_[{r.pid, r.layer, r.handle}] = r.launches;
  }
  // A process's final rows.
  void exited(const std::vector<KernelRow>& rows) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_print_).count();
    if (!rows.empty()) print(rows, secs, true);
    for (auto& r : rows) prev_.erase({r.pid, r.layer, r.handle});
  }
  void stats(const KernelsCollector::Stats& s) {
    if (s.rows_full || s.captured || s.lost)
      fprintf(stderr,
              "gpuscope: %llu launches not counted (row map full), %llu recorded in stream capture, %llu "
              "events lost\n",
              (unsigned long long)s.rows_full, (unsigned long long)s.captured, (unsigned long long)s.lost);
  }

 private:
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;  // (pid, layer, handle)
  void print(const std::vector<KernelRow>& now, double secs, bool exited);

  const KernelsOptions& o_;
  Writer out_;
  std::map<Key, uint64_t> prev_;
  std::chrono::steady_clock::time_point last_print_ = std::chrono::steady_clock::now();
};

void KernelsView::print(const std::vector<KernelRow>& now, double secs, bool exited) {
  struct Row {
    uint32_t pid;
    const KernelRow* first = nullptr;
    uint64_t launches = 0, delta = 0;
  };
  std::map<std::tuple<uint32_t, std::string, std::string>, Row> rows;
  for (auto& k : now) {
    auto& r = rows[{k.pid, k.kernel, k.module}];
    r.pid = k.pid;
    if (!r.first) r.first = &k;
    r.launches += k.launches;
    auto p = prev_.find({k.pid, k.layer, k.handle});
    r.delta += k.launches - (p != prev_.end() ? p->second : 0);
  }
  std::vector<Row> v;
  for (auto& [_, r] : rows) v.push_back(r);
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.launches > b.launches; });
  if (o_.top && v.size() > o_.top && !exited) v.resize(o_.top);
  auto it = std::back_inserter(out_.buf());
  // One realtime stamp per block, so that JSON readers can tell the intervals apart.
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t ts_ns = static_cast<int64_t>(rt.tv_sec) * 1000000000 + rt.tv_nsec;
  static const Table table(
      {{"PID", 7}, {"COMM", -16}, {"LAUNCHES", 10}, {"RATE/s", 10}, {"KERNEL", -40}, {"MODULE", 0}});
  if (!o_.common.json && !exited) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    if (isatty(STDOUT_FILENO)) fmt::format_to(it, "\033[H\033[2J");
    fmt::format_to(it, "{:02}:{:02}:{:02}  {} rows\n", tm.tm_hour, tm.tm_min, tm.tm_sec, rows.size());
    table.header(out_.buf());
  }
  for (auto& r : v) {
    double rate = secs > 0 ? r.delta / secs : 0;
    const std::string& comm = r.first->comm;
    const std::string& kernel = r.first->kernel;
    const std::string& module = r.first->module;
    if (o_.common.json) {
      JsonLine j(out_.buf());
      j.str("type", "kernel").num("ts_ns", ts_ns).num("pid", r.pid).str("comm", comm).str("kernel", kernel);
      j.str("module", module)
          .str("kind", r.first->graph()              ? "graph"
                       : r.first->layer == GS_K_HOST ? "host_function"
                                                     : "kernel");
      j.num("launches", r.launches);
      if (exited) j.boolean("exited", true);
      j.real("rate", rate, 1).end();
    } else {
      table.row(out_.buf(), {std::to_string(r.pid), comm, std::to_string(r.launches),
                             exited ? "exited" : fmt::format("{:.1f}", rate), kernel, module});
    }
  }
  out_.flush();
}

int run_kernels(const KernelsOptions& o) {
  o.scope.validate();
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  CountLayer layer = o.count_layer == "driver" ? CountLayer::Driver
                     : o.count_layer == "both" ? CountLayer::Both
                                               : CountLayer::Auto;
  KernelsCollector kernels(session, {o.scope.comm, layer});
  if (o.common.verbose) fprintf(stderr, "gpuscope: %s\n", kernels.layer_reason().c_str());
  auto say_notes = [&] {
    for (auto& n : kernels.take_notes())
      if (o.common.verbose) fprintf(stderr, "gpuscope: %s\n", n.c_str());
  };
  if (!kernels.exits_hooked())
    fprintf(stderr, "gpuscope: no tp_btf (%s): exited processes keep their rows\n", kernels.exit_hook_error().c_str());
  KernelsView view(o);
  kernels.on_exit([&](uint32_t, const std::vector<KernelRow>& rows) { view.exited(rows); });
  session.start();
  kernels.start(session);

  EventLoop loop(o.common.duration_s);
  kernels.watch(loop);
  session.watch(loop);
  loop.after_wakeup([&] {
    kernels.tick();
    say_notes();
  });
  loop.every(o.interval_s, [&] {
    view.interval(kernels.snapshot());
    say_notes();
  });
  auto st = session.stats();
  fprintf(stderr,
          "gpuscope: counting launches at %zu probes in %zu CUDA objects%s; printing every %g s. Ctrl-C to end.\n",
          st.probes, st.objects, kernels.exits_hooked() ? "" : " (exits not seen)", o.interval_s);
  loop.run();
  kernels.drain();
  session.detach();
  kernels.drain();
  view.interval(kernels.snapshot());
  say_notes();
  view.stats(kernels.stats());
  return 0;
}

}  // namespace

void register_kernels(CLI::App& app) {
  auto o = std::make_shared<KernelsOptions>();  // held by the command registry until exit
  auto* cmd = app.add_subcommand("kernels", "Count kernel launches per process and kernel, named, counted in BPF");
  add_common_flags(cmd, o->common);
  add_scope_flags(cmd, o->scope);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  cmd->add_option("--count-layer", o->count_layer,
                  "Where launches are counted: driver (one probe per launch), both (runtime launches at the "
                  "runtime layer), auto (driver when the NVIDIA driver is loaded; default)")
      ->check(CLI::IsMember({"auto", "driver", "both"}));
  add_number(cmd, "--top", o->top, "Show only the N busiest rows (default all)", "rows", 1, 1000000);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope kernels                     # every process's launches, refreshed each second\n"
      "  gpuscope kernels -p 1234 --top 20\n"
      "  gpuscope kernels -c python3 --json --interval 5");
  add_command(cmd, [o] { return run_kernels(*o); });
}

}  // namespace gpuscope

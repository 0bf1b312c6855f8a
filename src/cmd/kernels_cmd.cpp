// gpuscope kernels: the command and its views (a refreshed table, JSON lines).
#include <memory>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <regex>
#include <set>
#include <thread>
#include <tuple>

#include "core/cli.h"
#include "core/event_loop.h"
#include "core/flamegraph.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/where.h"
#include "core/system.h"
#include "gputime/gputime_collector.h"
#include "kernels/kernels.h"
#include "kernels/kernels_collector.h"
#include "kernels/stack_flags.h"

namespace gpuscope {

namespace {

struct KernelsOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 1;
  unsigned top = 0;  // 0: every row
  std::string count_layer = "auto";
  std::vector<std::string> cupti_libs;
  StackFlags sites;
  std::string folded, svg;
  std::string weight = "launches";  // of --folded and --svg: launches or gpu-time
};

// The kernels view: rows of one kernel per process (handles that name the same kernel are
// summed), the busiest first, with the launch rate since the previous print.
Table plain_table(const WhereView& w);
Table gpu_table(const WhereView& w);

class KernelsView {
 public:
  explicit KernelsView(const KernelsOptions& o, const GpuTimeCollector* gpu)
      : o_(o), gpu_(gpu), where_(o.scope), plain_table_(plain_table(where_)), gpu_table_(gpu_table(where_)) {}
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
    for (auto& r : rows) prev_.erase({r.pid, r.layer, r.handle}), gone_.insert(r.pid);
  }
  void stats(const KernelsCollector::Stats& s, bool verbose) {
    if (verbose) fprintf(stderr, "gpuscope: %llu naming calls read\n", (unsigned long long)s.naming_events);
    if (s.rows_full || s.captured || s.lost)
      fprintf(stderr,
              "gpuscope: %llu launches not counted (row map full), %llu recorded in stream capture, %llu "
              "events lost\n",
              (unsigned long long)s.rows_full, (unsigned long long)s.captured, (unsigned long long)s.lost);
    if (s.stacks_lost || s.samples_full)
      fprintf(stderr,
              "gpuscope: %llu sampled launches without their user stack (stack map full), %llu not kept "
              "(sample map full)\n",
              (unsigned long long)s.stacks_lost, (unsigned long long)s.samples_full);
  }

 private:
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;  // (pid, layer, handle)
  struct Row {
    uint32_t pid;
    const KernelRow* first = nullptr;
    uint64_t launches = 0, delta = 0;
  };
  void print(const std::vector<KernelRow>& now, double secs, bool exited);
  // One row per (pid, kernel, module), the busiest first; GPU-only rows point into gpu_only_.
  std::vector<Row> rows_of(const std::vector<KernelRow>& now, bool exited);
  void header(size_t rows, bool gpu_cols);
  void print_row(const Row& r, double secs, bool exited, int64_t ts_ns, bool gpu_cols);

  // Kernels the library timed that no counted launch names (launched before gpuscope came, or
  // named differently): rows of 0 launches, so that no GPU time is hidden.
  void add_gpu_only(const std::vector<KernelRow>& now, bool exited, std::deque<KernelRow>& out) const {
    if (!gpu_) return;
    std::set<std::pair<uint32_t, std::string>> named;
    std::map<uint32_t, std::string> comms;
    for (auto& k : now) named.insert({k.pid, k.kernel}), comms[k.pid] = k.comm;
    for (auto& [key, t] : gpu_->kernel_times()) {
      if (named.count(key) || (exited ? !comms.count(key.first) : gone_.count(key.first) || !pid_exists(key.first)))
        continue;
      KernelRow r;
      r.pid = key.first;
      r.comm = comms.count(key.first) ? comms[key.first] : proc_comm(key.first);
      r.kernel = key.second;
      out.push_back(std::move(r));
    }
  }
  // GPU time of (pid, kernel) from libgpuscope-cupti.so's records, and its total at the last print.
  const KernelGpuTime* gpu_time(uint32_t pid, const std::string& kernel) const {
    if (!gpu_) return nullptr;
    auto it = gpu_->kernel_times().find({pid, kernel});
    return it == gpu_->kernel_times().end() ? nullptr : &it->second;
  }

  const KernelsOptions& o_;
  const GpuTimeCollector* gpu_;
  WhereView where_;
  Table plain_table_, gpu_table_;
  Writer out_;
  std::deque<KernelRow> gpu_only_;
  std::map<Key, uint64_t> prev_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> prev_gpu_ns_;
  std::set<uint32_t> gone_;  // processes whose final rows were printed
  std::chrono::steady_clock::time_point last_print_ = std::chrono::steady_clock::now();
};

// Where the container columns go: after PID and COMM.
constexpr size_t kWhereAt = 2;

Table plain_table(const WhereView& w) {
  return w.table({{"PID", 7}, {"COMM", -16}, {"LAUNCHES", 10}, {"RATE/s", 10}, {"KERNEL", -40}, {"MODULE", 0}},
                 kWhereAt);
}

Table gpu_table(const WhereView& w) {
  return w.table({{"PID", 7},
                  {"COMM", -16},
                  {"LAUNCHES", 10},
                  {"RATE/s", 10},
                  {"GPU_ms", 10},
                  {"MEAN_us", 9},
                  {"MAX_us", 9},
                  {"GPU%", 6},
                  {"KERNEL", -40},
                  {"MODULE", 0}},
                 kWhereAt);
}

std::vector<KernelsView::Row> KernelsView::rows_of(const std::vector<KernelRow>& now, bool exited) {
  std::map<std::tuple<uint32_t, std::string, std::string>, Row> rows;
  for (auto& k : now) {
    auto& r = rows[{k.pid, k.kernel, k.module}];
    r.pid = k.pid;
    if (!r.first) r.first = &k;
    r.launches += k.launches;
    auto p = prev_.find({k.pid, k.layer, k.handle});
    r.delta += k.launches - (p != prev_.end() ? p->second : 0);
  }
  gpu_only_.clear();
  add_gpu_only(now, exited, gpu_only_);
  for (auto& k : gpu_only_) rows[{k.pid, k.kernel, k.module}] = Row{k.pid, &k, 0, 0};
  std::vector<Row> v;
  for (auto& [_, r] : rows) v.push_back(r);
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.launches > b.launches; });
  return v;
}

void KernelsView::header(size_t rows, bool gpu_cols) {
  auto it = std::back_inserter(out_.buf());
  time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  if (isatty(STDOUT_FILENO)) fmt::format_to(it, "\033[H\033[2J");
  fmt::format_to(it, "{:02}:{:02}:{:02}  {} rows\n", tm.tm_hour, tm.tm_min, tm.tm_sec, rows);
  (gpu_cols ? gpu_table_ : plain_table_).header(out_.buf());
}

void KernelsView::print_row(const Row& r, double secs, bool exited, int64_t ts_ns, bool gpu_cols) {
  double rate = secs > 0 ? r.delta / secs : 0;
  const std::string& comm = r.first->comm;
  const std::string& kernel = r.first->kernel;
  const std::string& module = r.first->module;
  // GPU time: cumulative, and its share of the wall time since the previous print.
  const KernelGpuTime* g = gpu_time(r.pid, kernel);
  double share = 0;
  if (g) {
    uint64_t& prev = prev_gpu_ns_[{r.pid, kernel}];
    share = secs > 0 ? (g->total_ns - prev) / (secs * 1e9) : 0;
    prev = g->total_ns;
  }
  if (o_.common.json) {
    JsonLine j(out_.buf());
    j.record("kernel", static_cast<uint64_t>(ts_ns));
    where_.process(j, static_cast<pid_t>(r.pid), comm);
    j.str("kernel", kernel);
    j.str("module", module)
        .str("kind", r.first->graph()              ? "graph"
                     : r.first->layer == GS_K_HOST ? "host_function"
                                                   : "kernel");
    j.num("launches", r.launches);
    if (exited) j.boolean("exited", true);
    if (g) {
      j.num("gpu_kernels", g->count).num("gpu_time_ns", g->total_ns).num("gpu_mean_ns", g->total_ns / g->count);
      j.num("gpu_max_ns", g->max_ns).real("gpu_share", share, 4);
    }
    j.real("rate", rate, 1).end();
  } else if (gpu_cols) {
    gpu_table_.row(out_.buf(), where_.row({std::to_string(r.pid), comm, std::to_string(r.launches),
                                           exited ? "exited" : fmt::format("{:.1f}", rate),
                                           g ? fmt::format("{:.3f}", g->total_ns / 1e6) : "-",
                                           g ? fmt::format("{:.1f}", g->total_ns / 1e3 / g->count) : "-",
                                           g ? fmt::format("{:.1f}", g->max_ns / 1e3) : "-",
                                           g ? fmt::format("{:.1f}", share * 100) : "-", kernel, module},
                                          kWhereAt, static_cast<pid_t>(r.pid)));
  } else {
    plain_table_.row(out_.buf(), where_.row({std::to_string(r.pid), comm, std::to_string(r.launches),
                                             exited ? "exited" : fmt::format("{:.1f}", rate), kernel, module},
                                            kWhereAt, static_cast<pid_t>(r.pid)));
  }
}

void KernelsView::print(const std::vector<KernelRow>& now, double secs, bool exited) {
  std::vector<Row> v = rows_of(now, exited);
  size_t total = v.size();
  if (o_.top && v.size() > o_.top && !exited) v.resize(o_.top);
  // One realtime stamp per block, so that JSON readers can tell the intervals apart.
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t ts_ns = static_cast<int64_t>(rt.tv_sec) * 1000000000 + rt.tv_nsec;
  bool gpu_cols = gpu_ && gpu_->stats().records > 0;
  if (!o_.common.json && !exited) header(total, gpu_cols);
  for (auto& r : v) print_row(r, secs, exited, ts_ns, gpu_cols);
  out_.flush();
}

// The launch sites at the end of the run: the table (or JSON lines) of sites, the folded stacks,
// the flame graph.
// Each site's share of its kernel's GPU time (per process), as its share of the kernel's counted
// launches; empty without the CUPTI library.
std::vector<uint64_t> site_gpu_ns(const std::vector<LaunchSite>& sites, const GpuTimeCollector* gpu) {
  if (!gpu) return {};
  std::map<std::pair<uint32_t, std::string>, uint64_t> launches;
  for (auto& s : sites) launches[{s.pid, s.kernel}] += s.launches;
  std::vector<uint64_t> v;
  for (auto& s : sites) {
    auto t = gpu->kernel_times().find({s.pid, s.kernel});
    uint64_t all = launches[{s.pid, s.kernel}];
    v.push_back(t == gpu->kernel_times().end() || !all
                    ? 0
                    : static_cast<uint64_t>(static_cast<unsigned __int128>(t->second.total_ns) * s.launches / all));
  }
  return v;
}

void print_sites(const KernelsOptions& o, const std::vector<LaunchSite>& sites, const GpuTimeCollector* gpu) {
  const std::vector<uint64_t> gpu_ns = site_gpu_ns(sites, gpu);
  WhereView where(o.scope);
  Writer out;
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t ts_ns = static_cast<uint64_t>(rt.tv_sec) * 1000000000 + static_cast<uint64_t>(rt.tv_nsec);
  std::vector<const LaunchSite*> by_launches;
  for (auto& s : sites) by_launches.push_back(&s);
  std::stable_sort(by_launches.begin(), by_launches.end(), [](auto* a, auto* b) { return a->launches > b->launches; });
  if (o.common.json) {
    for (auto* s : by_launches) {
      JsonLine j(out.buf());
      j.record("site", ts_ns);
      where.process(j, static_cast<pid_t>(s->pid), s->comm, s->cgroup_id);
      j.str("site", s->site).begin_array("stack");
      for (auto& f : s->stack) j.str(f);
      j.end_array().str("kernel", s->kernel).str("module", s->module);
      j.num("launches", s->launches).num("samples", s->samples).boolean("estimated", s->estimated);
      if (!gpu_ns.empty()) j.num("gpu_ns", gpu_ns[s - sites.data()]);
      j.boolean("cut_short", s->cut_short).end();
    }
  } else {
    // One row per (process, site, kernel): the stacks that end at one site are summed.
    struct Row {
      const LaunchSite* first;
      uint64_t launches = 0, samples = 0;
      bool estimated = false;
    };
    std::map<std::tuple<uint32_t, std::string, std::string>, Row> rows;
    for (auto* s : by_launches) {
      auto [it, _] = rows.try_emplace({s->pid, s->site, s->kernel}, Row{s});
      it->second.launches += s->launches, it->second.samples += s->samples;
      it->second.estimated = it->second.estimated || s->estimated;
    }
    std::vector<Row> v;
    for (auto& [_, r] : rows) v.push_back(r);
    std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.launches > b.launches; });
    if (o.top && v.size() > o.top) v.resize(o.top);
    Table t = where.table({{"PID", 7}, {"COMM", -16}, {"LAUNCHES", 14}, {"SAMPLES", 8}, {"SITE", -40}, {"KERNEL", 0}},
                          kWhereAt);
    fmt::format_to(std::back_inserter(out.buf()),
                   "\nlaunch sites: 1 in {} launches per process sampled, and each kernel's first; launches "
                   "marked est. are the counted ones split in the sampled proportions\n",
                   o.sites.stack_every);
    t.header(out.buf());
    for (auto& r : v)
      t.row(out.buf(), where.row({std::to_string(r.first->pid), r.first->comm,
                                  std::to_string(r.launches) + (r.estimated ? " est." : ""), std::to_string(r.samples),
                                  r.first->site, r.first->kernel},
                                 kWhereAt, static_cast<pid_t>(r.first->pid)));
  }
  out.flush();
  uint64_t cut = 0, all = 0;
  for (auto& s : sites) all += s.samples, cut += s.cut_short ? s.samples : 0;
  if (cut)
    fprintf(stderr,
            "gpuscope: %llu of %llu sampled stacks end before their thread's start (code without frame pointers): "
            "their outer native frames are missing\n",
            (unsigned long long)cut, (unsigned long long)all);
  if (o.folded.empty() && o.svg.empty()) return;
  // Root first: the process, its frames from the outermost in, the kernel.
  const bool by_gpu = o.weight == "gpu-time";
  Folded folded;
  for (size_t i = 0; i < sites.size(); i++) {
    const LaunchSite& s = sites[i];
    uint64_t w = by_gpu ? gpu_ns[i] : s.launches;
    if (!w) continue;
    std::vector<std::string> f{s.comm};
    f.insert(f.end(), s.stack.rbegin(), s.stack.rend());
    f.push_back("[kernel] " + s.kernel);
    folded[fold(f)] += w;
  }
  if (by_gpu && folded.empty())
    fprintf(stderr,
            "gpuscope: no GPU time recorded for the sampled kernels (is the program run with libgpuscope-cupti.so, "
            "`gpuscope run`?): the stacks weighed by GPU time are empty\n");
  if (!o.folded.empty()) write_file_atomic(o.folded, folded_text(folded));
  if (!o.svg.empty())
    write_file_atomic(
        o.svg,
        flamegraph_svg(folded, by_gpu ? "gpuscope kernels: launch sites by GPU time" : "gpuscope kernels: launch sites",
                       by_gpu ? "ns" : "launches"));
}

// Each detach waits for an RCU grace period: the GPU-time probes and the exit hook go while
// the session's do.
void detach_all(UprobeSession& session, KernelsCollector& kernels, GpuTimeCollector* gpu) {
  std::jthread gpu_stop([&] {
    if (gpu) gpu->stop();
  });
  std::jthread exit_hook([&] { kernels.detach(); });
  session.detach();
}

int run_kernels(const KernelsOptions& o) {
  o.sites.check();
  // Processes record GPU time through the library that gpuscope hands them (gpuscope run, or
  // CUDA_INJECTION64_PATH): without one, every site would weigh nothing.
  if (o.weight == "gpu-time" && o.cupti_libs.empty() && access(cupti_lib_beside_self().c_str(), R_OK) != 0)
    throw UsageError(
        "--weight gpu-time needs the CUPTI library (libgpuscope-cupti.so beside gpuscope, or --cupti-lib)");
  if (!o.folded.empty()) check_output_file("--folded", o.folded);
  if (!o.svg.empty()) check_output_file("--svg", o.svg);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  CountLayer layer = o.count_layer == "driver" ? CountLayer::Driver
                     : o.count_layer == "both" ? CountLayer::Both
                                               : CountLayer::Auto;
  KernelsCollector::Config kc{o.scope, layer};
  o.sites.apply(kc);
  KernelsCollector kernels(session, kc);
  if (o.common.verbose) fprintf(stderr, "gpuscope: %s\n", kernels.layer_reason().c_str());
  auto say_notes = [&] {
    for (auto& n : kernels.take_notes())
      if (o.common.verbose) fprintf(stderr, "gpuscope: %s\n", n.c_str());
  };
  if (!kernels.exits_hooked())
    fprintf(stderr, "gpuscope: no tp_btf (%s): exited processes keep their rows\n", kernels.exit_hook_error().c_str());
  std::unique_ptr<GpuTimeCollector> gpu = optional_gpu_time(session, o.cupti_libs, o.common.verbose);
  if (o.weight == "gpu-time" && !gpu) throw UsageError("--weight gpu-time: GPU time cannot be recorded here");
  KernelsView view(o, gpu.get());
  kernels.on_exit([&](uint32_t, const std::vector<KernelRow>& rows) {
    if (gpu) gpu->drain();  // the library's last flush came before the exit
    view.exited(rows);
  });
  session.start();
  kernels.start(session);
  if (gpu) gpu->start();

  EventLoop loop(o.common.duration_s);
  kernels.watch(loop);
  if (gpu) gpu->watch(loop);
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
          "gpuscope: counting launches at %zu probes in %zu CUDA objects%s; naming calls %s; printing every %g s. "
          "Ctrl-C to end.\n",
          st.probes, st.objects, kernels.exits_hooked() ? "" : " (exits not seen)",
          kernels.name_session() ? "as uprobe sessions" : "at entry and return probes", o.interval_s);
  loop.run();
  kernels.drain();
  detach_all(session, kernels, gpu.get());
  kernels.drain();
  view.interval(kernels.snapshot());
  say_notes();
  if (o.sites.stacks) print_sites(o, kernels.sites(), gpu.get());
  view.stats(kernels.stats(), o.common.verbose);
  if (gpu) report_gpu_losses(gpu->stats());
  return 0;
}

}  // namespace

void register_kernels(CLI::App& app) {
  auto [cmd, o] = new_command<KernelsOptions>(
      app, "kernels", "Count kernel launches per process and kernel, named, counted in BPF", run_kernels);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  cmd->add_option("--count-layer", o->count_layer,
                  "Where launches are counted: driver (one probe per launch), both (runtime launches at the "
                  "runtime layer), auto (driver when the NVIDIA driver is loaded; default)")
      ->type_name("LAYER")
      ->check(CLI::IsMember({"auto", "driver", "both"}));
  cmd->add_option("--cupti-lib", o->cupti_libs,
                  "Also probe this copy of libgpuscope-cupti.so (the one beside gpuscope is always probed)");
  add_number(cmd, "--top", o->top, "Show only the N busiest rows (default all)", "rows", 1, 1000000);
  o->sites.add_to(cmd, "at the end, the launch sites");
  o->sites.need_stacks.push_back(cmd->add_option(
      "--folded", o->folded, "With --stacks: write folded stacks weighted by launches (flamegraph.pl input)"));
  o->sites.need_stacks.push_back(
      cmd->add_option("--svg", o->svg, "With --stacks: write the launch sites' flame graph as SVG"));
  o->sites.need_stacks.push_back(
      cmd->add_option("--weight", o->weight,
                      "With --stacks: weigh --folded and --svg by launches (default) or gpu-time (each kernel's GPU "
                      "time from the CUPTI library, split over its sites as its launches are)")
          ->type_name("WEIGHT")
          ->check(CLI::IsMember({"launches", "gpu-time"})));
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope kernels                     # every process's launches, refreshed each second\n"
      "  gpuscope kernels -p 1234 --top 20\n"
      "  gpuscope kernels -c python3 --json --interval 5\n"
      "  gpuscope kernels -p 1234 -d 30 --stacks --folded sites.folded --svg sites.svg");
}
GPUSCOPE_COMMAND(register_kernels, 30);
GPUSCOPE_NEEDS(kernels, 30, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {});

}  // namespace gpuscope

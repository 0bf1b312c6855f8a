// gpuscope starvation: the terminal and JSON-lines view over the starvation collector.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "bridge/bridge.h"
#include "bridge/nvml.h"
#include "bridge/pin_dir.h"
#include "core/bpf.h"
#include "core/clock.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "starvation/starvation_cmd.h"
#include "starvation/starvation_collector.h"

namespace gpuscope {

namespace {

void string_array(JsonLine& j, std::string_view key, const std::vector<std::string>& v) {
  j.begin_array(key);
  for (auto& s : v) j.str(s);
  j.end_array();
}

class StarvationView {
 public:
  explicit StarvationView(const StarvationOptions& o)
      : o_(o),
        where_(o.collector.scope),
        table_(where_.table(
            {{"COMM", -16}, {"PID", 7}, {"TID", 7}, {"CPU_TIME_NS", 14}, {"IDLE_NS", 14}, {"HIT_COUNT", 9}},
            kWhereAt)) {}
  void show(StarvationReport r);
  const Folded& folded() const { return folded_; }
  uint64_t folded_samples() const { return folded_samples_; }
  uint64_t rows() const { return rows_; }

 private:
  // The container columns go last, as in Inspektor Gadget's tables.
  static constexpr size_t kWhereAt = 6;
  const StarvationOptions& o_;
  WhereView where_;
  Table table_;
  Folded folded_;
  uint64_t folded_samples_ = 0;
  uint64_t rows_ = 0;
  bool header_done_ = false;
  Writer out_;
};

void StarvationView::show(StarvationReport r) {
  for (auto& [k, w] : r.folded) folded_[k] += w;
  folded_samples_ += r.folded_samples;
  auto& buf = out_.buf();
  if (!o_.common.json && !header_done_ && !r.rows.empty()) {
    table_.header(buf);
    header_done_ = true;
  }
  const uint64_t now = realtime_ns();
  for (auto& row : r.rows) {
    rows_++;
    if (o_.common.json) {
      JsonLine j(buf);
      j.record("starvation", now);
      where_.process(j, static_cast<pid_t>(row.pid), row.comm);
      j.num("tid", row.tid).str("thread", row.thread);
      j.num("cpu_time_ns", row.cpu_time_ns);
      j.num("idle_ns", row.idle_ns).num("hit_count", row.hit_count);
      string_array(j, "ustack", row.ustack);
      string_array(j, "kstack", row.kstack);
      j.end();
    } else {
      table_.row(
          buf, where_.row({row.comm, std::to_string(row.pid), std::to_string(row.tid), std::to_string(row.cpu_time_ns),
                           std::to_string(row.idle_ns), std::to_string(row.hit_count)},
                          kWhereAt, static_cast<pid_t>(row.pid)));
      for (auto& f : row.ustack) fmt::format_to(std::back_inserter(buf), "    {}\n", f);
      for (auto& f : row.kstack) fmt::format_to(std::back_inserter(buf), "    [k] {}\n", f);
    }
  }
  out_.flush();
}

}  // namespace

namespace {

// Refuses an output file that cannot be written before anything is loaded.
void check_outputs(const StarvationOptions& o) {
  for (const std::string* f : {&o.folded, &o.svg}) {
    if (!f->empty()) check_output_file(f == &o.folded ? "--folded" : "--svg", *f);
  }
}

// Ticks the collector every 20 ms and shows its report every second, until stopped.
void watch(StarvationCollector& c, StarvationView& view, double duration_s) {
  StopControl stop(duration_s);
  using clock = std::chrono::steady_clock;
  auto next_report = clock::now() + std::chrono::seconds(1);
  while (!stop.should_stop()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c.tick();
    auto now = clock::now();
    if (now >= next_report) {
      view.show(c.collect());
      next_report += std::chrono::seconds(1);
      if (next_report < now) next_report = now + std::chrono::seconds(1);
    }
  }
  view.show(c.collect());
}

// With no bridge publishing, one runs here, as in the agent; where none can (no NVML), it says
// so once and waits for one.
std::unique_ptr<BridgeThread> bridge_unless_running(const StarvationOptions& o) {
  const std::string& dir = o.collector.pin_dir;
  check_pin_dir(dir, false);
  if (bridge_holder(dir).publishing) return nullptr;
  try {
    BridgeOptions b;
    b.nvml = o.nvml;
    b.pin_dir = dir;
    b.detail_interval_ms = 1000;
    b.verbose = o.common.verbose;
    auto t = std::make_unique<BridgeThread>(b);
    fprintf(stderr, "gpuscope: no bridge was publishing under %s; starvation runs one\n", dir.c_str());
    return t;
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuscope: no bridge is publishing under %s and none can run here (%s)\n", dir.c_str(), e.what());
    return nullptr;
  }
}

void report_stats(const StarvationStats& st, bool verbose) {
  if (verbose && st.py)
    fprintf(stderr, "gpuscope: %llu Python walks, %llu in threads without a PyThreadState\n",
            (unsigned long long)st.py_walks, (unsigned long long)st.py_no_tstate);
  if (verbose)
    fprintf(stderr, "gpuscope: %llu cpu-clock samples, %llu bridge ticks folded into the latch\n",
            (unsigned long long)st.samples, (unsigned long long)st.latch_ticks);
  if (verbose)
    fprintf(stderr, "gpuscope: sched_switch hook attached %llu times (on only while a GPU nears idle), %s at exit\n",
            (unsigned long long)st.switch_attaches, st.switch_hooked ? "on" : "off");
  if (st.lost_threads || st.lost_samples || st.lost_stacks || !st.py_drops.empty())
    fprintf(stderr, "gpuscope: not kept: %llu thread slices (thread map full), %llu samples, %llu stacks%s\n",
            (unsigned long long)st.lost_threads, (unsigned long long)st.lost_samples,
            (unsigned long long)st.lost_stacks, st.py_drops.c_str());
}

void write_stacks(const StarvationOptions& o, const StarvationView& view, uint64_t period_ns) {
  uint64_t total = 0;
  for (auto& [_, w] : view.folded()) total += w;
  if (!o.folded.empty()) {
    write_file_atomic(o.folded, folded_text(view.folded()));
    fprintf(stderr, "gpuscope: folded stacks: %zu stacks, %llu samples x %llu ns = %llu ns sampled, in %s\n",
            view.folded().size(), (unsigned long long)view.folded_samples(), (unsigned long long)period_ns,
            (unsigned long long)total, o.folded.c_str());
  }
  if (!o.svg.empty()) {
    write_file_atomic(o.svg, flamegraph_svg(view.folded(),
                                            fmt::format("GPU starvation: on-CPU time while the GPU sat idle "
                                                        "({:.3f} s sampled)",
                                                        static_cast<double>(total) / 1e9),
                                            "ns"));
    fprintf(stderr, "gpuscope: flame graph in %s\n", o.svg.c_str());
  }
}

}  // namespace

int run_starvation(const StarvationOptions& o) {
  StarvationCollector::Config cfg = o.collector;
  cfg.fold = !o.folded.empty() || !o.svg.empty();
  StarvationCollector::validate(cfg);
  check_outputs(o);
  nvml::check_library(o.nvml);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  std::unique_ptr<BridgeThread> bridge = bridge_unless_running(o);
  StarvationCollector c(cfg);
  fprintf(stderr,
          "gpuscope: watching for GPU starvation: idle >= %llu ms, GPU memory >= %llu bytes, bridge data "
          "fresh within %llu ms, sampling at %u Hz. Ctrl-C to end.\n",
          static_cast<unsigned long long>(cfg.min_idle_ms), static_cast<unsigned long long>(cfg.min_gpu_mem_bytes),
          static_cast<unsigned long long>(cfg.stale_threshold_ms), cfg.sample_hz);
  StarvationView view(o);
  watch(c, view, o.common.duration_s);
  StarvationStats st = c.stats();
  c.stop();
  report_stats(st, o.common.verbose);
  write_stacks(o, view, c.period_ns());
  fprintf(stderr, "gpuscope: %llu rows\n", static_cast<unsigned long long>(view.rows()));
  return 0;
}

}  // namespace gpuscope

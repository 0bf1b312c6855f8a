// gpuscope frames: frame times of Vulkan, EGL and GLX renderers per process, and the slowest
// frames with what happened inside them (submits, waits, the CUDA calls and launches).
#include <time.h>

#include <algorithm>
#include <cstdio>

#include "core/cli.h"
#include "core/clock.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/histogram.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"
#include "trace/trace.h"

namespace gpuscope {

namespace {

struct FramesOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 1;
  unsigned slowest = 3;
  bool every_frame = false;
  bool cuda = true;
};

// Frames settle this long after they end: the CUDA calls inside come from another ring buffer.
constexpr uint64_t kSettleNs = 200'000'000;

class FramesView {
 public:
  explicit FramesView(const FramesOptions& o) : o_(o), where_(o.scope), table_(frames_table(where_)) {}
  // Where a process runs, read while it does: a short run's frames are printed after its exit.
  void place(pid_t pid) { where_.of(pid); }

  void frame(const Frame& f, std::string_view comm) {
    auto& w = window_[{f.pid, f.api}];
    w.durations.add(f.duration_ns());
    w.submits += f.submits;
    w.cmd_buffers += f.cmd_buffers;
    w.waits += f.waits;
    w.wait_ns += f.wait_ns;
    w.cuda_calls += f.cuda_calls;
    w.cuda_launches += f.cuda_launches;
    if (o_.every_frame && o_.common.json) write_frame(f, comm, "frame");
    if (o_.slowest == 0) return;
    slow_.push_back(f);
    std::sort(slow_.begin(), slow_.end(), [](auto& a, auto& b) { return a.duration_ns() > b.duration_ns(); });
    if (slow_.size() > o_.slowest) slow_.pop_back();
  }

  // What settled since the previous print.
  void print(const FrameTracker& t, double seconds) {
    auto it = std::back_inserter(out_.buf());
    if (!o_.common.json) {
      time_t now = time(nullptr);
      struct tm tm;
      localtime_r(&now, &tm);
      fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
      if (window_.empty()) fmt::format_to(it, "no frames\n");
    }
    if (!o_.common.json && !window_.empty()) table_.header(out_.buf());
    const uint64_t now = realtime_ns();
    for (auto& [key, w] : window_) {
      auto [pid, api] = key;
      auto p = t.processes().find(pid);
      const std::string comm = p == t.processes().end() ? "" : p->second.comm;
      const double n = static_cast<double>(w.durations.count());
      const uint64_t p50 = w.durations.at(0.5), p95 = w.durations.at(0.95), p99 = w.durations.at(0.99),
                     max = w.durations.max();
      if (o_.common.json) {
        JsonLine j(out_.buf());
        j.record("frames", now);
        where_.process(j, static_cast<pid_t>(pid), comm);
        j.str("api", gfx_api_name(api));
        j.num("frames", w.durations.count()).real("fps", n / seconds, 2);
        j.num("p50_ns", p50).num("p95_ns", p95).num("p99_ns", p99).num("max_ns", max);
        j.num("submits", w.submits).num("cmd_buffers", w.cmd_buffers).num("waits", w.waits).num("wait_ns", w.wait_ns);
        j.num("cuda_calls", w.cuda_calls).num("cuda_launches", w.cuda_launches);
        j.end();
      } else {
        table_.row(out_.buf(),
                   where_.row({std::to_string(pid), comm, gfx_api_name(api), fmt::format("{:.1f}", n / seconds),
                               std::to_string(w.durations.count()), ms(p50), ms(p95), ms(p99), ms(max),
                               std::to_string(w.submits), std::to_string(w.cmd_buffers),
                               fmt::format("{:.2f}", static_cast<double>(w.wait_ns) / 1e6 / n),
                               std::to_string(w.cuda_launches)},
                              kWhereAt, static_cast<pid_t>(pid)));
      }
    }
    if (!slow_.empty()) {
      if (!o_.common.json) fmt::format_to(it, "slowest frames:\n");
      for (const Frame& f : slow_) {
        auto p = t.processes().find(f.pid);
        if (o_.common.json)
          write_frame(f, p == t.processes().end() ? "" : p->second.comm, "slow_frame");
        else
          fmt::format_to(it, "  {} {} {} #{}: {} ms: {}\n", f.pid, p == t.processes().end() ? "" : p->second.comm,
                         gfx_api_name(f.api), f.number, ms(f.duration_ns()), inside(f));
      }
    }
    if (!o_.common.json) fmt::format_to(it, "\n");
    window_.clear();
    slow_.clear();
    out_.flush();
  }

  // A process that exited, or every process at the end: its frame-time histograms since it was
  // first seen, its Vulkan queues, and the Vulkan memory it never freed.
  void process_end(uint32_t pid, const GfxProcess& p, bool exited) {
    for (auto& [api, s] : p.series) {
      if (s.frames == 0) continue;
      LatencyStats h{s.buckets, s.max_ns};
      if (o_.common.json) {
        JsonLine j(out_.buf());
        j.record("histogram", realtime_ns());
        where_.process(j, static_cast<pid_t>(pid), p.comm);
        j.str("api", gfx_api_name(api));
        j.num("frames", s.frames).num("sum_ns", s.sum_ns).num("max_ns", s.max_ns).num("wait_ns", s.wait_ns);
        j.num("p50_ns", s.durations.at(0.5)).num("p95_ns", s.durations.at(0.95)).num("p99_ns", s.durations.at(0.99));
        j.begin_array("buckets");
        for (unsigned b = 0; b < kLatBuckets; b++)
          if (s.buckets[b]) j.begin_object().num("le_ns", bucket_le(b)).num("count", s.buckets[b]).end_object();
        j.end_array().end();
      } else {
        render_histogram(
            out_.buf(),
            fmt::format("frame times of pid {} ({}), {}, {} frames", pid, p.comm, gfx_api_name(api), s.frames), h,
            &s.durations);
      }
    }
    for (auto& [queue, q] : p.queues) {
      const double per = q.submits ? static_cast<double>(q.cmd_buffers) / static_cast<double>(q.submits) : 0;
      if (o_.common.json) {
        JsonLine j(out_.buf());
        j.record("queue", realtime_ns());
        where_.process(j, static_cast<pid_t>(pid), p.comm);
        j.hex("queue", queue).num("submits", q.submits).num("cmd_buffers", q.cmd_buffers);
        j.real("cmd_buffers_per_submit", per, 2).num("presents", q.presents).end();
      } else {
        fmt::format_to(std::back_inserter(out_.buf()),
                       "pid {} ({}) queue 0x{:x}: {} submits, {} command buffers ({:.2f} a submit), {} presents\n", pid,
                       p.comm, queue, q.submits, q.cmd_buffers, per, q.presents);
      }
    }
    memory(pid, p, exited);
  }

  void memory(uint32_t pid, const GfxProcess& p, bool exited) {
    const GfxMemory& m = p.memory;
    if (m.allocs == 0 && m.untracked_frees == 0) return;
    if (o_.common.json) {
      JsonLine j(out_.buf());
      j.record("memory", realtime_ns());
      where_.process(j, static_cast<pid_t>(pid), p.comm);
      j.str("api", "vulkan").boolean("exited", exited);
      j.num("outstanding_bytes", m.outstanding_bytes).num("allocations", m.live.size());
      j.num("allocs", m.allocs).num("frees", m.frees).num("alloc_failures", m.alloc_failures);
      j.num("untracked_frees", m.untracked_frees);
      j.num("devices_created", p.devices_created).num("devices_destroyed", p.devices_destroyed);
      j.begin_array("outstanding");
      for (auto& [handle, b] : m.live)
        j.begin_object()
            .hex("memory", handle)
            .num("size_bytes", b.size_bytes)
            .num("memory_type", b.mem_type)
            .end_object();
      j.end_array();
      j.end();
    } else {
      fmt::format_to(
          std::back_inserter(out_.buf()),
          "{} {} {}: {} bytes of Vulkan device memory in {} allocations never freed ({} allocated, {} freed)\n", pid,
          p.comm, exited ? "exited" : "at the end", m.outstanding_bytes, m.live.size(), m.allocs, m.frees);
    }
    out_.flush();
  }

  void summary(const GraphicsCollector::Stats& s, uint64_t content_dropped, const TraceCollector::Stats* cuda) {
    const uint64_t cuda_lost = cuda ? cuda->lost_ringbuf + cuda->lost_state : 0;
    if (o_.common.json) {
      JsonLine j(out_.buf());
      j.record("summary", realtime_ns()).num("events", s.delivered).num("lost_ringbuf", s.lost_ringbuf);
      j.num("lost_state", s.lost_state).num("content_dropped", content_dropped);
      j.num("fetched_sites", s.fetched_sites)
          .num("fetch_failures", s.fetch_failures)
          .num("lost_fetches", s.lost_fetches);
      if (cuda) j.num("cuda_events", cuda->delivered).num("cuda_lost", cuda_lost);
      j.end();
    } else if (s.lost_ringbuf || s.lost_state || s.lost_fetches || content_dropped || cuda_lost) {
      fprintf(stderr,
              "gpuscope: not counted: %llu graphics calls (ring buffer full), %llu (no room for their state), %llu "
              "calls inside frames (too many waiting), %llu CUDA calls; %llu fetched functions not probed\n",
              (unsigned long long)s.lost_ringbuf, (unsigned long long)s.lost_state, (unsigned long long)content_dropped,
              (unsigned long long)cuda_lost, (unsigned long long)s.lost_fetches);
    }
    out_.flush();
  }

 private:
  struct Window {
    Percentiles durations;
    uint64_t submits = 0, cmd_buffers = 0, waits = 0, wait_ns = 0, cuda_calls = 0, cuda_launches = 0;
  };
  static std::string ms(uint64_t ns) { return fmt::format("{:.2f}", static_cast<double>(ns) / 1e6); }
  static std::string inside(const Frame& f) {
    std::string s = fmt::format("{} submits ({} command buffers), {} waits {} ms", f.submits, f.cmd_buffers, f.waits,
                                ms(f.wait_ns));
    if (f.cuda_calls) s += fmt::format(", {} CUDA calls ({} launches)", f.cuda_calls, f.cuda_launches);
    if (!f.calls.empty()) {
      s += ";";
      for (auto& [name, n] : f.calls) s += fmt::format(" {} x{}", name, n);
    }
    return s;
  }
  // ts_ns is the frame's start; start_boot_ns the same on CLOCK_BOOTTIME, as BPF stamps it.
  void write_frame(const Frame& f, std::string_view comm, const char* type) {
    JsonLine j(out_.buf());
    j.record(type, static_cast<uint64_t>(static_cast<int64_t>(f.start_ns) + realtime_offset_));
    where_.process(j, static_cast<pid_t>(f.pid), comm);
    j.str("api", gfx_api_name(f.api)).num("number", f.number);
    j.num("start_boot_ns", f.start_ns).num("duration_ns", f.duration_ns());
    j.num("submits", f.submits).num("cmd_buffers", f.cmd_buffers).num("waits", f.waits).num("wait_ns", f.wait_ns);
    j.num("cuda_calls", f.cuda_calls).num("cuda_launches", f.cuda_launches);
    j.begin_object("calls");
    for (auto& [name, n] : f.calls) j.num(name, n);
    j.end_object();
    j.end();
    out_.flush_if_full();
  }

  // Where the container columns go: after PID and COMM.
  static constexpr size_t kWhereAt = 2;
  static Table frames_table(const WhereView& w) {
    return w.table({{"PID", 7},
                    {"COMM", -16},
                    {"API", -6},
                    {"FPS", 7},
                    {"FRAMES", 7},
                    {"P50ms", 8},
                    {"P95ms", 8},
                    {"P99ms", 8},
                    {"MAXms", 8},
                    {"SUBMITS", 8},
                    {"CMDBUFS", 8},
                    {"WAITms/f", 9},
                    {"LAUNCHES", 9}},
                   kWhereAt);
  }

  const FramesOptions& o_;
  Writer out_;
  WhereView where_;
  Table table_;
  const int64_t realtime_offset_ = realtime_minus_boottime_ns();
  std::map<std::pair<uint32_t, GfxApi>, Window> window_;
  std::vector<Frame> slow_;
};

int run_frames(const FramesOptions& o) {
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  FramesView view(o);
  FrameTracker tracker([&](const Frame& f) {
    auto p = tracker.processes().find(f.pid);
    view.frame(f, p == tracker.processes().end() ? "" : p->second.comm);
  });
  GraphicsCollector::Config gc{o.scope};
  if (o.common.verbose)
    gc.on_fetched = [](const GraphicsCollector::FetchedSite& f) {
      fprintf(stderr, "gpuscope: pid %d fetched %s through %s: probing %s+0x%llx\n", f.pid, gfx_call_name(f.call),
              gfx_getter_name(f.getter), f.path.c_str(), static_cast<unsigned long long>(f.file_offset));
    };
  GraphicsCollector gfx(session, std::move(gc),
                        [&](const gs_gfx_event& e, std::string_view comm) { tracker.add(e, comm); });
  std::unique_ptr<TraceCollector> cuda;
  if (o.cuda)
    cuda = std::make_unique<TraceCollector>(
        session,
        TraceCollector::Config{rows_where([](const gs_api_desc& d) { return (d.roles & GS_ROLE_CALL) != 0; }), false,
                               o.scope},
        [&](const gs_call_event& e) {
          tracker.add_cuda(e.pid, e.ts_boot_ns, api_symbol(e.api), api_has_role(e.api, GS_ROLE_LAUNCH),
                           e.layer == GS_LAYER_DRIVER);
        });
  session.start();
  std::vector<std::string> system_libs;
  if (o.scope.pids.empty()) system_libs = gfx.attach_system_libraries();
  for (pid_t pid : o.scope.pids) view.place(pid);
  if (!o.scope.pids.empty()) {
    for (pid_t pid : o.scope.pids)
      if (!gfx.graphics_pids().count(pid))
        throw UsageError("pid " + std::to_string(pid) +
                         " maps no graphics library (libvulkan.so.1, libEGL.so.1, libGLX.so.0, libGL.so.1, "
                         "libOpenGL.so.0, libGLESv2.so.2)");
  } else if (gfx.library_files() == 0) {
    throw UsageError(
        "no Vulkan loader or GL library found (libvulkan.so.1, libEGL.so.1, libGLX.so.0, libGL.so.1, "
        "libOpenGL.so.0, libGLESv2.so.2: none in the dynamic linker's cache or mapped by a process in scope)");
  }
  EventLoop loop(o.common.duration_s);
  session.watch(loop);
  gfx.watch(loop);
  if (cuda) cuda->watch(loop);
  auto last = EventLoop::Clock::now();
  auto exited = [&](bool all) {
    std::vector<uint32_t> gone;
    for (auto& [pid, p] : tracker.processes())
      if (all || !process_running(static_cast<pid_t>(pid))) {
        view.process_end(pid, p, !all || !process_running(static_cast<pid_t>(pid)));
        gone.push_back(pid);
      }
    for (uint32_t pid : gone) tracker.forget(pid);
  };
  loop.every(o.interval_s, [&] {
    gfx.drain();
    if (cuda) cuda->drain();
    tracker.settle(boottime_ns() - kSettleNs);
    auto now = EventLoop::Clock::now();
    view.print(tracker, std::chrono::duration<double>(now - last).count());
    last = now;
    exited(false);
  });
  fprintf(stderr, "gpuscope: watching frames through %zu graphics library files%s; %s. Ctrl-C to end.\n",
          gfx.library_files(), cuda ? " and CUDA calls" : "", fmt::format("printing every {} s", o.interval_s).c_str());
  loop.run();
  session.detach();
  gfx.detach();
  gfx.drain();
  if (cuda) cuda->drain();
  tracker.settle(UINT64_MAX);
  view.print(tracker, std::chrono::duration<double>(EventLoop::Clock::now() - last).count());
  exited(true);
  TraceCollector::Stats cs;
  if (cuda) cs = cuda->stats();
  view.summary(gfx.stats(), tracker.content_dropped(), cuda ? &cs : nullptr);
  return 0;
}

}  // namespace

void register_frames(CLI::App& app) {
  auto [cmd, o] = new_command<FramesOptions>(
      app, "frames", "Frame times of Vulkan, EGL and GLX renderers, and what the slowest frames waited on", run_frames,
      false);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope frames                    # every renderer on the host, a table a second\n"
      "  gpuscope frames -p 1234 --slowest 5\n"
      "  gpuscope frames -c game --json --every-frame -d 10");
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.05, 86400);
  add_number(cmd, "--slowest", o->slowest,
             "The N slowest frames of each interval, with what happened inside (default 3)", "N", 0, 1000);
  cmd->add_flag("--every-frame", o->every_frame, "With --json, a line for every frame");
  cmd->add_flag_callback(
      "--no-cuda", [f = o] { f->cuda = false; }, "Do not trace the CUDA calls inside frames");
}
GPUSCOPE_COMMAND(register_frames, 130);
GPUSCOPE_NEEDS(frames, 100, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {});

}  // namespace gpuscope

// gpuscope timeline: CUDA calls per thread (the trace collector), GPU kernels, copies and
// memsets per stream (libgpuscope-cupti.so's records), launch-to-kernel arrows, device
// counters (the bridge's pinned maps) and the registered timeline sources' spans and marks
// (core/timeline_source.h), written as a Chrome JSON trace for Perfetto.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include "bridge/pin_dir.h"
#include "bridge/reader.h"
#include "copies/copies_collector.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/timeline_source.h"
#include "gputime/gputime_collector.h"
#include "gputime/timeline.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"
#include "trace/trace.h"

namespace gpuscope {

namespace {

// Device counters from the bridge's pins, sampled while the timeline records.
class BridgeCounters {
 public:
  explicit BridgeCounters(const std::string& dir) : reader_(dir) {}
  bool present() const { return reader_.present(); }
  // The devices of a tick not sampled yet and at most 2 s old, on CLOCK_BOOTTIME.
  void sample(std::vector<CounterSample>& out) {
    auto t = reader_.next_tick(2000);
    if (!t) return;
    for (auto& d : t->devices)
      if (d.m.timestamp_ns)
        out.push_back({d.m.timestamp_ns - static_cast<uint64_t>(t->meta.clock_offset_ns), d.gpu, d.m.sm_util_pct,
                       d.m.mem_used_bytes});
  }

 private:
  BridgeReader reader_;
};

// The CPU side of the timeline: each call's exit event, up to --max-calls.
class CallRecorder {
 public:
  CallRecorder(TimelineInput& in, uint32_t max_calls) : in_(in), max_(max_calls) {}
  void operator()(const gs_call_event& e) {
    const gs_api_desc& d = api_desc(e.api);
    if (e.phase != GS_PHASE_EXIT) {
      if (d.roles & GS_ROLE_COPY) enter_copy(e, d);
      return;
    }
    Copy copy;
    if (d.roles & GS_ROLE_COPY) copy = exit_copy(e);
    if (in_.calls.size() >= max_) {
      over_++;
      return;
    }
    in_.calls.push_back({e.ts_boot_ns - e.dur_ns, e.dur_ns, e.pid, e.tid, e.ret, e.api, e.layer, copy.dir, copy.bytes});
    auto& tn = in_.threads[{e.pid, e.tid}];
    if (tn.empty()) tn.assign(e.thread, strnlen(e.thread, sizeof e.thread));
    if (!in_.comms.count(e.pid)) in_.comms[e.pid] = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  }
  uint64_t over() const { return over_; }

 private:
  // A copy's direction and bytes come with its entry event; its span is made at its exit. A
  // runtime copy's driver copy runs inside it: a stack per thread.
  struct Copy {
    uint16_t api = 0;
    const char* dir = nullptr;
    uint64_t bytes = 0;
  };
  void enter_copy(const gs_call_event& e, const gs_api_desc& d) {
    int dir = d.copy_dir               ? d.copy_dir - 1
              : (e.fields & GS_F_KIND) ? static_cast<int>(std::min<uint32_t>(e.args.kind, GS_DIR_DEFAULT))
              : d.kind_fixed           ? d.kind_fixed - 1
                                       : -1;  // cudaMemcpyKind and enum gs_copy_dir number H2H..default alike
    uint64_t bytes = (e.fields & GS_F_SIZE) ? e.args.size_bytes * (d.elem_bytes ? d.elem_bytes : 1) : 0;
    if (pending_.size() > kMaxThreads) pending_.clear();  // threads that ended inside a copy
    auto& v = pending_[e.tid];
    if (v.size() < 8) v.push_back({e.api, dir >= 0 ? copy_direction_name(static_cast<unsigned>(dir)) : nullptr, bytes});
  }
  Copy exit_copy(const gs_call_event& e) {
    auto it = pending_.find(e.tid);
    if (it == pending_.end()) return {};
    Copy c;
    while (!it->second.empty()) {
      c = it->second.back();
      it->second.pop_back();
      if (c.api == e.api) break;
      c = {};
    }
    if (it->second.empty()) pending_.erase(it);
    return c;
  }
  static constexpr size_t kMaxThreads = 65536;
  TimelineInput& in_;
  uint32_t max_;
  uint64_t over_ = 0;
  std::map<uint32_t, std::vector<Copy>> pending_;  // tid -> its copies entered, innermost last
};

// Graphics calls on their threads and the frames they make, up to --max-calls calls.
class GraphicsRecorder {
 public:
  GraphicsRecorder(TimelineInput& in, uint32_t max_calls)
      : in_(in), max_(max_calls), frames_([this](const Frame& f) {
          in_.frames.push_back({f.start_ns, f.duration_ns(), f.pid, f.number, gfx_api_name(f.api), f.submits, f.waits,
                                f.cuda_launches, f.wait_ns});
        }) {}
  void operator()(const gs_gfx_event& e, std::string_view comm) {
    frames_.add(e, comm);
    if (in_.graphics.size() >= max_) {
      over_++;
      return;
    }
    const bool end =
        e.call == GS_GFX_VK_QUEUE_PRESENT || e.call == GS_GFX_EGL_SWAP_BUFFERS || e.call == GS_GFX_GLX_SWAP_BUFFERS;
    in_.graphics.push_back({{e.start_ns, e.dur_ns, e.pid}, e.tid, gfx_call_name(e.call), end});
    auto& tn = in_.threads[{e.pid, e.tid}];
    if (tn.empty()) tn.assign(e.thread, strnlen(e.thread, sizeof e.thread));
    if (!in_.comms.count(e.pid)) in_.comms[e.pid] = std::string(comm);
  }
  // The CUDA calls inside frames, from the trace collector's entries.
  void cuda(const gs_call_event& e) {
    if (e.phase == GS_PHASE_ENTER)
      frames_.add_cuda(e.pid, e.ts_boot_ns, api_symbol(e.api), api_has_role(e.api, GS_ROLE_LAUNCH),
                       e.layer == GS_LAYER_DRIVER);
  }
  void finish() { frames_.settle(UINT64_MAX); }
  uint64_t over() const { return over_; }

 private:
  TimelineInput& in_;
  uint32_t max_;
  FrameTracker frames_;
  uint64_t over_ = 0;
};

// The registered timeline sources, made in their order; what each took goes into the input.
class Sources {
 public:
  Sources(UprobeSession& session, const TimelineOptions& o) {
    for (auto& e : timeline_sources()) {
      sources_.push_back(e.make(session, o));
      info_.push_back(e.info);
    }
  }
  // After session.start().
  void start(UprobeSession& session, EventLoop& loop) {
    for (auto& s : sources_) s->attach(session);
    for (auto& s : sources_) s->watch(loop);
  }
  void drain() {
    for (auto& s : sources_) s->drain();
  }
  // After session.detach(): the rest, into the timeline's input.
  void finish(TimelineInput& in) {
    for (auto& s : sources_) s->detach();
    drain();
    for (size_t i = 0; i < sources_.size(); i++) {
      TimelineItems items;
      items.info = info_[i];
      sources_[i]->take(items);
      for (auto& [pid, comm] : items.comms) in.comms.emplace(pid, comm);
      for (auto& [reason, n] : items.lost) in.lost[reason] = n;
      in.sources.push_back(std::move(items));
    }
  }

 private:
  std::vector<std::unique_ptr<TimelineSource>> sources_;
  std::vector<TimelineSourceInfo> info_;
};

// The GPU side, the notes on what is absent and the losses, once the recording has ended.
void finish_input(TimelineInput& in, const GpuTimeCollector& gpu, const BridgeCounters& bridge,
                  const TraceCollector::Stats& ts, const GpuTimeCollector::Stats& gs, uint64_t calls_over) {
  in.gpu = gpu.records();
  in.kernel_name = [&gpu](uint32_t pid, uint32_t id) { return gpu.name(pid, id); };
  for (auto& g : in.gpu)
    if (!in.comms.count(g.pid)) in.comms[g.pid] = gpu.kept_comm(g.pid);
  if (in.gpu.empty())
    in.gpu_note = std::string("none: GPU spans need ") + kCuptiLibName +
                  " in the workload (CUDA_INJECTION64_PATH=" + cupti_lib_beside_self() + ", or gpuscope run -- CMD)";
  if (in.counters.empty())
    in.counter_note =
        bridge.present() ? "none: the bridge's pins were stale" : "none: start gpuscope bridge for device counters";
  in.lost = {{"cpu_ringbuf", ts.lost_ringbuf}, {"cpu_state", ts.lost_state},
             {"cpu_over_bound", calls_over},   {"gpu_ringbuf", gs.lost_ringbuf},
             {"gpu_unreadable", gs.lost_read}, {"gpu_over_hand_off", gs.lost_too_many},
             {"gpu_over_bound", gs.lost_kept}, {"gpu_cupti_dropped", gs.cupti_dropped},
             {"gpu_names", gs.lost_names}};
}

void summary(const TimelineOptions& o, const TimelineInput& in, const TimelineStats& st,
             const TraceCollector::Stats& ts, uint64_t calls_over, const GpuTimeCollector::Stats& gs) {
  Writer w;
  if (o.common.json) {
    JsonLine j(w.buf());
    j.record("summary", realtime_ns()).str("file", o.out).num("cpu_spans", st.cpu_spans).num("gpu_spans", st.gpu_spans);
    j.num("flows", st.flows).num("counters", st.counters).num("cpu_lost", ts.lost_ringbuf + ts.lost_state + calls_over);
    j.num("graphics_spans", st.graphics_spans).num("frames", st.frame_spans);
    for (size_t i = 0; i < in.sources.size(); i++) j.num(in.sources[i].info.summary_key, st.source_items[i]);
    j.num("gpu_lost", gs.lost_ringbuf + gs.lost_read + gs.lost_too_many + gs.lost_kept + gs.cupti_dropped);
    j.boolean("gpu_library", !in.gpu.empty()).end();
  } else {
    auto out = std::back_inserter(w.buf());
    fmt::format_to(out,
                   "wrote {}: {} CPU spans, {} GPU spans, {} launch arrows, {} counter samples, {} graphics calls, {} "
                   "frames",
                   o.out, st.cpu_spans, st.gpu_spans, st.flows, st.counters, st.graphics_spans, st.frame_spans);
    for (size_t i = 0; i < in.sources.size(); i++)
      fmt::format_to(out, ", {} {}", st.source_items[i], in.sources[i].info.summary_text);
    fmt::format_to(out, "{}\n", in.gpu.empty() ? std::string(" (") + in.gpu_note + ")" : "");
  }
}

int run_timeline(const TimelineOptions& o) {
  check_output_file("-o", o.out);
  check_pin_dir(o.pin_dir, false);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  TimelineInput in;
  CallRecorder calls(in, o.max_calls);
  GraphicsRecorder graphics(in, o.max_calls);
  TraceCollector trace(session, {select_apis({}, "all"), true, o.scope, 16384}, [&](const gs_call_event& e) {
    calls(e);
    graphics.cuda(e);
  });
  GraphicsCollector gfx(session, {o.scope}, std::ref(graphics));
  GpuTimeCollector::Config gc{o.cupti_libs, true};
  gc.mode = GS_GT_MODE_TIMELINE;  // launch calls too: the arrows from each launch to its kernel
  GpuTimeCollector gpu(session, std::move(gc));
  Sources sources(session, o);
  BridgeCounters bridge(o.pin_dir);
  session.start();
  if (o.scope.pids.empty()) gfx.attach_system_libraries();
  gpu.start();
  EventLoop loop(o.common.duration_s);
  sources.start(session, loop);
  trace.watch(loop);
  gfx.watch(loop);
  session.watch(loop);
  gpu.watch(loop);
  loop.every(0.05, [&] { bridge.sample(in.counters); });
  fprintf(stderr,
          "gpuscope: recording a timeline (%zu probes in %zu CUDA objects; GPU records from %zu copies of %s; "
          "counters %s). Ctrl-C to end.\n",
          session.stats().probes, session.stats().objects, gpu.stats().files, kCuptiLibName,
          bridge.present() ? "from the bridge" : "absent: no bridge pins");
  loop.run();
  trace.drain();
  sources.drain();
  gpu.stop();
  session.detach();
  gfx.detach();
  trace.drain();
  gfx.drain();
  graphics.finish();

  const auto ts = trace.stats();
  const auto gs = gpu.stats();
  finish_input(in, gpu, bridge, ts, gs, calls.over());
  sources.finish(in);
  const auto grs = gfx.stats();
  in.lost["graphics_ringbuf"] = grs.lost_ringbuf;
  in.lost["graphics_state"] = grs.lost_state;
  in.lost["graphics_over_bound"] = graphics.over();
  std::string doc;
  TimelineStats st = write_timeline(in, doc);
  write_file_atomic(o.out, doc);
  report_gpu_losses(gs);
  summary(o, in, st, ts, calls.over(), gs);
  return 0;
}

}  // namespace

void register_timeline(CLI::App& app) {
  auto [cmd, o] = new_command<TimelineOptions>(
      app, "timeline", "Write a Perfetto/Chrome trace of CUDA calls, GPU activity, graphics frames and counters",
      run_timeline);
  cmd->add_option("-o,--output", o->out, "Trace file to write (default gpuscope-timeline.json)");
  cmd->add_option("--pin-dir", o->pin_dir, "bpffs directory of the bridge's pins (default /sys/fs/bpf)");
  cmd->add_option("--kmsg", o->kmsg,
                  "The kernel log whose Xid lines are marked: /dev/kmsg (default), or a saved log to replay");
  cmd->add_option("--cupti-lib", o->cupti_libs,
                  "Also probe this copy of libgpuscope-cupti.so (the one beside gpuscope is always probed)");
  add_number(cmd, "--max-calls", o->max_calls, "CPU calls kept (default 2000000); more are counted as lost", "calls", 1,
             1e9);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope timeline -p 1234 -d 5 -o step.json     # then open step.json in ui.perfetto.dev\n"
      "  gpuscope timeline -c python3 -d 10\n"
      "  gpuscope timeline -c python3 -d 10 --kmsg saved-dmesg.txt  # Xids from a saved log too\n"
      "GPU spans need the workload to run with CUDA_INJECTION64_PATH=<dir of gpuscope>/libgpuscope-cupti.so\n"
      "(gpuscope run -- CMD sets it); device counters need gpuscope bridge running.");
}
GPUSCOPE_COMMAND(register_timeline, 110);
GPUSCOPE_NEEDS(timeline, 90, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {});

}  // namespace gpuscope

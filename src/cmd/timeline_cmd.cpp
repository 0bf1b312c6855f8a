// gpuscope timeline: CUDA calls per thread (the trace collector), GPU kernels, copies and
// memsets per stream (libgpuscope-cupti.so's records), launch-to-kernel arrows, device
// counters (the bridge's pinned maps), NCCL calls per rank (the NCCL collector) and GPU errors
// (the errors collector's Xids and sticky CUDA errors), written as a Chrome JSON trace for Perfetto.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

#include "bridge/pin_dir.h"
#include "bridge/reader.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"
#include "errors/errors_collector.h"
#include "gputime/gputime_collector.h"
#include "gputime/timeline.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"
#include "nccl/nccl_collector.h"
#include "trace/trace.h"

namespace gpuscope {

namespace {

struct TimelineOptions {
  CommonFlags common;
  Scope scope;
  std::string out = "gpuscope-timeline.json";
  std::string pin_dir = "/sys/fs/bpf";
  std::string kmsg = "/dev/kmsg";
  std::vector<std::string> cupti_libs;
  uint32_t max_calls = 2000000;
};

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
    if (e.phase != GS_PHASE_EXIT) return;
    if (in_.calls.size() >= max_) {
      over_++;
      return;
    }
    in_.calls.push_back({e.ts_boot_ns - e.dur_ns, e.dur_ns, e.pid, e.tid, e.ret, e.api, e.layer});
    auto& tn = in_.threads[{e.pid, e.tid}];
    if (tn.empty()) tn.assign(e.thread, strnlen(e.thread, sizeof e.thread));
    if (!in_.comms.count(e.pid)) in_.comms[e.pid] = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  }
  uint64_t over() const { return over_; }

 private:
  TimelineInput& in_;
  uint32_t max_;
  uint64_t over_ = 0;
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

// Each rank's calls on communicators, up to --max-calls, on CLOCK_BOOTTIME.
class NcclRecorder {
 public:
  NcclRecorder(TimelineInput& in, uint32_t max_calls) : in_(in), max_(max_calls) {
    timespec b, m;
    clock_gettime(CLOCK_BOOTTIME, &b);
    clock_gettime(CLOCK_MONOTONIC, &m);
    boot_minus_mono_ns_ = (b.tv_sec - m.tv_sec) * 1000000000ll + (b.tv_nsec - m.tv_nsec);
  }
  void operator()(const NcclCall& c) {
    if (in_.nccl.size() >= max_) {
      over_++;
      return;
    }
    NcclSpan s;
    s.start_ns = c.entry_mono_ns + boot_minus_mono_ns_;
    s.dur_ns = c.call_ns;
    s.pid = static_cast<uint32_t>(c.rank.pid);
    s.tid = c.tid;
    s.op = nccl_op_name(c.op);
    s.bytes = c.bytes;
    s.comm_id = nccl_comm_id_str(c.rank.comm_id);
    s.rank = c.rank.rank;
    s.nranks = c.rank.nranks;
    s.peer = c.peer;
    if (c.seq != GS_NCCL_NO_SEQ) s.seq = c.seq;
    if (c.ret) s.error = nccl_result_name(c.ret);
    if (!in_.comms.count(s.pid) && !c.rank.process.empty()) in_.comms[s.pid] = c.rank.process;
    in_.nccl.push_back(std::move(s));
  }
  uint64_t over() const { return over_; }

 private:
  TimelineInput& in_;
  uint32_t max_;
  int64_t boot_minus_mono_ns_ = 0;
  uint64_t over_ = 0;
};

// What the timeline marks of one GPU error, on CLOCK_BOOTTIME.
ErrorMark error_mark(const GpuError& r, const std::map<uint64_t, const GpuError*>& by_id, int64_t real_minus_boot) {
  ErrorMark m;
  m.ts_ns = r.realtime_ns - real_minus_boot;
  m.id = r.id;
  m.joined = r.joined;
  m.pid = r.pid;
  m.tid = r.tid;
  m.sticky = r.kind == ErrorKind::kSticky && r.pid;
  if (m.sticky) {
    m.name = r.code_name + " at " + r.api_name;
    m.code = r.code;
    m.code_name = r.code_name;
    m.api = r.api_name;
    m.layer = r.layer;
    for (auto& k : r.kernels_since) m.kernels.push_back(k.kernel);
    m.kernels_truncated = r.kernels_truncated;
    if (auto x = r.joined ? by_id.find(*r.joined) : by_id.end(); x != by_id.end()) m.joined_xid = x->second->xid;
    return m;
  }
  m.name = r.kind == ErrorKind::kXid ? fmt::format("Xid {}", r.xid) : "NVML " + r.nvml_event;
  m.xid = r.kind == ErrorKind::kXid ? r.xid : 0;
  m.event = r.nvml_event;
  m.meaning = r.info.meaning;
  m.cls = xid_class_name(r.info.cls);
  m.action = xid_action_name(r.info.action);
  m.source = r.from_kmsg && r.from_nvml ? "kmsg+nvml" : r.from_kmsg ? "kmsg" : "nvml";
  m.message = r.message;
  m.device = r.device.index;
  m.uuid = r.device.uuid;
  m.pci_bus_id = r.device.pci_bus_id;
  return m;
}

// GPU errors and NCCL calls: their collectors, and what the timeline takes of them.
class ErrorsAndNccl {
 public:
  ErrorsAndNccl(UprobeSession& session, const TimelineOptions& o)
      : nccl_rec_(in_, o.max_calls),
        nccl_(session, {o.scope, std::ref(nccl_rec_)}),
        errors_(session, errors_config(o)),
        host_wide_(o.scope.pids.empty()) {
    if (!errors_.kmsg_error().empty())
      fprintf(stderr, "gpuscope: %s: no Xids in the timeline; sticky CUDA errors are still marked\n",
              errors_.kmsg_error().c_str());
  }
  // After session.start().
  void start(UprobeSession& session, EventLoop& loop) {
    errors_.start(session);
    if (host_wide_) nccl_.attach_system_libraries();
    errors_.watch(loop);
    nccl_.watch(loop);
    loop.every(1, [this] { nccl_.take(); });  // the per-interval view it also keeps, let go
  }
  void drain() {
    errors_.poll();
    nccl_.drain();
  }
  // After session.detach(): the rest, into the timeline's input.
  void finish(TimelineInput& in) {
    errors_.detach();
    nccl_.detach();
    drain();
    in.nccl = std::move(in_.nccl);
    for (auto& [pid, comm] : in_.comms) in.comms.emplace(pid, comm);
    const auto records = errors_.records();
    std::map<uint64_t, const GpuError*> by_id;
    for (auto& r : records) by_id[r.id] = &r;
    const int64_t real_minus_boot = realtime_minus_boottime_ns();
    for (auto& r : records) {
      in.errors.push_back(error_mark(r, by_id, real_minus_boot));
      if (r.pid && !r.comm.empty()) in.comms.emplace(*r.pid, r.comm);
    }
    const auto es = errors_.stats();
    const auto ns = nccl_.stats();
    in.lost["errors_kmsg_lost"] = es.kmsg.lost;
    in.lost["errors_sticky_ringbuf"] = es.bpf_lost_events;
    in.lost["errors_dropped"] = es.records_dropped;
    in.lost["nccl_ringbuf"] = ns.lost_ringbuf;
    in.lost["nccl_state"] = ns.lost_state;
    in.lost["nccl_over_bound"] = nccl_rec_.over();
  }

 private:
  static ErrorsCollector::Config errors_config(const TimelineOptions& o) {
    ErrorsCollector::Config c;
    c.scope = o.scope;
    c.kmsg_path = o.kmsg;
    return c;
  }
  TimelineInput in_;  // NCCL spans as they come, apart from the CPU side's recorders
  NcclRecorder nccl_rec_;
  NcclCollector nccl_;
  ErrorsCollector errors_;
  bool host_wide_;
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
    j.num("nccl_spans", st.nccl_spans).num("errors", st.error_marks);
    j.num("gpu_lost", gs.lost_ringbuf + gs.lost_read + gs.lost_too_many + gs.lost_kept + gs.cupti_dropped);
    j.boolean("gpu_library", !in.gpu.empty()).end();
  } else {
    fmt::format_to(std::back_inserter(w.buf()),
                   "wrote {}: {} CPU spans, {} GPU spans, {} launch arrows, {} counter samples, {} graphics calls, {} "
                   "frames, {} NCCL calls, {} GPU errors{}\n",
                   o.out, st.cpu_spans, st.gpu_spans, st.flows, st.counters, st.graphics_spans, st.frame_spans,
                   st.nccl_spans, st.error_marks, in.gpu.empty() ? std::string(" (") + in.gpu_note + ")" : "");
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
  ErrorsAndNccl errors_nccl(session, o);
  BridgeCounters bridge(o.pin_dir);
  session.start();
  if (o.scope.pids.empty()) gfx.attach_system_libraries();
  gpu.start();
  EventLoop loop(o.common.duration_s);
  errors_nccl.start(session, loop);
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
  errors_nccl.drain();
  gpu.stop();
  session.detach();
  gfx.detach();
  trace.drain();
  gfx.drain();
  graphics.finish();

  const auto ts = trace.stats();
  const auto gs = gpu.stats();
  finish_input(in, gpu, bridge, ts, gs, calls.over());
  errors_nccl.finish(in);
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

}  // namespace gpuscope

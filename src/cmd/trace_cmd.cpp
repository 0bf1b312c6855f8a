#include "core/cli.h"
#include "core/clock.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "kernels/kernels_collector.h"
#include "trace/trace.h"

namespace gpuscope {

namespace {

struct TraceOptions {
  CommonFlags common;
  Scope scope;
  std::vector<std::string> apis;
  std::string layer = "all";
  bool hide_exits = false;
  bool no_timestamps = false;
  uint32_t ringbuf_kb = 4096;
};

// The trace view: each call as a table row or a JSON line, and the closing summary.
class TraceView {
 public:
  explicit TraceView(const TraceOptions& o) : o_(o), where_(o.scope) {
    fmt_.realtime_offset_ns = realtime_minus_boottime_ns();
    fmt_.timestamps = !o.no_timestamps;
    fmt_.cgroups = &cgroups_;
    fmt_.where = &where_;
  }
  void name_kernels_with(KernelsCollector* k) {
    if (k) fmt_.kernel_name = [k](uint32_t pid, uint64_t h, bool host) { return k->name_of(pid, h, host); };
  }
  void header() {
    if (!o_.common.json) format_table_header(fmt_, out_.buf());
    out_.flush();
  }
  void event(const gs_call_event& e) {
    if (e.phase == GS_PHASE_EXIT && o_.hide_exits) return;
    if (o_.common.json)
      format_event_json(e, fmt_, out_.buf());
    else
      format_event_table(e, fmt_, out_.buf());
    out_.flush_if_full();
  }
  void flush() { out_.flush(); }
  void summary(const TraceCollector::Stats& t, const SessionStats& s) {
    if (o_.common.json) {
      JsonLine j(out_.buf());
      j.record("summary", realtime_ns()).num("events", t.delivered).num("lost", t.lost_ringbuf);
      j.num("lost_ringbuf_full", t.lost_ringbuf).num("untracked_calls_state_full", t.lost_state);
      j.num("objects", s.objects).num("probes", s.probes).num("attach_failures", s.attach_failures);
      j.num("attach_retries", s.attach_retries).num("notices_lost", s.notices_lost).end();
    } else {
      fmt::format_to(std::back_inserter(out_.buf()),
                     "\n{} events delivered, {} lost (ring buffer full); {} calls without exit state (map full); "
                     "{} probes in {} objects\n",
                     t.delivered, t.lost_ringbuf, t.lost_state, s.probes, s.objects);
    }
    out_.flush();
  }

 private:
  const TraceOptions& o_;
  Writer out_;
  FormatContext fmt_;
  CgroupNames cgroups_;
  WhereView where_;
};

int run_trace(const TraceOptions& o) {
  if (o.ringbuf_kb & (o.ringbuf_kb - 1)) throw UsageError("--ringbuf-kb must be a power of two");
  std::vector<bool> apis = select_apis(o.apis, o.layer);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  TraceView view(o);
  TraceCollector trace(session, {apis, !o.hide_exits, o.scope, o.ringbuf_kb},
                       [&](const gs_call_event& e) { view.event(e); });
  // Launches are named in userspace, from the naming calls' probes: the launch path pays nothing.
  std::unique_ptr<KernelsCollector> names;
  for (unsigned i = 0; i < GS_API_COUNT && !names; i++)
    if (apis[i] && (api_desc(i).roles & GS_ROLE_LAUNCH))
      names = std::make_unique<KernelsCollector>(session, KernelsCollector::Config{o.scope, CountLayer::Auto, true});
  view.name_kernels_with(names.get());
  session.start();
  if (names) names->start(session);
  EventLoop loop(o.common.duration_s);
  trace.watch(loop);
  if (names) names->watch(loop);
  session.watch(loop);
  loop.after_wakeup([&] {
    view.flush();
    if (names) names->tick();
  });
  auto st = session.stats();
  fprintf(stderr,
          "gpuscope: tracing %zu probes in %zu CUDA objects; new copies are picked up as they are mapped. Ctrl-C to "
          "end.\n",
          st.probes, st.objects);
  view.header();
  loop.run();
  trace.drain();
  view.summary(trace.stats(), session.stats());
  session.detach();
  return 0;
}

}  // namespace

void register_trace(CLI::App& app) {
  auto [cmd, o] = new_command<TraceOptions>(app, "trace", "Trace CUDA runtime and driver API calls", run_trace);
  cmd->add_option("--api", o->apis, "Trace only these APIs (comma-separated; variants included)")->delimiter(',');
  cmd->add_option("--layer", o->layer, "runtime, driver or all (default all)")->type_name("LAYER");
  cmd->add_flag("-r", o->hide_exits, "Entry only: no exit probes, no return codes");
  cmd->add_flag("-t", o->no_timestamps, "Drop timestamps");
  add_number(cmd, "--ringbuf-kb", o->ringbuf_kb, "Ring buffer size in KiB, a power of two (default 4096)", "KiB", 4,
             1u << 20);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope trace                     # every CUDA call on the host\n"
      "  gpuscope trace -p 1234 --json      # one process, JSON lines\n"
      "  gpuscope trace --api cudaMalloc,cuMemAlloc_v2 -d 10\n"
      "  gpuscope trace --layer driver -c python3");
}
GPUSCOPE_COMMAND(register_trace, 10);
GPUSCOPE_NEEDS(trace, 10, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {});

}  // namespace gpuscope

#include "trace/trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <unordered_set>

#include <bpf/bpf.h>

#include "core/bpf.h"
#include "core/clock.h"
#include "core/discovery.h"
#include "core/output.h"
#include "trace.skel.h"

namespace gpuscope {

namespace {

struct SkelDeleter {
  void operator()(trace_bpf* s) const { trace_bpf__destroy(s); }
};

// Every symbol name the API table can attach to, variants included.
std::unordered_set<std::string> wanted_symbols() {
  std::unordered_set<std::string> names;
  for (unsigned i = 0; i < GS_API_COUNT; i++)
    for (const char* suf : kApiVariantSuffixes) names.insert(std::string(api_symbol(i)) + suf);
  return names;
}

class Tracer {
 public:
  explicit Tracer(const TraceOptions& o) : o_(o), selected_(select_apis(o.apis, o.layer)) {}
  ~Tracer() { destroy_links(links_); }

  int run();

 private:
  void open_and_load();
  void attach_object(const CudaObject& obj);
  void handle(const void* data, size_t size);
  void summary();

  const TraceOptions& o_;
  std::vector<bool> selected_;
  std::unique_ptr<trace_bpf, SkelDeleter> skel_;
  std::vector<Link> links_;
  Writer out_;
  FormatContext fmt_;
  CgroupNames cgroups_;
  ProcessNames names_;
  uint64_t delivered_ = 0;
  size_t objects_ = 0;
  size_t attach_failures_ = 0;
  size_t sites_ = 0;
  bool multi_ = false;
  bool exec_hook_ = true;
  size_t loader_hooks_ = 0;
};

void Tracer::open_and_load() {
  multi_ = open_and_load_uprobes(skel_, trace_bpf__open, trace_bpf__load, [&](trace_bpf* skel) {
    auto* ro = skel->rodata;
    ro->emit_exit = !o_.hide_exits;
    ro->emit_enter = true;
    set_comm_filter(ro, o_.comm);
    ro->wakeup_bytes = std::min<uint64_t>(64 * 1024, o_.ringbuf_kb * 1024u / 4);
    if (bpf_map__set_max_entries(skel->maps.events, o_.ringbuf_kb * 1024u) != 0)
      throw UsageError("--ringbuf-kb: cannot size the ring buffer to " + std::to_string(o_.ringbuf_kb) + " KiB");
    return std::vector<bpf_program*>{skel->progs.gs_enter, skel->progs.gs_exit};
  });
  if (bpf_link* l = bpf_program__attach(skel_->progs.gs_exec))
    links_.emplace_back(l);
  else
    exec_hook_ = false;
}

void Tracer::attach_object(const CudaObject& obj) {
  objects_++;
  UprobeMultiTarget sites = collect_sites(obj, GS_API_COUNT, api_symbol, [&](unsigned api) { return selected_[api]; });
  size_t before = links_.size();
  AttachTally tally;
  for (pid_t pid : o_.pids.empty() ? std::vector<pid_t>{-1} : o_.pids) {
    if (sites.offsets.empty()) break;
    sites.pid = pid;
    sites.retprobe = false;
    attach_sites(skel_->progs.gs_enter, sites, multi_, links_, tally);
    if (o_.hide_exits) continue;
    sites.retprobe = true;
    attach_sites(skel_->progs.gs_exit, sites, multi_, links_, tally);
  }
  sites_ += tally.sites;
  attach_failures_ += tally.failures;
  if (o_.verbose || (!tally.err.empty() && links_.size() == before))
    fprintf(stderr, "gpuscope: %s (pid %d): %zu probe sites%s%s\n", obj.path.c_str(), obj.seen_in,
            sites.offsets.size(), tally.err.empty() ? "" : ", attach failed: ", tally.err.c_str());
}

void Tracer::handle(const void* data, size_t size) {
  if (size < sizeof(gs_call_event)) return;
  gs_call_event e;
  memcpy(&e, data, sizeof e);
  normalize_event(e);
  auto pname = names_.name(e.pid, e.tid, std::string_view(e.thread, strnlen(e.thread, GS_COMM_LEN)));
  memset(e.comm, 0, sizeof e.comm);
  memcpy(e.comm, pname.data(), std::min(pname.size(), sizeof e.comm - 1));
  delivered_++;
  if (e.phase == GS_PHASE_EXIT && o_.hide_exits) return;
  if (o_.json)
    format_event_json(e, fmt_, out_.buf());
  else
    format_event_table(e, fmt_, out_.buf());
}

void Tracer::summary() {
  uint64_t lost_rb = percpu_sum(bpf_map__fd(skel_->maps.drops), GS_DROP_RINGBUF);
  uint64_t lost_state = percpu_sum(bpf_map__fd(skel_->maps.drops), GS_DROP_STATE_FULL);
  if (o_.json) {
    JsonLine(out_.buf())
        .str("type", "summary")
        .num("events", delivered_)
        .num("lost", lost_rb)
        .num("lost_ringbuf_full", lost_rb)
        .num("untracked_calls_state_full", lost_state)
        .num("objects", objects_)
        .num("probes", sites_)
        .num("attach_failures", attach_failures_)
        .end();
  } else {
    fmt::format_to(std::back_inserter(out_.buf()),
                   "\n{} events delivered, {} lost (ring buffer full); {} calls without exit state (map full); "
                   "{} probes in {} objects\n",
                   delivered_, lost_rb, lost_state, sites_, objects_);
  }
  out_.flush();
}

int Tracer::run() {
  for (pid_t pid : o_.pids)
    if (!pid_exists(pid)) throw UsageError("pid " + std::to_string(pid) + " does not exist");
  auto names = wanted_symbols();
  Discovery disc([&](std::string_view n) { return names.count(std::string(n)) > 0; }, o_.pids);
  std::vector<CudaObject> initial;
  for (const auto& lib : o_.libs) initial.push_back(disc.add_path(lib));
  require_bpf_privileges();

  set_libbpf_verbose(o_.verbose);
  open_and_load();
  fmt_.realtime_offset_ns = realtime_minus_boottime_ns();
  fmt_.timestamps = !o_.no_timestamps;
  fmt_.cgroups = &cgroups_;

  if (o_.pids.empty())
    for (auto& obj : disc.scan_ld_cache()) initial.push_back(std::move(obj));
  for (auto& obj : disc.scan_processes()) initial.push_back(std::move(obj));
  for (const auto& obj : initial) attach_object(obj);
  if (o_.pids.empty()) loader_hooks_ += attach_loader_hooks(disc, skel_->progs.gs_dl_change, links_, o_.verbose);

  RingBuffer rb(bpf_map__fd(skel_->maps.events), [this](const void* d, size_t n) { handle(d, n); });
  StopControl stop(o_.duration_s);
  fprintf(stderr, "gpuscope: tracing %zu probes in %zu CUDA objects; new copies are picked up as they are mapped. Ctrl-C to end.\n",
          sites_, objects_);
  if (!o_.json) format_table_header(fmt_, out_.buf());
  out_.flush();

  // Without -p, processes are rescanned when the BPF side says their mappings changed
  // (exec, or the dynamic linker's dlopen hook), and all of them only every few seconds as
  // a safety net; with -p, or without those hooks, the watched pids every 400 ms.
  const bool event_driven = o_.pids.empty() && exec_hook_ && loader_hooks_ > 0;
  const auto full_period = event_driven ? std::chrono::seconds(5) : std::chrono::milliseconds(400);
  if (o_.verbose)
    fprintf(stderr, "gpuscope: library discovery: %s (%zu dynamic-linker hooks, exec hook %s)\n",
            event_driven ? "on exec/dlopen, full rescan every 5 s" : "rescan every 400 ms", loader_hooks_,
            exec_hook_ ? "on" : "off");
  auto next_full = std::chrono::steady_clock::now() + full_period;
  while (!stop.should_stop()) {
    rb.poll(100);
    out_.flush();
    auto now = std::chrono::steady_clock::now();
    if (event_driven) {
      auto pids = take_pids(bpf_map__fd(skel_->maps.maps_changed));
      if (!pids.empty())
        for (const auto& obj : disc.scan_processes(&pids)) attach_object(obj);
    }
    if (now < next_full) continue;
    next_full = now + full_period;
    for (const auto& obj : disc.scan_processes()) attach_object(obj);
    loader_hooks_ += attach_loader_hooks(disc, skel_->progs.gs_dl_change, links_, o_.verbose);
    if (!o_.pids.empty()) {
      bool any = false;
      for (pid_t p : o_.pids) any |= pid_exists(p);
      if (!any) break;
    }
  }
  rb.drain();
  summary();
  destroy_links(links_);
  return 0;
}

}  // namespace

int run_trace(const TraceOptions& opts) {
  Tracer t(opts);
  return t.run();
}

}  // namespace gpuscope

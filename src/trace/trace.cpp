#include "trace/trace.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cstring>

#include "trace.skel.h"

namespace gpuscope {

TraceCollector::TraceCollector(UprobeSession& session, Config cfg, Sink sink)
    : cfg_(std::move(cfg)), sink_(std::move(sink)), skel_(nullptr, trace_bpf__destroy) {
  bool multi = open_and_load_uprobes(skel_, trace_bpf__open, trace_bpf__load, [&](trace_bpf* skel) {
    auto* ro = skel->rodata;
    ro->emit_exit = cfg_.exits;
    ro->emit_enter = true;
    apply_scope(skel, cfg_.scope);
    ro->wakeup_bytes = std::min<uint64_t>(64 * 1024, cfg_.ringbuf_kb * 1024u / 4);
    if (bpf_map__set_max_entries(skel->maps.events, cfg_.ringbuf_kb * 1024u) != 0)
      throw UsageError("--ringbuf-kb: cannot size the ring buffer to " + std::to_string(cfg_.ringbuf_kb) + " KiB");
    return std::vector<bpf_program*>{skel->progs.gs_enter, skel->progs.gs_exit};
  });
  std::vector<SiteProbe> probes{{skel_->progs.gs_enter, false, cfg_.apis}};
  if (cfg_.exits) probes.push_back({skel_->progs.gs_exit, true, cfg_.apis});
  session.add(std::move(probes), multi);
  rb_ =
      std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.events), [this](const void* d, size_t n) { handle(d, n); });
}

TraceCollector::~TraceCollector() = default;

void TraceCollector::watch(EventLoop& loop) { loop.watch(*rb_); }

void TraceCollector::drain() { rb_->drain(); }

void TraceCollector::handle(const void* data, size_t size) {
  if (size < sizeof(gs_call_event)) return;
  gs_call_event e;
  memcpy(&e, data, sizeof e);
  normalize_event(e);
  auto pname = names_.name(e.pid, e.tid, std::string_view(e.thread, strnlen(e.thread, GS_COMM_LEN)));
  memset(e.comm, 0, sizeof e.comm);
  memcpy(e.comm, pname.data(), std::min(pname.size(), sizeof e.comm - 1));
  delivered_++;
  sink_(e);
}

TraceCollector::Stats TraceCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.drops);
  return {delivered_, percpu_sum(fd, GS_DROP_RINGBUF), percpu_sum(fd, GS_DROP_STATE_FULL)};
}

}  // namespace gpuscope

// NCCL calls in `gpuscope timeline`: each rank's calls on communicators as spans on the thread
// that made them, up to --max-calls.
#include <time.h>

#include "core/timeline_source.h"
#include "nccl/nccl_collector.h"

namespace gpuscope {

namespace {

class NcclTimeline : public TimelineSource {
 public:
  NcclTimeline(UprobeSession& session, const TimelineOptions& o)
      : max_(o.max_calls),
        host_wide_(o.scope.pids.empty()),
        nccl_(session, {o.scope, [this](const NcclCall& c) { record(c); }}) {
    timespec b, m;
    clock_gettime(CLOCK_BOOTTIME, &b);
    clock_gettime(CLOCK_MONOTONIC, &m);
    boot_minus_mono_ns_ = (b.tv_sec - m.tv_sec) * 1000000000ll + (b.tv_nsec - m.tv_nsec);
  }
  void attach(UprobeSession&) override {
    if (host_wide_) nccl_.attach_system_libraries();
  }
  void watch(EventLoop& loop) override {
    nccl_.watch(loop);
    loop.every(1, [this] { nccl_.take(); });  // the per-interval view it also keeps, let go
  }
  void drain() override { nccl_.drain(); }
  void detach() override { nccl_.detach(); }
  void take(TimelineItems& out) override {
    out.spans = std::move(spans_);
    out.comms = std::move(comms_);
    const auto ns = nccl_.stats();
    out.lost["nccl_ringbuf"] = ns.lost_ringbuf;
    out.lost["nccl_state"] = ns.lost_state;
    out.lost["nccl_over_bound"] = over_;
  }

 private:
  void record(const NcclCall& c) {
    if (spans_.size() >= max_) {
      over_++;
      return;
    }
    TimelineSpan s;
    s.category = "nccl";
    s.name = nccl_op_name(c.op);
    s.pid = static_cast<uint32_t>(c.rank.pid);
    s.tid = c.tid;
    s.start_ns = c.entry_mono_ns + boot_minus_mono_ns_;
    s.dur_ns = c.call_ns;
    s.args = {{"bytes", uint64_t{c.bytes}},
              {"comm_id", nccl_comm_id_str(c.rank.comm_id)},
              {"rank", int64_t{c.rank.rank}},
              {"nranks", int64_t{c.rank.nranks}}};
    s.args.emplace_back("seq", c.seq != GS_NCCL_NO_SEQ ? TimelineValue(uint64_t{c.seq}) : TimelineValue(nullptr));
    if (c.peer >= 0) s.args.emplace_back("peer", int64_t{c.peer});
    if (c.ret) s.args.emplace_back("error", nccl_result_name(c.ret));
    if (!comms_.count(s.pid) && !c.rank.process.empty()) comms_[s.pid] = c.rank.process;
    spans_.push_back(std::move(s));
  }

  uint32_t max_;
  bool host_wide_;
  std::vector<TimelineSpan> spans_;
  std::map<uint32_t, std::string> comms_;
  int64_t boot_minus_mono_ns_ = 0;
  uint64_t over_ = 0;
  NcclCollector nccl_;  // last: its events reach the members above
};

std::unique_ptr<TimelineSource> make_nccl_timeline(UprobeSession& session, const TimelineOptions& o) {
  return std::make_unique<NcclTimeline>(session, o);
}

}  // namespace

GPUSCOPE_TIMELINE_SOURCE(make_nccl_timeline, 10, {"nccl_span_count", "nccl_spans", "NCCL calls"});

}  // namespace gpuscope

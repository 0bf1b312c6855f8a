// GPU errors in `gpuscope timeline`, as instant marks: a sticky CUDA error on the thread whose
// call returned it, an Xid on its process where it names one, else (and NVML's other events) on
// its GPU's track.
#include <cstdio>

#include "core/clock.h"
#include "core/timeline_source.h"
#include "errors/errors_collector.h"

namespace gpuscope {

namespace {

// The track of an error of no process: its GPU, by index where known, else by PCI bus id.
std::string gpu_track(const GpuError& r) {
  if (r.device.index >= 0) return fmt::format("GPU {}", r.device.index);
  return r.device.pci_bus_id.empty() ? "GPU ?" : "GPU " + r.device.pci_bus_id;
}

// A sticky error's call, its code, the kernels since the last good sync and the Xid it was joined to.
void sticky_args(TimelineArgs& a, const GpuError& r, const std::map<uint64_t, const GpuError*>& by_id) {
  std::vector<std::string> kernels;
  for (auto& k : r.kernels_since) kernels.push_back(k.kernel);
  a.emplace_back("code", int64_t{r.code});
  a.emplace_back("code_name", r.code_name);
  a.emplace_back("api", r.api_name);
  a.emplace_back("layer", r.layer);
  a.emplace_back("kernels_since_sync", std::move(kernels));
  a.emplace_back("kernels_truncated", r.kernels_truncated);
  if (auto x = r.joined ? by_id.find(*r.joined) : by_id.end(); x != by_id.end() && x->second->xid)
    a.emplace_back("xid", int64_t{x->second->xid});
}

void xid_args(TimelineArgs& a, const GpuError& r) {
  if (r.kind == ErrorKind::kXid && r.xid) a.emplace_back("xid", int64_t{r.xid});
  if (!r.nvml_event.empty()) a.emplace_back("event", r.nvml_event);
  a.emplace_back("meaning", std::string(r.info.meaning));
  a.emplace_back("class", std::string(xid_class_name(r.info.cls)));
  a.emplace_back("action", std::string(xid_action_name(r.info.action)));
  a.emplace_back("device", int64_t{r.device.index});
  a.emplace_back("uuid", r.device.uuid);
  a.emplace_back("pci_bus_id", r.device.pci_bus_id);
  a.emplace_back("source", std::string(r.from_kmsg && r.from_nvml ? "kmsg+nvml" : r.from_kmsg ? "kmsg" : "nvml"));
  a.emplace_back("message", r.message);
}

// What the timeline marks of one GPU error, on CLOCK_BOOTTIME.
TimelineMark error_mark(const GpuError& r, const std::map<uint64_t, const GpuError*>& by_id, int64_t real_minus_boot) {
  TimelineMark m;
  m.ts_ns = r.realtime_ns - real_minus_boot;
  m.pid = r.pid;
  const bool sticky = r.kind == ErrorKind::kSticky && r.pid;
  m.category = sticky ? "cuda_error" : "gpu_error";
  m.args.emplace_back("error_id", uint64_t{r.id});
  if (sticky) {
    m.tid = r.tid;
    m.name = r.code_name + " at " + r.api_name;
    sticky_args(m.args, r, by_id);
  } else {
    m.name = r.kind == ErrorKind::kXid ? fmt::format("Xid {}", r.xid) : "NVML " + r.nvml_event;
    if (!r.pid) m.track = gpu_track(r);
    xid_args(m.args, r);
  }
  m.args.emplace_back("joined_error_id", r.joined ? TimelineValue(uint64_t{*r.joined}) : TimelineValue(nullptr));
  return m;
}

class ErrorsTimeline : public TimelineSource {
 public:
  ErrorsTimeline(UprobeSession& session, const TimelineOptions& o) : errors_(session, config(o)) {
    if (!errors_.kmsg_error().empty())
      fprintf(stderr, "gpuscope: %s: no Xids in the timeline; sticky CUDA errors are still marked\n",
              errors_.kmsg_error().c_str());
  }
  void attach(UprobeSession& session) override { errors_.start(session); }
  void watch(EventLoop& loop) override { errors_.watch(loop); }
  void drain() override { errors_.poll(); }
  void detach() override { errors_.detach(); }
  void take(TimelineItems& out) override {
    const auto records = errors_.records();
    std::map<uint64_t, const GpuError*> by_id;
    for (auto& r : records) by_id[r.id] = &r;
    const int64_t real_minus_boot = realtime_minus_boottime_ns();
    for (auto& r : records) {
      out.marks.push_back(error_mark(r, by_id, real_minus_boot));
      if (r.pid && !r.comm.empty()) out.comms.emplace(*r.pid, r.comm);
    }
    const auto es = errors_.stats();
    out.lost["errors_kmsg_lost"] = es.kmsg.lost;
    out.lost["errors_sticky_ringbuf"] = es.bpf_lost_events;
    out.lost["errors_dropped"] = es.records_dropped;
  }

 private:
  static ErrorsCollector::Config config(const TimelineOptions& o) {
    ErrorsCollector::Config c;
    c.scope = o.scope;
    c.kmsg_path = o.kmsg;
    return c;
  }
  ErrorsCollector errors_;
};

std::unique_ptr<TimelineSource> make_errors_timeline(UprobeSession& session, const TimelineOptions& o) {
  return std::make_unique<ErrorsTimeline>(session, o);
}

}  // namespace

GPUSCOPE_TIMELINE_SOURCE(make_errors_timeline, 20, {"error_count", "errors", "GPU errors", "GPU errors (no process)"});

}  // namespace gpuscope

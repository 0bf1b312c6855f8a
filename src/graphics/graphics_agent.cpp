// Graphics frames beside CUDA: frame times per process and API as histograms, Vulkan submits,
// command buffers and presents, the time frames spent waiting, and Vulkan device memory
// outstanding (and left behind at exit). Costs nothing where no process maps a graphics library.
#include "cmd/agent/registry.h"
#include "core/clock.h"
#include "core/output.h"
#include "core/system.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

// Frame-time buckets: the log2 bounds from 2^19 ns (0.5 ms) to 2^30 ns (1.07 s): 60, 30 and
// 20 FPS frames (16.7, 33.3 and 50 ms) fall in three different buckets.
constexpr unsigned kFirstBucket = 18, kLastBucket = 29;

const struct {
  const char* name;
  PromSet::Type type;
  const char* help;
} kFamilies[] = {
    {"gpuscope_frame_duration_seconds", T::histogram,
     "Frame times (present to present, swap to swap, or fenced submit to fenced submit offscreen)"},
    {"gpuscope_graphics_submits_total", T::counter, "Vulkan queue submissions (vkQueueSubmit, vkQueueSubmit2)"},
    {"gpuscope_graphics_command_buffers_total", T::counter, "Command buffers in the Vulkan submissions"},
    {"gpuscope_graphics_presents_total", T::counter, "Vulkan presents (vkQueuePresentKHR)"},
    {"gpuscope_graphics_wait_seconds_total", T::counter,
     "Time frames spent in fence, queue, device and image waits and glFinish"},
    {"gpuscope_graphics_memory_outstanding_bytes", T::gauge,
     "Vulkan device memory allocated and not freed (vkAllocateMemory, vkFreeMemory)"},
    {"gpuscope_graphics_memory_outstanding_allocations", T::gauge, "Vulkan device memory allocations not freed"},
    {"gpuscope_graphics_memory_leaked_bytes_total", T::counter,
     "Vulkan device memory still allocated when its process exited, every process since the agent started"},
    {"gpuscope_graphics_library_files", T::gauge,
     "Copies of the Vulkan loader and the GL dispatch libraries probed (the linker cache's and the processes')"},
};

struct GraphicsOfProcess {
  std::map<GfxApi, FrameSeries> series;
  uint64_t submits = 0, cmd_buffers = 0, presents = 0;
  uint64_t memory_bytes = 0, allocations = 0;
};

class GraphicsAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "graphics"; }
  std::string_view subcommand() const override { return "frames"; }
  bool uses_session() const override { return true; }

  void load(AgentHost& host) override {
    host_ = &host;
    collector_ =
        std::make_unique<GraphicsCollector>(*host.session, GraphicsCollector::Config{host.options.scope, kRingBytes},
                                            [this](const gs_gfx_event& e, std::string_view comm) {
                                              if (!gone_.count(e.pid)) tracker_.add(e, comm);
                                            });
  }

  void start(AgentHost& host, EventLoop& loop) override {
    if (host.options.scope.pids.empty()) collector_->attach_system_libraries();
    collector_->watch(loop);
  }

  void take() override {
    collector_->drain();
    tracker_.settle(boottime_ns() - kSettleNs);
    for (auto& [pid, g] : tracker_.processes()) {
      const bool running = process_running(static_cast<pid_t>(pid));
      // Its calls are all read: every frame it ended is final now, before its values are.
      if (!running) tracker_.settle_process(pid, UINT64_MAX);
      ProcEntry& p = host_->procs.any(pid, g.comm);
      if (p.comm.empty()) p.comm = g.comm;
      auto& s = procs_[p.id];
      s.series = g.series;
      s.submits = s.cmd_buffers = s.presents = 0;
      for (auto& [_, q] : g.queues) {
        s.submits += q.submits;
        s.cmd_buffers += q.cmd_buffers;
        s.presents += q.presents;
      }
      s.memory_bytes = g.memory.outstanding_bytes;
      s.allocations = g.memory.live.size();
      // Final values: not seen, so an ended process leaves with this refresh.
      if (running && !p.exited) {
        p.seen = true;
      } else if (gone_.insert(pid).second) {
        leaked_bytes_ += g.memory.outstanding_bytes;
      }
    }
  }

  void fold(const ProcEntry& e) override {
    procs_.erase(e.id);
    if (gone_.erase(e.pid)) tracker_.forget(e.pid);
  }

  void metrics(PromSet& m) override {
    for (auto& [name, type, help] : kFamilies) m.family(name, type, help);
    std::vector<double> bounds;
    for (unsigned b = kFirstBucket; b <= kLastBucket; b++)
      bounds.push_back(static_cast<double>(bucket_le(b) + 1) / 1e9);
    host_->procs.each([&](const ProcEntry& e) {
      const GraphicsOfProcess* s = procs_.find(e.id);
      if (!s) return;
      const PromLabels l = e.prom_labels();
      for (auto& [api, fs] : s->series) {
        if (fs.frames == 0) continue;
        std::vector<uint64_t> counts(bounds.size() + 1, 0);
        for (unsigned b = 0; b < kLatBuckets; b++)
          counts[std::clamp<int>(static_cast<int>(b) - static_cast<int>(kFirstBucket), 0,
                                 static_cast<int>(bounds.size()))] += fs.buckets[b];
        PromLabels la = l;
        la.emplace_back("api", gfx_api_name(api));
        m.histogram("gpuscope_frame_duration_seconds", la, bounds, counts, static_cast<double>(fs.sum_ns) / 1e9);
        m.add("gpuscope_graphics_wait_seconds_total", la, static_cast<double>(fs.wait_ns) / 1e9);
      }
      if (s->submits || s->presents) {
        m.add("gpuscope_graphics_submits_total", l, static_cast<double>(s->submits));
        m.add("gpuscope_graphics_command_buffers_total", l, static_cast<double>(s->cmd_buffers));
        m.add("gpuscope_graphics_presents_total", l, static_cast<double>(s->presents));
      }
      m.add("gpuscope_graphics_memory_outstanding_bytes", l, static_cast<double>(s->memory_bytes));
      m.add("gpuscope_graphics_memory_outstanding_allocations", l, static_cast<double>(s->allocations));
    });
    m.add("gpuscope_graphics_memory_leaked_bytes_total", {}, static_cast<double>(leaked_bytes_));
    m.add("gpuscope_graphics_library_files", {}, static_cast<double>(collector_->library_files()));
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    const GraphicsOfProcess* s = procs_.find(e.id);
    if (!s) return;
    j.begin_object("graphics");
    for (auto& [api, fs] : s->series)
      if (fs.frames)
        j.begin_object(gfx_api_name(api))
            .num("frames", fs.frames)
            .num("max_ns", fs.max_ns)
            .num("mean_ns", fs.sum_ns / fs.frames)
            .num("wait_ns", fs.wait_ns)
            .end_object();
    j.num("submits", s->submits).num("cmd_buffers", s->cmd_buffers).num("presents", s->presents);
    j.num("memory_outstanding_bytes", s->memory_bytes).num("memory_outstanding_allocations", s->allocations);
    j.end_object();
  }

  std::string describe() const override {
    return fmt::format("graphics ({} library files)", collector_ ? collector_->library_files() : 0);
  }

  void lost(LostCounts& out) const override {
    auto s = collector_->stats();
    out["ring_buffer_full"] = s.lost_ringbuf;
    out["no_call_state"] = s.lost_state;
    out["frame_content_dropped"] = tracker_.content_dropped();
    out["fetched_function_not_probed"] = s.lost_fetches;
  }

  void detach() override { collector_->detach(); }
  void drain() override { collector_->drain(); }

 private:
  static constexpr uint32_t kRingBytes = 1u << 18;    // a call is 80 bytes; frames are few a second
  static constexpr uint64_t kSettleNs = 200'000'000;  // a frame's calls arrive before this

  AgentHost* host_ = nullptr;
  std::unique_ptr<GraphicsCollector> collector_;
  FrameTracker tracker_{[](const Frame&) {}};
  std::set<uint32_t> gone_;  // exited, until folded: their late calls are not counted again
  PerProcess<GraphicsOfProcess> procs_;
  uint64_t leaked_bytes_ = 0;
};

}  // namespace

std::unique_ptr<AgentCollector> make_graphics_collector() { return std::make_unique<GraphicsAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_graphics_collector, 80);

}  // namespace gpuscope

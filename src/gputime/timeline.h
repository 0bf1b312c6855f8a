#pragma once
// The timeline view: CPU-side CUDA calls, GPU activity, device counters and the timeline
// sources' spans and marks written as a Chrome JSON trace (opens in ui.perfetto.dev and
// chrome://tracing). It never touches BPF.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/events.h"
#include "core/timeline_source.h"
#include "gputime/gputime_collector.h"

namespace gpuscope {

// One device counter sample (from the bridge's pinned maps), on CLOCK_BOOTTIME.
struct CounterSample {
  uint64_t ts_boot_ns = 0;
  uint32_t device = 0;
  uint32_t sm_util_pct = 0;
  uint64_t mem_used_bytes = 0;
};

// One traced CUDA call, from its exit event: what the timeline keeps of it (32 bytes).
struct CallSpan {
  uint64_t start_ns = 0, dur_ns = 0;  // CLOCK_BOOTTIME
  uint32_t pid = 0, tid = 0;
  int32_t ret = 0;
  uint16_t api = 0;
  uint8_t layer = 0;
  // A copy or memset: its direction ("H2D", …, "memset"; null for other calls) and the bytes
  // it was asked to move or set.
  const char* copy = nullptr;
  uint64_t copy_bytes = 0;
};

// One graphics call (the graphics collector's), and one frame: a span of a process (CLOCK_BOOTTIME)
// with what it is. Names are static strings.
struct ProcessSpan {
  uint64_t start_ns = 0, dur_ns = 0;
  uint32_t pid = 0;
};
struct GraphicsSpan : ProcessSpan {
  uint32_t tid = 0;
  const char* name = "";
  bool frame_end = false;  // a present or a swap: an instant mark too
};
struct FrameSpan : ProcessSpan {
  uint64_t number = 0;
  const char* api = "";
  uint32_t submits = 0, waits = 0, cuda_launches = 0;
  uint64_t wait_ns = 0;
};

struct TimelineInput {
  std::vector<CallSpan> calls;
  std::vector<GraphicsSpan> graphics;
  std::vector<FrameSpan> frames;
  std::map<std::pair<uint32_t, uint32_t>, std::string> threads;  // (pid, tid) -> thread name
  std::vector<GpuRecord> gpu;
  std::vector<CounterSample> counters;
  std::vector<TimelineItems> sources;  // the registered timeline sources', in their order
  std::function<std::string(uint32_t pid, uint32_t name_id)> kernel_name;
  std::map<uint32_t, std::string> comms;  // pid -> process name
  std::string gpu_note;                   // why there are no GPU spans, when there are none
  std::string counter_note;               // why there are no counters, when there are none
  std::map<std::string, uint64_t> lost;   // what was not recorded, by reason
};

struct TimelineStats {
  uint64_t cpu_spans = 0, gpu_spans = 0, flows = 0, counters = 0, graphics_spans = 0, frame_spans = 0;
  std::vector<uint64_t> source_items;  // spans and marks of each of in.sources
};

// The trace as one JSON document.
TimelineStats write_timeline(const TimelineInput& in, std::string& out);

}  // namespace gpuscope

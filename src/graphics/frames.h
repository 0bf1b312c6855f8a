#pragma once
// Frames from the graphics collector's events, and what happened inside each: user space only,
// fed by the collector (and, for the CUDA calls inside a frame, by the trace collector). No BPF
// here: the frames view and the agent read it.
//
// Where a frame ends (the documented choice; docs/frames.md):
//   - Vulkan: at each vkQueuePresentKHR; a process that has never presented (an offscreen
//     renderer: no swapchain, no display) ends one at each vkQueueSubmit that signals a fence.
//     Its first present starts its presented frames afresh.
//   - EGL and GLX: at each eglSwapBuffers / glXSwapBuffers (a pbuffer's swap included).
// A frame runs from one end to the next (the first end starts the first frame), on every thread
// of the process: its submits, waits and CUDA calls are those that started inside it.
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graphics/graphics.h"
#include "core/histogram.h"

namespace gpuscope {

enum class GfxApi : uint8_t { vulkan, egl, glx };
const char* gfx_api_name(GfxApi api);
const char* gfx_call_name(uint32_t call);  // "vkQueueSubmit"; "?" for none
// Calls that wait for the GPU or the display: their time is a frame's wait time.
bool gfx_call_waits(uint32_t call);

struct Frame {
  uint32_t pid = 0;
  GfxApi api = GfxApi::vulkan;
  uint64_t number = 0;  // 1, 2, ... in its process's frames of this API
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t submits = 0, cmd_buffers = 0;
  uint32_t waits = 0;
  uint64_t wait_ns = 0;
  uint32_t cuda_calls = 0, cuda_launches = 0;
  std::map<std::string, uint32_t> calls;  // graphics and CUDA calls inside, by name
  uint64_t duration_ns() const { return end_ns - start_ns; }
};

// One process's frames of one API, cumulative since it was first seen.
struct FrameSeries {
  uint64_t frames = 0;
  Buckets buckets{};      // frame durations, log2 ns (core/histogram.h)
  Percentiles durations;  // the same, fine enough for percentiles
  uint64_t max_ns = 0, sum_ns = 0, wait_ns = 0;
  // Where the open frame started (0: no end seen yet), and ended frames waiting to be settled.
  uint64_t open_ns = 0;
  std::deque<std::pair<uint64_t, uint64_t>> ended;
  bool presented = false;
};

struct QueueCounts {
  uint64_t submits = 0, cmd_buffers = 0, presents = 0;
};

// Device memory a process allocated (vkAllocateMemory) and has not freed.
struct GfxMemory {
  struct Block {
    uint64_t size_bytes;
    uint32_t mem_type;
    uint64_t at_ns;
  };
  std::map<uint64_t, Block> live;  // by VkDeviceMemory handle
  uint64_t outstanding_bytes = 0;
  uint64_t allocs = 0, frees = 0, alloc_failures = 0;
  uint64_t untracked_frees = 0;  // frees of a handle allocated before it was watched
};

struct GfxProcess {
  std::string comm;
  std::map<GfxApi, FrameSeries> series;
  std::map<uint64_t, QueueCounts> queues;  // Vulkan, by VkQueue
  GfxMemory memory;
  uint64_t devices_created = 0, devices_destroyed = 0;
  uint64_t calls = 0;
};

class FrameTracker {
 public:
  using FrameSink = std::function<void(const Frame&)>;
  // Calls and CUDA calls waiting for their frame to end: at most max_content a process (older
  // ones are counted in content_dropped()).
  explicit FrameTracker(FrameSink sink, size_t max_content = 65536);

  void add(const gs_gfx_event& e, std::string_view comm);
  // A CUDA call that started at ts_ns (CLOCK_BOOTTIME) in a process, of the driver API or the
  // runtime's; kept until settle() finds it in no frame. A frame's launches are its driver
  // launches when it has any (every runtime launch reaches one), else its runtime launches.
  void add_cuda(uint32_t pid, uint64_t ts_ns, std::string_view api, bool launch, bool driver);
  // Frames that ended before horizon_ns (CLOCK_BOOTTIME) are finished: what started inside
  // them is gathered and they go to the sink. Calls arrive from two ring buffers: the horizon
  // leaves them time to.
  void settle(uint64_t horizon_ns);
  // One process's: all of them once it has exited and its calls were read.
  void settle_process(uint32_t pid, uint64_t horizon_ns);
  const std::map<uint32_t, GfxProcess>& processes() const { return procs_; }
  // A process that exited: everything of it is dropped (settle first).
  void forget(uint32_t pid);
  uint64_t content_dropped() const { return content_dropped_; }

 private:
  struct Content {
    uint64_t ts_ns, dur_ns;
    uint32_t call;  // enum gs_gfx_call; 0: a CUDA call
    uint32_t cmd_buffers;
    uint8_t launch;             // 1: a runtime launch, 2: a driver launch
    std::string_view cuda_api;  // from the site table: static storage
  };
  void end_frame(GfxProcess& p, FrameSeries& s, uint64_t at_ns);
  void settle(uint32_t pid, GfxProcess& p, uint64_t horizon_ns);
  void keep(uint32_t pid, Content c);

  FrameSink sink_;
  size_t max_content_;
  std::map<uint32_t, GfxProcess> procs_;
  std::map<uint32_t, std::deque<Content>> content_;
  uint64_t content_dropped_ = 0;
};

}  // namespace gpuscope

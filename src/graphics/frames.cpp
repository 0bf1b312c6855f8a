#include "graphics/frames.h"

#include <algorithm>

namespace gpuscope {

const char* gfx_api_name(GfxApi api) {
  switch (api) {
    case GfxApi::vulkan: return "vulkan";
    case GfxApi::egl: return "egl";
    case GfxApi::glx: return "glx";
  }
  return "?";
}

const char* gfx_call_name(uint32_t call) {
  static const char* const names[GS_GFX_CALL_COUNT] = {
      "?",
      "vkQueueSubmit",
      "vkQueueSubmit2",
      "vkQueuePresentKHR",
      "vkAcquireNextImageKHR",
      "vkWaitForFences",
      "vkQueueWaitIdle",
      "vkDeviceWaitIdle",
      "vkAllocateMemory",
      "vkFreeMemory",
      "vkCreateDevice",
      "vkDestroyDevice",
      "eglSwapBuffers",
      "glXSwapBuffers",
      "glFinish",
  };
  return call < GS_GFX_CALL_COUNT ? names[call] : "?";
}

bool gfx_call_waits(uint32_t call) {
  switch (call) {
    case GS_GFX_VK_WAIT_FOR_FENCES:
    case GS_GFX_VK_QUEUE_WAIT_IDLE:
    case GS_GFX_VK_DEVICE_WAIT_IDLE:
    case GS_GFX_VK_ACQUIRE_IMAGE:
    case GS_GFX_GL_FINISH: return true;
    default: return false;
  }
}

FrameTracker::FrameTracker(FrameSink sink, size_t max_content) : sink_(std::move(sink)), max_content_(max_content) {}

void FrameTracker::end_frame(GfxProcess&, FrameSeries& s, uint64_t at_ns) {
  if (s.open_ns && at_ns >= s.open_ns) s.ended.emplace_back(s.open_ns, at_ns);
  s.open_ns = at_ns;
}

void FrameTracker::keep(uint32_t pid, Content c) {
  auto& q = content_[pid];
  if (q.size() >= max_content_) {
    q.pop_front();
    content_dropped_++;
  }
  q.push_back(c);
}

void FrameTracker::add(const gs_gfx_event& e, std::string_view comm) {
  GfxProcess& p = procs_[e.pid];
  if (!comm.empty()) p.comm = comm;
  p.calls++;
  const Content c{e.start_ns, e.dur_ns, e.call, e.cmd_buffers, 0, {}};
  switch (e.call) {
    case GS_GFX_VK_QUEUE_SUBMIT:
    case GS_GFX_VK_QUEUE_SUBMIT2: {
      QueueCounts& q = p.queues[e.object];
      q.submits++;
      q.cmd_buffers += e.cmd_buffers;
      FrameSeries& s = p.series[GfxApi::vulkan];
      if ((e.flags & GS_GFX_FENCE) && !s.presented) end_frame(p, s, e.start_ns);
      keep(e.pid, c);
      break;
    }
    case GS_GFX_VK_QUEUE_PRESENT: {
      p.queues[e.object].presents++;
      FrameSeries& s = p.series[GfxApi::vulkan];
      if (!s.presented) {
        s.presented = true;
        s.open_ns = 0;  // the offscreen frame open until now is not a presented one
      }
      end_frame(p, s, e.start_ns);
      break;
    }
    case GS_GFX_EGL_SWAP_BUFFERS: end_frame(p, p.series[GfxApi::egl], e.start_ns); break;
    case GS_GFX_GLX_SWAP_BUFFERS: end_frame(p, p.series[GfxApi::glx], e.start_ns); break;
    case GS_GFX_VK_ALLOCATE_MEMORY:
      if (e.ret != 0 || (e.flags & GS_GFX_READ_FAILED)) {
        p.memory.alloc_failures++;
      } else {
        p.memory.live[e.object] = {e.size_bytes, e.mem_type, e.start_ns};
        p.memory.outstanding_bytes += e.size_bytes;
        p.memory.allocs++;
      }
      keep(e.pid, c);
      break;
    case GS_GFX_VK_FREE_MEMORY: {
      if (e.object == 0) break;  // freeing VK_NULL_HANDLE does nothing
      auto it = p.memory.live.find(e.object);
      if (it == p.memory.live.end()) {
        p.memory.untracked_frees++;
      } else {
        p.memory.outstanding_bytes -= it->second.size_bytes;
        p.memory.live.erase(it);
        p.memory.frees++;
      }
      keep(e.pid, c);
      break;
    }
    case GS_GFX_VK_CREATE_DEVICE:
      if (e.ret == 0) p.devices_created++;
      break;
    case GS_GFX_VK_DESTROY_DEVICE:
      if (e.object) p.devices_destroyed++;
      break;
    default: keep(e.pid, c); break;
  }
}

void FrameTracker::add_cuda(uint32_t pid, uint64_t ts_ns, std::string_view api, bool launch, bool driver) {
  // Kept for a process not seen rendering yet too: its first graphics calls may come later from
  // their own ring buffer. settle() lets them go once past the horizon.
  keep(pid, {ts_ns, 0, 0, 0, static_cast<uint8_t>(launch ? (driver ? 2 : 1) : 0), api});
}

void FrameTracker::settle(uint64_t horizon_ns) {
  for (auto& [pid, p] : procs_) settle(pid, p, horizon_ns);
  for (auto it = content_.begin(); it != content_.end();) {
    if (!procs_.count(it->first)) std::erase_if(it->second, [&](const Content& c) { return c.ts_ns < horizon_ns; });
    it = it->second.empty() ? content_.erase(it) : std::next(it);
  }
}

void FrameTracker::settle_process(uint32_t pid, uint64_t horizon_ns) {
  auto it = procs_.find(pid);
  if (it != procs_.end()) settle(pid, it->second, horizon_ns);
}

void FrameTracker::settle(uint32_t pid, GfxProcess& p, uint64_t horizon_ns) {
  auto& content = content_[pid];
  // Calls come nearly in time order (two ring buffers interleave): sorted once, each frame
  // finds its first call by binary search rather than scanning all of them.
  const auto by_ts = [](const Content& a, const Content& b) { return a.ts_ns < b.ts_ns; };
  if (!std::is_sorted(content.begin(), content.end(), by_ts)) std::stable_sort(content.begin(), content.end(), by_ts);
  uint64_t keep_from = horizon_ns;
  for (auto& [api, s] : p.series) {
    while (!s.ended.empty() && s.ended.front().second <= horizon_ns) {
      auto [start, end] = s.ended.front();
      s.ended.pop_front();
      Frame f;
      f.pid = pid;
      f.api = api;
      f.number = ++s.frames;
      f.start_ns = start;
      f.end_ns = end;
      uint32_t launches[3] = {};
      auto first = std::lower_bound(content.begin(), content.end(), start,
                                    [](const Content& c, uint64_t ts) { return c.ts_ns < ts; });
      for (auto it = first; it != content.end() && it->ts_ns < end; ++it) {
        const Content& c = *it;
        if (c.call == 0) {
          f.cuda_calls++;
          launches[c.launch]++;
          f.calls[std::string(c.cuda_api)]++;
          continue;
        }
        f.calls[gfx_call_name(c.call)]++;
        if (c.call == GS_GFX_VK_QUEUE_SUBMIT || c.call == GS_GFX_VK_QUEUE_SUBMIT2) {
          f.submits++;
          f.cmd_buffers += c.cmd_buffers;
        } else if (gfx_call_waits(c.call)) {
          f.waits++;
          f.wait_ns += c.dur_ns;
        }
      }
      f.cuda_launches = launches[2] ? launches[2] : launches[1];
      const uint64_t d = f.duration_ns();
      s.buckets[bucket_of(d)]++;
      s.durations.add(d);
      s.max_ns = std::max(s.max_ns, d);
      s.sum_ns += d;
      s.wait_ns += f.wait_ns;
      sink_(f);
    }
    const uint64_t from = !s.ended.empty() ? s.ended.front().first : s.open_ns ? s.open_ns : horizon_ns;
    keep_from = std::min(keep_from, from);
  }
  content.erase(content.begin(), std::lower_bound(content.begin(), content.end(), keep_from,
                                                  [](const Content& c, uint64_t ts) { return c.ts_ns < ts; }));
}

void FrameTracker::forget(uint32_t pid) {
  procs_.erase(pid);
  content_.erase(pid);
}

}  // namespace gpuscope

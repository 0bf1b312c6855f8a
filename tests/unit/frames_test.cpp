// FrameTracker on its own: where frames end, what falls inside, when they settle, memory.
#include <gtest/gtest.h>

#include <vector>

#include "graphics/frames.h"

using namespace gpuscope;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1000 * kMs;  // CLOCK_BOOTTIME is never 0 at a call

uint64_t at(uint64_t ms) { return kT0 + ms * kMs; }

gs_gfx_event ev(uint32_t call, uint64_t at_ms, uint64_t dur_ms = 0, uint32_t pid = 100) {
  gs_gfx_event e{};
  e.pid = pid;
  e.tid = pid;
  e.call = call;
  e.start_ns = at(at_ms);
  e.dur_ns = dur_ms * kMs;
  e.object = 0x51;
  return e;
}

gs_gfx_event submit(uint64_t at_ms, bool fence, uint32_t cmd_buffers = 1) {
  gs_gfx_event e = ev(GS_GFX_VK_QUEUE_SUBMIT, at_ms);
  e.count = 1;
  e.cmd_buffers = cmd_buffers;
  e.flags = fence ? GS_GFX_FENCE : 0;
  return e;
}

struct Tracked {
  std::vector<Frame> frames;
  FrameTracker t{[this](const Frame& f) { frames.push_back(f); }};
};

}  // namespace

TEST(FrameTracker, FencedSubmitsEndOffscreenFramesWithWhatStartedInside) {
  Tracked k;
  k.t.add(submit(10, true, 3), "app");
  k.t.add(ev(GS_GFX_VK_WAIT_FOR_FENCES, 11, 2), "app");
  k.t.add(submit(14, false, 1), "app");
  k.t.add_cuda(100, at(15), "cudaLaunchKernel", true, false);
  k.t.add_cuda(100, at(15) + 10, "cuLaunchKernel", true, true);
  k.t.add_cuda(100, at(16), "cudaMemcpyAsync", false, false);
  k.t.add(submit(26, true, 3), "app");  // ends frame 1, starts frame 2
  k.t.add(ev(GS_GFX_VK_QUEUE_WAIT_IDLE, 27, 5), "app");
  k.t.add(submit(40, true, 3), "app");
  k.t.settle(at(30));  // frame 2 ends at 40: not yet
  ASSERT_EQ(k.frames.size(), 1u);
  const Frame& f = k.frames[0];
  EXPECT_EQ(f.number, 1u);
  EXPECT_EQ(f.api, GfxApi::vulkan);
  EXPECT_EQ(f.start_ns, at(10));
  EXPECT_EQ(f.duration_ns(), 16 * kMs);
  EXPECT_EQ(f.submits, 2u);
  EXPECT_EQ(f.cmd_buffers, 4u);
  EXPECT_EQ(f.waits, 1u);
  EXPECT_EQ(f.wait_ns, 2 * kMs);
  EXPECT_EQ(f.cuda_calls, 3u);
  EXPECT_EQ(f.cuda_launches, 1u);  // the runtime launch reached the driver's: one launch
  EXPECT_EQ(f.calls.at("cudaMemcpyAsync"), 1u);
  k.t.settle(at(41));
  ASSERT_EQ(k.frames.size(), 2u);
  EXPECT_EQ(k.frames[1].number, 2u);
  EXPECT_EQ(k.frames[1].duration_ns(), 14 * kMs);
  EXPECT_EQ(k.frames[1].wait_ns, 5 * kMs);
  const FrameSeries& s = k.t.processes().at(100).series.at(GfxApi::vulkan);
  EXPECT_EQ(s.frames, 2u);
  EXPECT_EQ(s.max_ns, 16 * kMs);
  EXPECT_EQ(s.sum_ns, 30 * kMs);
  uint64_t in_buckets = 0;
  for (uint64_t b : s.buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 2u);
  EXPECT_EQ(s.buckets[bucket_of(16 * kMs)], 2u);  // both in [2^23, 2^24) ns
  // Both in one log2 bucket, yet the percentiles are the frames' own times.
  EXPECT_EQ(s.durations.count(), 2u);
  EXPECT_EQ(s.durations.at(0.5), 14 * kMs);
  EXPECT_EQ(s.durations.at(0.99), 16 * kMs);
  EXPECT_EQ(k.t.processes().at(100).queues.at(0x51).submits, 4u);
  EXPECT_EQ(k.t.processes().at(100).comm, "app");
}

TEST(FrameTracker, ThePresentsOfASwapchainTakeOverFromFencedSubmits) {
  Tracked k;
  k.t.add(submit(0, true), "app");
  k.t.add(submit(10, true), "app");                 // an offscreen frame of 10 ms
  k.t.add(ev(GS_GFX_VK_QUEUE_PRESENT, 12), "app");  // presents from now on
  k.t.add(submit(14, true), "app");                 // not an end any more
  k.t.add(ev(GS_GFX_VK_ACQUIRE_IMAGE, 15, 3), "app");
  k.t.add(ev(GS_GFX_VK_QUEUE_PRESENT, 29), "app");
  k.t.settle(UINT64_MAX);
  ASSERT_EQ(k.frames.size(), 2u);
  EXPECT_EQ(k.frames[0].duration_ns(), 10 * kMs);
  EXPECT_EQ(k.frames[1].start_ns, at(12));
  EXPECT_EQ(k.frames[1].duration_ns(), 17 * kMs);
  EXPECT_EQ(k.frames[1].submits, 1u);
  EXPECT_EQ(k.frames[1].waits, 1u);
  EXPECT_EQ(k.t.processes().at(100).queues.at(0x51).presents, 2u);
}

TEST(FrameTracker, EglAndGlxSwapsAreSeparateSeriesAndCudaOfOtherProcessesIsIgnored) {
  Tracked k;
  k.t.add_cuda(100, at(0) - 1, "cudaLaunchKernel", true, false);  // before its first frame
  k.t.add(ev(GS_GFX_EGL_SWAP_BUFFERS, 0), "app");
  k.t.add(ev(GS_GFX_GL_FINISH, 5, 4), "app");
  k.t.add_cuda(200, at(6), "cudaLaunchKernel", true, false);  // another process
  k.t.add(ev(GS_GFX_EGL_SWAP_BUFFERS, 16), "app");
  k.t.add(ev(GS_GFX_GLX_SWAP_BUFFERS, 20), "app");
  k.t.add(ev(GS_GFX_GLX_SWAP_BUFFERS, 50), "app");
  k.t.settle(UINT64_MAX);
  ASSERT_EQ(k.frames.size(), 2u);
  EXPECT_EQ(k.frames[0].api, GfxApi::egl);
  EXPECT_EQ(k.frames[0].waits, 1u);
  EXPECT_EQ(k.frames[0].wait_ns, 4 * kMs);
  EXPECT_EQ(k.frames[0].cuda_calls, 0u);
  EXPECT_EQ(k.frames[1].api, GfxApi::glx);
  EXPECT_EQ(k.frames[1].duration_ns(), 30 * kMs);
  EXPECT_EQ(k.frames[1].number, 1u);
}

// The CUDA calls of a frame may come before its graphics calls are read (two ring buffers).
TEST(FrameTracker, CudaCallsReadBeforeTheFramesGraphicsCallsStillCount) {
  Tracked k;
  k.t.add_cuda(100, at(12), "cudaLaunchKernel", true, false);
  k.t.add_cuda(300, at(12), "cudaLaunchKernel", true, false);  // a process that never renders
  k.t.settle(at(5));
  k.t.add(submit(10, true), "app");
  k.t.add(submit(30, true), "app");
  k.t.settle(at(40));
  ASSERT_EQ(k.frames.size(), 1u);
  EXPECT_EQ(k.frames[0].cuda_launches, 1u);
  EXPECT_EQ(k.t.content_dropped(), 0u);
}

TEST(FrameTracker, DeviceMemoryOutstandingFailuresAndUnknownFrees) {
  Tracked k;
  auto alloc = [&](uint64_t handle, uint64_t size, int32_t ret) {
    gs_gfx_event e = ev(GS_GFX_VK_ALLOCATE_MEMORY, 1);
    e.object = handle;
    e.size_bytes = size;
    e.mem_type = 3;
    e.ret = ret;
    k.t.add(e, "app");
  };
  auto free_ = [&](uint64_t handle) {
    gs_gfx_event e = ev(GS_GFX_VK_FREE_MEMORY, 2);
    e.object = handle;
    k.t.add(e, "app");
  };
  alloc(0xa, 1 << 20, 0);
  alloc(0xb, 4 << 20, 0);
  alloc(0, 1ull << 41, -2);  // VK_ERROR_OUT_OF_DEVICE_MEMORY
  free_(0xa);
  free_(0);    // VK_NULL_HANDLE: nothing
  free_(0xc);  // allocated before it was watched
  const GfxMemory& m = k.t.processes().at(100).memory;
  EXPECT_EQ(m.outstanding_bytes, 4u << 20);
  EXPECT_EQ(m.allocs, 2u);
  EXPECT_EQ(m.frees, 1u);
  EXPECT_EQ(m.alloc_failures, 1u);
  EXPECT_EQ(m.untracked_frees, 1u);
  ASSERT_EQ(m.live.size(), 1u);
  EXPECT_EQ(m.live.at(0xb).mem_type, 3u);
  k.t.forget(100);
  EXPECT_TRUE(k.t.processes().empty());
}

TEST(FrameTracker, ContentPastItsBoundIsDroppedAndCounted) {
  std::vector<Frame> frames;
  FrameTracker t([&](const Frame& f) { frames.push_back(f); }, 4);
  t.add(submit(0, true), "app");
  for (int i = 0; i < 6; i++) t.add(ev(GS_GFX_VK_QUEUE_WAIT_IDLE, 1 + i, 1), "app");
  t.add(submit(20, true), "app");
  t.settle(UINT64_MAX);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(t.content_dropped(), 4u);  // 1 submit + 6 waits + 1 submit, 4 kept
  EXPECT_EQ(frames[0].waits, 3u);      // the last three waits; the second submit starts frame 2
}

#include <algorithm>
#include <cstring>

#include "core/bpf.h"
#include "core/discovery.h"
#include "graphics/graphics_collector.h"
#include "graphics.skel.h"

namespace gpuscope {

namespace {

struct GfxLibrary {
  const char* name;    // a part of the mapped path
  const char* soname;  // in the dynamic linker's cache
  std::vector<std::pair<const char*, gs_gfx_call>> calls;
  size_t required = 1;  // the first calls, that make a file this library
};

// libglvnd's dispatch libraries: an application calls glFinish through the one it links. Their
// glX* wrappers in libGL.so.1 call libGLX's, so only libGLX's swap is probed.
const std::vector<GfxLibrary>& gfx_libraries() {
  static const std::vector<GfxLibrary> libs{
      {"libvulkan.so",
       "libvulkan.so.1",
       {{"vkQueueSubmit", GS_GFX_VK_QUEUE_SUBMIT},
        {"vkWaitForFences", GS_GFX_VK_WAIT_FOR_FENCES},
        {"vkQueueWaitIdle", GS_GFX_VK_QUEUE_WAIT_IDLE},
        {"vkDeviceWaitIdle", GS_GFX_VK_DEVICE_WAIT_IDLE},
        {"vkAllocateMemory", GS_GFX_VK_ALLOCATE_MEMORY},
        {"vkFreeMemory", GS_GFX_VK_FREE_MEMORY},
        {"vkCreateDevice", GS_GFX_VK_CREATE_DEVICE},
        {"vkDestroyDevice", GS_GFX_VK_DESTROY_DEVICE},
        // Vulkan 1.3 and the WSI extensions: a loader may be older, or built without them.
        {"vkQueueSubmit2", GS_GFX_VK_QUEUE_SUBMIT2},
        {"vkQueuePresentKHR", GS_GFX_VK_QUEUE_PRESENT},
        {"vkAcquireNextImageKHR", GS_GFX_VK_ACQUIRE_IMAGE}},
       8},
      {"libEGL.so", "libEGL.so.1", {{"eglSwapBuffers", GS_GFX_EGL_SWAP_BUFFERS}}},
      {"libGLX.so", "libGLX.so.0", {{"glXSwapBuffers", GS_GFX_GLX_SWAP_BUFFERS}}},
      {"libGL.so", "libGL.so.1", {{"glFinish", GS_GFX_GL_FINISH}}},
      {"libOpenGL.so", "libOpenGL.so.0", {{"glFinish", GS_GFX_GL_FINISH}}},
      {"libGLESv2.so", "libGLESv2.so.2", {{"glFinish", GS_GFX_GL_FINISH}}},
  };
  return libs;
}

}  // namespace

GraphicsCollector::GraphicsCollector(UprobeSession& session, Config cfg, Sink sink)
    : cfg_(std::move(cfg)), session_(session), sink_(std::move(sink)), skel_(nullptr, graphics_bpf__destroy) {
  skel_.reset(graphics_bpf__open());
  if (!skel_) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
  apply_scope(skel_.get(), session_.scope());
  skel_->rodata->wakeup_bytes = std::min<uint64_t>(64 * 1024, cfg_.ring_bytes / 4);
  if (bpf_map__set_max_entries(skel_->maps.gs_gfx_events, cfg_.ring_bytes) != 0)
    throw UsageError("cannot size the graphics ring buffer to " + std::to_string(cfg_.ring_bytes) + " bytes");
  if (int err = graphics_bpf__load(skel_.get()))
    throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) +
                     " (is the kernel built with BTF and uprobes? try 'gpuscope doctor')");
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.gs_gfx_events),
                                     [this](const void* d, size_t n) { handle(d, n); });
  for (const GfxLibrary& lib : gfx_libraries()) {
    LibraryClient c{lib.name, {}, {}, [this](const LibraryMapping& m) { pids_.insert(m.pid); }};
    for (size_t i = 0; i < lib.calls.size(); i++) {
      auto [symbol, call] = lib.calls[i];
      const bool optional = i >= lib.required;
      c.sites.push_back({skel_->progs.gs_gfx_enter, symbol, false, static_cast<uint64_t>(call), optional});
      c.sites.push_back({skel_->progs.gs_gfx_exit, symbol, true, static_cast<uint64_t>(call), optional});
    }
    libs_.push_back(session_.add_library(std::move(c)));
  }
}

GraphicsCollector::~GraphicsCollector() { detach(); }

std::vector<std::string> GraphicsCollector::attach_system_libraries() {
  std::vector<std::string> attached;
  const auto& libs = gfx_libraries();
  for (const LdCacheEntry& e : ld_cache_entries())
    for (size_t i = 0; i < libs.size(); i++) {
      std::string err;
      if (e.name == libs[i].soname && session_.attach_library(libs_[i], e.path, &err)) attached.push_back(e.path);
    }
  return attached;
}

size_t GraphicsCollector::library_files() const {
  size_t n = 0;
  for (size_t lib : libs_) n += session_.library_files(lib);
  return n;
}

void GraphicsCollector::handle(const void* data, size_t size) {
  if (size < sizeof(gs_gfx_event)) return;
  gs_gfx_event e;
  memcpy(&e, data, sizeof e);
  // A library file is probed for every process that maps it: -p is checked here.
  if (!cfg_.scope.wants_pid(e.pid)) return;
  delivered_++;
  sink_(e, names_.name(e.pid, e.tid, std::string_view(e.thread, strnlen(e.thread, GS_COMM_LEN))));
}

GraphicsCollector::Stats GraphicsCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.gs_gfx_drops);
  return {delivered_, percpu_sum(fd, GS_GFX_DROP_RINGBUF), percpu_sum(fd, GS_GFX_DROP_STATE)};
}

void GraphicsCollector::detach() {
  if (detached_) return;
  detached_ = true;
  for (size_t lib : libs_) session_.remove_library(lib);
}

}  // namespace gpuscope

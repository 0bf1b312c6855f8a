#include <algorithm>
#include <cstring>
#include <thread>

#include "core/bpf.h"
#include "core/discovery.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"
#include "graphics.skel.h"

namespace gpuscope {

namespace {

struct GfxLibrary {
  const char* name;    // a part of the mapped path
  const char* soname;  // in the dynamic linker's cache
  std::vector<std::pair<const char*, gs_gfx_call>> calls;
  // The first calls, that make a file this library.
  size_t required = 1;
  // The getters that hand out functions (docs/frames.md); optional.
  std::vector<std::pair<const char*, gs_gfx_getter>> getters = {};
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
       8,
       {{"vkGetInstanceProcAddr", GS_GFX_GET_VK_INSTANCE}, {"vkGetDeviceProcAddr", GS_GFX_GET_VK_DEVICE}}},
      {"libEGL.so",
       "libEGL.so.1",
       {{"eglSwapBuffers", GS_GFX_EGL_SWAP_BUFFERS}},
       1,
       {{"eglGetProcAddress", GS_GFX_GET_EGL}}},
      {"libGLX.so",
       "libGLX.so.0",
       {{"glXSwapBuffers", GS_GFX_GLX_SWAP_BUFFERS}},
       1,
       {{"glXGetProcAddress", GS_GFX_GET_GLX}, {"glXGetProcAddressARB", GS_GFX_GET_GLX_ARB}}},
      {"libGL.so", "libGL.so.1", {{"glFinish", GS_GFX_GL_FINISH}}},
      {"libOpenGL.so", "libOpenGL.so.0", {{"glFinish", GS_GFX_GL_FINISH}}},
      {"libGLESv2.so", "libGLESv2.so.2", {{"glFinish", GS_GFX_GL_FINISH}}},
  };
  return libs;
}

}  // namespace

const char* gfx_getter_name(uint32_t getter) {
  switch (getter) {
    case GS_GFX_GET_VK_INSTANCE: return "vkGetInstanceProcAddr";
    case GS_GFX_GET_VK_DEVICE: return "vkGetDeviceProcAddr";
    case GS_GFX_GET_EGL: return "eglGetProcAddress";
    case GS_GFX_GET_GLX: return "glXGetProcAddress";
    case GS_GFX_GET_GLX_ARB: return "glXGetProcAddressARB";
  }
  return "?";
}

GraphicsCollector::GraphicsCollector(UprobeSession& session, Config cfg, Sink sink)
    : cfg_(std::move(cfg)), session_(session), sink_(std::move(sink)), skel_(nullptr, graphics_bpf__destroy) {
  multi_ = open_and_load_uprobes(skel_, graphics_bpf__open, graphics_bpf__load, [&](graphics_bpf* s) {
    apply_scope(s, session_.scope());
    s->rodata->wakeup_bytes = std::min<uint64_t>(64 * 1024, cfg_.ring_bytes / 4);
    if (bpf_map__set_max_entries(s->maps.gs_gfx_events, cfg_.ring_bytes) != 0)
      throw UsageError("cannot size the graphics ring buffer to " + std::to_string(cfg_.ring_bytes) + " bytes");
    return std::vector<bpf_program*>{s->progs.gs_gfx_enter, s->progs.gs_gfx_exit, s->progs.gs_gfx_fetch_enter,
                                     s->progs.gs_gfx_fetch_exit};
  });
  for (uint32_t call = 1; call < GS_GFX_CALL_COUNT; call++) {
    char name[GS_GFX_NAME_LEN] = {};
    strncpy(name, gfx_call_name(call), sizeof name - 1);
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.gs_gfx_names), name, &call, BPF_ANY) != 0)
      throw UsageError(std::string("cannot fill the graphics names map: ") + strerror(errno));
  }
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.gs_gfx_events),
                                     [this](const void* d, size_t n) { handle(d, n); });
  fetches_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.gs_gfx_fetches),
                                          [this](const void* d, size_t n) { handle_fetch(d, n); });
  for (const GfxLibrary& lib : gfx_libraries()) {
    LibraryClient c{lib.name, {}, {}, [this](const LibraryMapping& m) { pids_.insert(m.pid); }, multi_};
    for (size_t i = 0; i < lib.calls.size(); i++) {
      auto [symbol, call] = lib.calls[i];
      const bool optional = i >= lib.required;
      c.sites.push_back({skel_->progs.gs_gfx_enter, symbol, false, static_cast<uint64_t>(call), optional});
      c.sites.push_back({skel_->progs.gs_gfx_exit, symbol, true, static_cast<uint64_t>(call), optional});
    }
    for (auto [symbol, getter] : lib.getters) {
      c.sites.push_back({skel_->progs.gs_gfx_fetch_enter, symbol, false, static_cast<uint64_t>(getter), true});
      c.sites.push_back({skel_->progs.gs_gfx_fetch_exit, symbol, true, static_cast<uint64_t>(getter), true});
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

bool GraphicsCollector::is_probed_export(const MapEntry& m, const std::string& path, uint64_t offset, uint32_t call) {
  const char* symbol = gfx_call_name(call);
  const auto& libs = gfx_libraries();
  const bool library = std::any_of(libs.begin(), libs.end(), [&](const GfxLibrary& l) {
    return m.path.find(l.name) != std::string::npos &&
           std::any_of(l.calls.begin(), l.calls.end(), [&](auto& c) { return c.second == call; });
  });
  if (!library) return false;
  auto [it, fresh] = exports_.try_emplace({m.dev, m.ino});
  if (fresh) {
    try {
      it->second = std::make_shared<const ElfSymbols>(ElfSymbols::read(path, [&](std::string_view n) {
        return std::any_of(libs.begin(), libs.end(), [&](const GfxLibrary& l) {
          return std::any_of(l.calls.begin(), l.calls.end(), [&](auto& c) { return n == c.first; });
        });
      }));
    } catch (const std::exception&) {
      exports_.erase(it);
      return false;
    }
  }
  const ElfSymbol* sym = it->second->find(symbol);
  return sym && sym->file_offset == offset;
}

// A getter handed out a probed call's function: it is probed where it lies, for every process
// (as the libraries are; -p is checked on the events), once per (file, offset).
void GraphicsCollector::handle_fetch(const void* data, size_t size) {
  if (size < sizeof(gs_gfx_fetch) || detached_) return;
  gs_gfx_fetch f;
  memcpy(&f, data, sizeof f);
  if (f.call == 0 || f.call >= GS_GFX_CALL_COUNT) return;
  const pid_t pid = static_cast<pid_t>(f.pid);
  const std::vector<MapEntry> maps = read_proc_maps(pid);
  const MapEntry* m = mapping_at(maps, f.fn);
  if (!m) {
    fetch_failures_++;  // the process has gone
    return;
  }
  const uint64_t offset = f.fn - m->start + m->file_offset;
  if (!fetched_.insert({m->dev, m->ino, offset}).second) return;
  // Code outside a file (generated at run time) cannot be probed; nor can a writable mapping's
  // (the kernel plants no breakpoint there).
  if (!m->is_file() || !m->executable || m->writable || m->deleted) {
    fetch_failures_++;
    return;
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/root" + m->path;
  // The export is probed already (a loader's vkGetInstanceProcAddr hands out its trampolines,
  // glXGetProcAddressARB libGLX's glXSwapBuffers): no second breakpoint.
  if (is_probed_export(*m, path, offset, f.call)) return;
  const std::vector<pid_t> pids = cfg_.scope.pids.empty() ? std::vector<pid_t>{-1} : cfg_.scope.pids;
  std::vector<Link> links;
  std::string err;
  // The return probe first: a call entered between the two would keep its entry for good.
  for (bool ret : {true, false})
    for (pid_t p : pids) {
      bpf_program* prog = ret ? skel_->progs.gs_gfx_exit : skel_->progs.gs_gfx_enter;
      Link l = multi_ ? attach_uprobe_multi(prog, {path, {offset}, {f.call}, p, ret}, &err)
                      : attach_uprobe(prog, {path, offset, p, f.call, ret}, &err);
      if (!l) {
        fetch_failures_++;
        fetched_.erase({m->dev, m->ino, offset});  // another fetch tries again
        return;                                    // what was attached goes with `links`
      }
      links.push_back(std::move(l));
    }
  for (Link& l : links) fetched_links_.push_back(std::move(l));
  fetched_sites_++;
  if (cfg_.on_fetched) cfg_.on_fetched({pid, f.call, f.getter, m->path, offset});
}

GraphicsCollector::Stats GraphicsCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.gs_gfx_drops);
  return {delivered_,
          percpu_sum(fd, GS_GFX_DROP_RINGBUF),
          percpu_sum(fd, GS_GFX_DROP_STATE),
          percpu_sum(fd, GS_GFX_DROP_FETCH),
          fetched_sites_,
          fetch_failures_};
}

void GraphicsCollector::detach() {
  if (detached_) return;
  detached_ = true;
  // Detaches wait for grace periods: the libraries' side by side (remove_library touches only
  // its own), beside the fetched functions'.
  std::vector<std::jthread> removing;
  for (size_t lib : libs_) removing.emplace_back([this, lib] { session_.remove_library(lib); });
  destroy_links(fetched_links_);
}

}  // namespace gpuscope

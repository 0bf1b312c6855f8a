#pragma once
// The graphics collector: entry and return probes on the calls of graphics.h in the Vulkan loader
// and the GL dispatch libraries (libEGL, libGLX, libGL, libOpenGL, libGLESv2), found in the
// processes in scope like libgpuscope-cupti.so is (at every scan, exec and dlopen) and, host-wide,
// in the dynamic linker's cache, so that processes started later are seen from their first call.
// Each call is delivered as a gs_gfx_event; frames.h makes frames of them.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/event_loop.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "graphics/graphics.h"

struct graphics_bpf;

namespace gpuscope {

class GraphicsCollector {
 public:
  struct Config {
    Scope scope;
    uint32_t ring_bytes = 1 << 20;
  };
  struct Stats {
    uint64_t delivered = 0;
    uint64_t lost_ringbuf = 0;  // ring buffer full
    uint64_t lost_state = 0;    // calls whose entry state found no room
  };
  // The event, and its process's name.
  using Sink = std::function<void(const gs_gfx_event&, std::string_view comm)>;

  GraphicsCollector(UprobeSession& session, Config cfg, Sink sink);
  ~GraphicsCollector();
  // Attaches the copies the dynamic linker's cache lists; returns their paths.
  std::vector<std::string> attach_system_libraries();
  void watch(EventLoop& loop) { loop.watch(*rb_); }
  void drain() { rb_->drain(); }
  Stats stats() const;
  // Processes seen mapping one of the libraries, and the library files attached.
  const std::set<pid_t>& graphics_pids() const { return pids_; }
  size_t library_files() const;
  void detach();

 private:
  void handle(const void* data, size_t size);
  Config cfg_;
  UprobeSession& session_;
  Sink sink_;
  std::unique_ptr<graphics_bpf, void (*)(graphics_bpf*)> skel_;
  std::unique_ptr<RingBuffer> rb_;
  std::vector<size_t> libs_;  // the session's library handles
  std::set<pid_t> pids_;
  ProcessNames names_;
  uint64_t delivered_ = 0;
  bool detached_ = false;
};

}  // namespace gpuscope

#pragma once
// The graphics collector: entry and return probes on the calls of graphics.h in the Vulkan loader
// and the GL dispatch libraries (libEGL, libGLX, libGL, libOpenGL, libGLESv2), found in the
// processes in scope like libgpuscope-cupti.so is (at every scan, exec and dlopen) and, host-wide,
// in the dynamic linker's cache, so that processes started later are seen from their first call.
// What the getters (vkGet{Instance,Device}ProcAddr, eglGetProcAddress, glXGetProcAddress[ARB])
// return for those calls' names is probed too, at its offset in the file that holds it (a driver,
// a layer, libGLdispatch): programs that call through such pointers never reach the exports.
// Each call is delivered as a gs_gfx_event; frames.h makes frames of them.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/elf_symbols.h"
#include "core/event_loop.h"
#include "core/proc_maps.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "graphics/graphics.h"

struct graphics_bpf;

namespace gpuscope {

// "vkGetDeviceProcAddr"; "?" for none.
const char* gfx_getter_name(uint32_t getter);

class GraphicsCollector {
 public:
  struct Stats {
    uint64_t delivered = 0;
    uint64_t lost_ringbuf = 0;    // ring buffer full
    uint64_t lost_state = 0;      // calls whose entry state found no room
    uint64_t lost_fetches = 0;    // fetched functions not reported (their ring buffer full)
    uint64_t fetched_sites = 0;   // fetched functions probed where they lie
    uint64_t fetch_failures = 0;  // fetched functions that could not be (not in a file, attach failed)
  };
  // A fetched function probed where it lies; once per (file, offset).
  struct FetchedSite {
    pid_t pid;         // the process that fetched it first
    uint32_t call;     // enum gs_gfx_call
    uint32_t getter;   // enum gs_gfx_getter
    std::string path;  // as that process maps it
    uint64_t file_offset;
  };
  struct Config {
    Scope scope;
    uint32_t ring_bytes = 1 << 20;
    std::function<void(const FetchedSite&)> on_fetched = {};  // after each is probed
  };
  // The event, and its process's name.
  using Sink = std::function<void(const gs_gfx_event&, std::string_view comm)>;

  GraphicsCollector(UprobeSession& session, Config cfg, Sink sink);
  ~GraphicsCollector();
  // Attaches the copies the dynamic linker's cache lists; returns their paths.
  std::vector<std::string> attach_system_libraries();
  void watch(EventLoop& loop) {
    loop.watch(*fetches_);
    loop.watch(*rb_);
  }
  void drain() {
    fetches_->drain();
    rb_->drain();
  }
  Stats stats() const;
  // Processes seen mapping one of the libraries, and the library files attached.
  const std::set<pid_t>& graphics_pids() const { return pids_; }
  size_t library_files() const;
  // Detaches every probe (the libraries' and the fetched functions', all at once: each detach
  // waits for an RCU grace period). Fetches read later are not probed.
  void detach();

 private:
  void handle(const void* data, size_t size);
  void handle_fetch(const void* data, size_t size);
  // Whether (file, offset) is the call's export in a library probed by symbol.
  bool is_probed_export(const MapEntry& m, const std::string& path, uint64_t offset, uint32_t call);
  Config cfg_;
  UprobeSession& session_;
  Sink sink_;
  std::unique_ptr<graphics_bpf, void (*)(graphics_bpf*)> skel_;
  std::unique_ptr<RingBuffer> rb_;
  std::unique_ptr<RingBuffer> fetches_;
  std::set<std::tuple<dev_t, ino_t, uint64_t>> fetched_;                          // probed (or found unprobeable) once
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const ElfSymbols>> exports_;  // graphics libraries' symbols
  std::vector<Link> fetched_links_;
  uint64_t fetched_sites_ = 0, fetch_failures_ = 0;
  std::vector<size_t> libs_;  // the session's library handles
  std::set<pid_t> pids_;
  ProcessNames names_;
  uint64_t delivered_ = 0;
  bool multi_ = false;  // programs loaded as uprobe_multi
  bool detached_ = false;
};

}  // namespace gpuscope

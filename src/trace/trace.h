#pragma once
#include <sys/types.h>

#include <time.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/events.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "core/where.h"

struct trace_bpf;

namespace gpuscope {

// The trace collector: one entry and one exit program for the selected rows of the site table,
// each call delivered as a gs_call_event (normalized, the process name filled in).
class TraceCollector {
 public:
  struct Config {
    std::vector<bool> apis;  // rows to trace (select_apis)
    bool exits = true;       // exit probes: durations and return codes
    Scope scope;
    uint32_t ringbuf_kb = 4096;
  };
  struct Stats {
    uint64_t delivered = 0;
    uint64_t lost_ringbuf = 0;  // ring buffer full
    uint64_t lost_state = 0;    // calls whose entry state found no room
  };
  using Sink = std::function<void(const gs_call_event&)>;

  // Loads the programs and hands them to the session, which attaches them.
  TraceCollector(UprobeSession& session, Config cfg, Sink sink);
  ~TraceCollector();
  void watch(EventLoop& loop);
  void drain();
  Stats stats() const;

 private:
  void handle(const void* data, size_t size);
  Config cfg_;
  Sink sink_;
  std::unique_ptr<trace_bpf, void (*)(trace_bpf*)> skel_;
  std::unique_ptr<RingBuffer> rb_;
  ProcessNames names_;
  uint64_t delivered_ = 0;
};

// Fills in `fields` from the API row and moves an exit's out value to its member.
void normalize_event(gs_call_event& e);

// The trace views: a terminal table and JSON lines.
struct FormatContext {
  int64_t realtime_offset_ns = 0;
  bool timestamps = true;
  CgroupNames* cgroups = nullptr;
  WhereView* where = nullptr;  // the container columns and fields
  // The kernel (or host function) a launch's handle names; empty while unknown.
  std::function<std::string(uint32_t pid, uint64_t handle, bool host_function)> kernel_name;
  time_t tm_secs = -1;
  struct tm tm_cache {};
};
void format_event_json(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out);
void format_event_table(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out);
void format_table_header(const FormatContext& ctx, fmt::memory_buffer& out);
const char* memcpy_kind_name(unsigned kind);

}  // namespace gpuscope

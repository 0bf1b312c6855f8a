#pragma once
// What `gpuscope timeline` records besides CUDA calls, GPU activity, graphics and counters comes
// from timeline sources, which register themselves: GPUSCOPE_TIMELINE_SOURCE(make_<cap>_timeline,
// ORDER, {...}) in the capability's folder, built by gpuscope_timeline_source(<cap> ...) in its
// cmake. A source owns its collector and gives generic spans and marks; the view writes them
// without knowing the capability.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/cli.h"
#include "core/event_loop.h"
#include "core/registry.h"
#include "core/scope.h"
#include "core/uprobe_session.h"

namespace gpuscope {

struct TimelineOptions {
  CommonFlags common;
  Scope scope;
  std::string out = "gpuscope-timeline.json";
  std::string pin_dir = "/sys/fs/bpf";
  std::string kmsg = "/dev/kmsg";
  std::vector<std::string> cupti_libs;
  uint32_t max_calls = 2000000;
};

// One arg of a span or a mark: null, a number, a flag, a string or a list of strings.
using TimelineValue = std::variant<std::nullptr_t, int64_t, uint64_t, bool, std::string, std::vector<std::string>>;
using TimelineArgs = std::vector<std::pair<std::string, TimelineValue>>;  // written in this order

// A span on a thread (CLOCK_BOOTTIME).
struct TimelineSpan {
  std::string category, name;
  uint32_t pid = 0, tid = 0;
  uint64_t start_ns = 0, dur_ns = 0;
  TimelineArgs args;
};

// An instant mark (CLOCK_BOOTTIME): on its thread where it has one, else on its process, else
// (a mark of no process) on the track named `track` of its source's own process.
struct TimelineMark {
  std::string category, name;
  uint64_t ts_ns = 0;
  std::optional<uint32_t> pid, tid;
  std::string track;
  TimelineArgs args;
};

// How a source's items are counted and named in the trace's metadata and the summary.
struct TimelineSourceInfo {
  const char* count_key = "";        // the metadata's count of its spans and marks ("..._count")
  const char* summary_key = "";      // the same count in the --json summary
  const char* summary_text = "";     // and in the text summary, after the number
  const char* unowned_process = "";  // the name of the process its marks of no process are on
};

struct TimelineItems {
  TimelineSourceInfo info;
  std::vector<TimelineSpan> spans;
  std::vector<TimelineMark> marks;
  std::map<uint32_t, std::string> comms;  // pid -> process name, where the timeline has none
  std::map<std::string, uint64_t> lost;   // what was not recorded, by reason
};

// Made before the session starts (its probes added to it), driven by the timeline's loop.
class TimelineSource {
 public:
  virtual ~TimelineSource() = default;
  // After session.start(): what the session does not attach.
  virtual void attach(UprobeSession& session) = 0;
  virtual void watch(EventLoop& loop) = 0;
  virtual void drain() = 0;
  // After session.detach(); drain() follows.
  virtual void detach() = 0;
  // Once drained: its spans, marks, process names and losses.
  virtual void take(TimelineItems& out) = 0;
};

using TimelineSourceFactory = std::unique_ptr<TimelineSource> (*)(UprobeSession&, const TimelineOptions&);
struct TimelineSourceEntry {
  TimelineSourceFactory make;
  TimelineSourceInfo info;
};
inline bool register_timeline_source(int order, TimelineSourceEntry e) {
  return OrderedRegistry<TimelineSourceEntry>::add(order, e);
}
// Lowest ORDER first: they are made, driven and written in that order.
inline std::vector<TimelineSourceEntry> timeline_sources() { return OrderedRegistry<TimelineSourceEntry>::sorted(); }
#define GPUSCOPE_TIMELINE_SOURCE(make, order, ...)                                              \
  [[maybe_unused]] static const bool gs_timeline_##make = ::gpuscope::register_timeline_source( \
      order, ::gpuscope::TimelineSourceEntry{make, ::gpuscope::TimelineSourceInfo __VA_ARGS__})

}  // namespace gpuscope

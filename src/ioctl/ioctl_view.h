#pragma once
// The ioctl view: one line per ioctl as it returns, and per interval the differences of the
// collector's cumulative counters, as a table or JSON lines. It never touches BPF.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/output.h"
#include "core/where.h"
#include "ioctl/ioctl_collector.h"

namespace gpuscope {

class IoctlView {
 public:
  struct Options {
    bool json = false;
    bool events = false;     // event lines come: the table only at the end
    bool clock = false;      // a time line above each table
    unsigned uvm_major = 0;  // of /dev/nvidia-uvm, for the names of its requests
  };
  IoctlView(Options o, const Scope& scope) : o_(o), where_(scope) {}
  void event(const void* data, size_t size);
  // Prints what changed since the last call; returns the ioctl rows printed, whose maxima are per report.
  std::vector<gs_ioctl_key> interval(const IoctlSnapshot& snap, bool final);
  void flush() { out_.flush(); }

 private:
  // Counts since the last interval, of the rows with any.
  struct Deltas {
    std::vector<std::pair<gs_ioctl_key, gs_ioctl_val>> ioctls;  // by pid, then most calls
    std::vector<std::pair<gs_mmap_key, gs_mmap_val>> mmaps;
    std::vector<std::pair<gs_open_key, gs_open_val>> opens;  // by pid and device
  };
  Deltas deltas(const IoctlSnapshot& snap);
  void ioctl_deltas(const IoctlSnapshot& snap, Deltas& d);
  void json(const Deltas& d);
  void table(const Deltas& d);
  std::string device(uint32_t rdev) const;
  std::string shown(uint32_t rdev) const;  // the device, and its DRM driver where known
  // A row's type and time, process, where and device (with "driver" where known).
  void head(JsonLine& j, const char* type, uint64_t ts_ns, uint32_t pid, std::string_view comm, uint32_t rdev);

  Options o_;
  WhereView where_;
  Writer out_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, gs_ioctl_val> prev_;  // (pid, rdev, request)
  std::map<std::pair<uint32_t, uint32_t>, gs_mmap_val> prev_mmap_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> prev_opens_;
  std::map<uint32_t, std::string> drivers_;  // the last snapshot's drm_drivers
  int64_t realtime_offset_ = realtime_minus_boottime_ns();
};

}  // namespace gpuscope

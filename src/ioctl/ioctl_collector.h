#pragma once
// The ioctl collector: loads ioctl.bpf.c, owns its maps, and gives cumulative snapshots of the
// per-process counters. Processes that have exited leave the maps after the snapshot that holds
// their final values (rows marked `exited`). It never prints.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/scope.h"
#include "ioctl/ioctl.h"

struct ioctl_bpf;

namespace gpuscope {

struct IoctlRow {
  gs_ioctl_key key;
  gs_ioctl_val val;  // cumulative over the process's life
  bool exited = false;
};

struct MmapRow {
  gs_mmap_key key;
  gs_mmap_val val;
  bool exited = false;
};

struct OpenRow {
  gs_open_key key;
  gs_open_val val;
  bool exited = false;
};

struct IoctlSnapshot {
  std::vector<IoctlRow> ioctls;
  std::vector<MmapRow> mmaps;
  std::vector<OpenRow> opens;
  std::map<uint32_t, std::string> drm_drivers;  // rdev -> kernel driver, from DRM_IOCTL_VERSION answers seen
};

struct IoctlStats {
  uint64_t state_full = 0, map_full = 0, ringbuf = 0;
};

class IoctlCollector {
 public:
  struct Config {
    Scope scope;                // -p (a map the programs check), -c
    bool events = false;        // ring buffer records, one per ioctl
    bool raw_syscalls = false;  // raw_tp sys_enter/sys_exit even where tracefs works
    uint32_t max_rows = 16384;  // (pid, device, request) counters
  };
  explicit IoctlCollector(Config cfg);
  ~IoctlCollector();
  IoctlCollector(const IoctlCollector&) = delete;
  IoctlCollector& operator=(const IoctlCollector&) = delete;

  // Cumulative counters; rows of processes found gone are final and leave the maps.
  IoctlSnapshot snapshot();
  // The maximum of each key is per report in the subcommand: reset where it was read.
  void reset_max(const std::vector<gs_ioctl_key>& keys);
  // With Config::events: the ring buffer of gs_ioctl_event records.
  int events_fd() const;
  IoctlStats stats() const;
  void detach();

  unsigned uvm_major() const { return uvm_major_; }
  bool raw() const { return raw_; }
  const std::string& why_raw() const { return why_raw_; }

 private:
  struct SkelDeleter {
    void operator()(ioctl_bpf* s) const;
  };
  Config cfg_;
  std::unique_ptr<ioctl_bpf, SkelDeleter> skel_;
  std::vector<Link> links_;
  unsigned uvm_major_ = 0;
  bool raw_ = false;
  std::string why_raw_;
  std::set<uint32_t> known_;  // pids with rows at the last snapshot
};

}  // namespace gpuscope

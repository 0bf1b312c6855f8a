#pragma once
// The uvm collector: counts nvidia-uvm's fault servicing and thrashing events through kprobes,
// or fentry where kprobes do not work, and gives typed snapshots. uvm.h holds the map layouts it
// shares with uvm.bpf.c; this header is userspace only. It never prints.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "uvm/uvm.h"

struct uvm_bpf;

namespace gpuscope {

// The probed nvidia-uvm functions, in program order: replayable, non-replayable, thrashing.
extern const char* const kUvmFunctions[3];
// The kallsyms name for `func`: itself, or with a compiler suffix (func.isra.0, func.constprop.0).
std::string resolve_kallsyms(const std::string& kallsyms_text, const std::string& func);

// One address the driver reported thrashing since the last snapshot.
struct UvmThrashing {
  uint64_t address = 0;
  uint64_t count = 0;
  uint32_t last_pid = 0;  // the task that recorded it: often a driver worker
};

struct UvmSnapshot {
  uint64_t counters[GS_UVM_COUNTERS] = {};  // cumulative, by gs_uvm_counter
  std::vector<UvmThrashing> thrashing;      // most counted first
};

class UvmCollector {
 public:
  // Attaches through kprobes, else fentry; throws UsageError saying why neither works.
  UvmCollector();
  ~UvmCollector();
  UvmCollector(const UvmCollector&) = delete;
  UvmCollector& operator=(const UvmCollector&) = delete;

  // "kprobes" or "fentry".
  const std::string& how() const { return how_; }
  // The counters, and the thrashing addresses counted since the last snapshot (taken out of the map).
  UvmSnapshot snapshot();
  void detach();
  // "PID (comm)" of the process with a mapping over `addr` among those that map /dev/nvidia-uvm
  // (managed memory), or "".
  static std::string owner_of(uint64_t addr);

 private:
  struct SkelDeleter {
    void operator()(uvm_bpf* s) const;
  };
  std::string try_kprobes();
  std::string try_fentry();

  std::unique_ptr<uvm_bpf, SkelDeleter> skel_;
  std::vector<Link> links_;
  std::string names_[3];
  std::string how_;
};

}  // namespace gpuscope

#pragma once
// The copies collector: memory copies and memsets per process and direction, counted in BPF
// (calls and bytes of the successful ones, failed calls apart), read back as cumulative rows.
// copies.h holds the layouts it shares with copies.bpf.c; this header is userspace only. It
// never prints.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/uprobe_session.h"

struct copies_bpf;

namespace gpuscope {

// "H2D", "D2H", "D2D", "H2H", "peer", "default" (cudaMemcpyDefault, cuMemcpy), "memset".
const char* copy_direction_name(unsigned dir);
// The direction (enum gs_copy_dir) of a CUPTI memcpy record's CUpti_ActivityMemcpyKind: an array
// is device memory; unknown kinds are GS_DIR_DEFAULT.
unsigned copy_direction_of_cupti(unsigned memcpy_kind);

// One process's copies of one direction, both layers summed; every count is cumulative since
// the collector started.
struct CopyRow {
  uint32_t pid = 0;
  std::string comm;
  uint64_t cgroup_id = 0;  // the process's cgroup v2 id at its first copy (0: none)
  unsigned direction = 0;  // enum gs_copy_dir (common/cuda_api.h)
  uint64_t calls = 0;      // succeeded
  uint64_t bytes = 0;      // moved or set by those
  uint64_t failed = 0;     // returned an error (no bytes counted)
  bool exited = false;     // the process's final row: it is forgotten after this snapshot
};

class CopiesCollector {
 public:
  struct Config {
    Scope scope;
    uint32_t max_rows = 0;  // (pid, direction, layer) rows; 0: GS_CP_MAX_ROWS
  };
  struct Stats {
    uint64_t rows_full = 0;  // calls not counted: row map full
    uint64_t no_state = 0;   // calls not counted: no per-thread state
    uint64_t lost = 0;       // exits not reported (ring buffer full): their rows stay
  };

  // Loads the programs and hands them to the session, which attaches them.
  CopiesCollector(UprobeSession& session, Config cfg);
  ~CopiesCollector();
  CopiesCollector(const CopiesCollector&) = delete;
  CopiesCollector& operator=(const CopiesCollector&) = delete;
  // Whether exits are seen; when not, why (exited processes keep their rows).
  bool exits_hooked() const { return hooks_.exits(); }
  const std::string& exit_hook_error() const { return hooks_.exit_error(); }
  // Every row, by (pid, direction); a process that exited since the last snapshot comes with its
  // final rows marked exited, and then goes (its BPF rows too).
  std::vector<CopyRow> snapshot();
  Stats stats() const;
  // The exit hook off (the session's probes go with session.detach()).
  void detach() { hooks_.detach(); }

 private:
  Config cfg_;
  std::unique_ptr<copies_bpf, void (*)(copies_bpf*)> skel_;
  OwnHooks hooks_;
  std::unique_ptr<RingBuffer> rb_;
  std::map<uint32_t, std::string> comms_;
  std::set<uint32_t> exited_;
};

}  // namespace gpuscope

#pragma once
// Probe sites of a CUDA object and attaching one program at all of them: what trace, latency
// and memleak share.
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/discovery.h"
#include "core/system.h"

namespace gpuscope {

// CUDA's per-thread-default-stream variants of an API's symbol, the plain name first.
extern const char* const kApiVariantSuffixes[3];

// The object's symbols `name_of(i)` and their `_ptsz`/`_ptds` variants, for each i below
// count that `selected` accepts; each file offset once, with i as its cookie.
UprobeMultiTarget collect_sites(const CudaObject& obj, unsigned count, const std::function<const char*(unsigned)>& name_of,
                                const std::function<bool(unsigned)>& selected = {});

struct AttachTally {
  size_t sites = 0;     // probe sites attached
  size_t failures = 0;  // probe sites that could not be
  std::string err;      // the last error
};

// Attaches prog at every site of t (t.pid, t.retprobe as set): one uprobe_multi link when
// `multi` (the program was prepared with prepare_uprobe_multi), else one link per site.
void attach_sites(bpf_program* prog, const UprobeMultiTarget& t, bool multi, std::vector<Link>& links,
                  AttachTally& tally);

// A uprobe on each newly found dynamic linker's _dl_debug_state (called around every dlopen
// and dlclose), with `prog`, which marks the calling process for a rescan. Returns how many.
size_t attach_loader_hooks(Discovery& disc, bpf_program* prog, std::vector<Link>& links, bool verbose);

// Takes every pid out of a BPF hash keyed by u32 pid (the "maps changed" sets).
std::vector<pid_t> take_pids(int map_fd);

// -c COMM: the rodata of src/common/comm_filter.bpf.h.
template <class Rodata>
void set_comm_filter(Rodata* ro, const std::string& comm) {
  if (comm.empty()) return;
  ro->filter_comm = true;
  strncpy(const_cast<char*>(ro->target_comm), comm.c_str(), sizeof(ro->target_comm) - 1);
}

// Opens and loads a skeleton (open, load: its generated functions) with its uprobe programs as
// uprobe_multi where the kernel has that (6.6+), else as one perf-event uprobe per site.
// `configure(skel)` sets what has to be set before load and returns the uprobe programs.
// Returns whether they are uprobe_multi; throws UsageError when neither way loads.
template <class Skel, class Ptr, class Configure>
bool open_and_load_uprobes(Ptr& skel, Skel* (*open)(), int (*load)(Skel*), Configure configure) {
  for (bool multi : {true, false}) {
    skel.reset(open());
    if (!skel) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
    std::vector<bpf_program*> progs = configure(skel.get());
    if (multi)
      for (bpf_program* p : progs) prepare_uprobe_multi(p);
    int err = load(skel.get());
    if (err == 0) return multi;
    if (!multi)
      throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) +
                       " (is the kernel built with BTF and uprobes? try 'gpuscope doctor')");
  }
  return false;
}

}  // namespace gpuscope

#pragma once
// Probe sites of a CUDA object and attaching one program at all of them: what trace, latency
// and memleak share.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/bpf.h"
#include "core/discovery.h"

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

}  // namespace gpuscope

#include "core/probes.h"

#include <bpf/bpf.h>

#include <cstdio>
#include <unordered_set>

#include "core/elf_symbols.h"

namespace gpuscope {

const char* const kApiVariantSuffixes[3] = {"", "_ptsz", "_ptds"};

UprobeMultiTarget collect_sites(const CudaObject& obj, unsigned count, const std::function<const char*(unsigned)>& name_of,
                                const std::function<bool(unsigned)>& selected) {
  UprobeMultiTarget t;
  t.path = obj.open_path;
  std::unordered_set<uint64_t> offsets;
  for (unsigned i = 0; i < count; i++) {
    if (selected && !selected(i)) continue;
    for (const char* suf : kApiVariantSuffixes) {
      const ElfSymbol* sym = obj.symbols->find(std::string(name_of(i)) + suf);
      if (!sym || !offsets.insert(sym->file_offset).second) continue;
      t.offsets.push_back(sym->file_offset);
      t.cookies.push_back(i);
    }
  }
  return t;
}

void attach_sites(bpf_program* prog, const UprobeMultiTarget& t, bool multi, std::vector<Link>& links,
                  AttachTally& tally) {
  if (multi) {
    if (Link l = attach_uprobe_multi(prog, t, &tally.err)) {
      links.push_back(std::move(l));
      tally.sites += t.offsets.size();
    } else {
      tally.failures += t.offsets.size();
    }
    return;
  }
  for (size_t i = 0; i < t.offsets.size(); i++) {
    if (Link l = attach_uprobe(prog, {t.path, t.offsets[i], t.pid, t.cookies[i], t.retprobe}, &tally.err)) {
      links.push_back(std::move(l));
      tally.sites++;
    } else {
      tally.failures++;
    }
  }
}

size_t attach_loader_hooks(Discovery& disc, bpf_program* prog, std::vector<Link>& links, bool verbose) {
  size_t n = 0;
  for (const auto& ld : disc.take_new_loaders()) {
    std::string err;
    if (Link l = attach_uprobe(prog, {ld.open_path, ld.debug_state_offset, -1, 0, false}, &err)) {
      links.push_back(std::move(l));
      n++;
    } else if (verbose) {
      fprintf(stderr, "gpuscope: cannot watch dlopen in %s: %s\n", ld.open_path.c_str(), err.c_str());
    }
  }
  return n;
}

std::vector<pid_t> take_pids(int map_fd) {
  std::vector<pid_t> pids;
  uint32_t key, next;
  uint32_t* prev = nullptr;
  while (bpf_map_get_next_key(map_fd, prev, &next) == 0) {
    pids.push_back(static_cast<pid_t>(next));
    key = next;
    prev = &key;
  }
  for (pid_t p : pids) {
    uint32_t k = static_cast<uint32_t>(p);
    bpf_map_delete_elem(map_fd, &k);
  }
  return pids;
}

}  // namespace gpuscope

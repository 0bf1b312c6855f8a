#include "core/probes.h"

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

}  // namespace gpuscope

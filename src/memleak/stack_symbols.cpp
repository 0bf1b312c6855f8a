#include "memleak/stack_symbols.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/demangle.h"
#include "core/elf_symbols.h"

namespace gpuscope {

bool StackSymbols::snapshot(pid_t pid) {
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/maps").c_str(), "re");
  if (!f) return false;
  std::vector<Mapping> out;
  char line[4352];
  while (fgets(line, sizeof line, f)) {
    Mapping m;
    char perms[8];
    int at = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %*x:%*x %*u %n", &m.start, &m.end, perms, &m.offset, &at) < 4) continue;
    if (perms[2] != 'x' || line[at] != '/') continue;
    m.path = line + at;
    while (!m.path.empty() && (m.path.back() == '\n' || m.path.back() == ' ')) m.path.pop_back();
    // Symbols are read now, while /proc/PID/root still leads to the process's files.
    funcs(pid, m.path);
    out.push_back(std::move(m));
  }
  fclose(f);
  if (out.empty()) return false;  // a zombie has no mappings left
  maps_[pid] = std::move(out);
  return true;
}

const std::vector<StackSymbols::Func>& StackSymbols::funcs(pid_t pid, const std::string& path) {
  auto& f = files_[path];
  if (f) return *f;
  f = std::make_unique<std::vector<Func>>();
  for (const std::string& p : {"/proc/" + std::to_string(pid) + "/root" + path, path}) {
    try {
      ElfSymbols syms = ElfSymbols::read(p);
      for (auto& [name, s] : syms.all()) f->push_back({s.file_offset, s.size, name});
      break;
    } catch (const std::exception&) {
    }
  }
  std::sort(f->begin(), f->end(), [](const Func& a, const Func& b) { return a.offset < b.offset; });
  return *f;
}

std::string StackSymbols::frame(pid_t pid, uint64_t addr) {
  auto it = maps_.find(pid);
  if (it == maps_.end()) return fmt::format("0x{:x}", addr);
  for (const Mapping& m : it->second) {
    if (addr < m.start || addr >= m.end) continue;
    std::string module = m.path.substr(m.path.rfind('/') + 1);
    uint64_t off = addr - m.start + m.offset;
    const auto& fs = funcs(pid, m.path);
    auto f = std::upper_bound(fs.begin(), fs.end(), off - 1, [](uint64_t o, const Func& fn) { return o < fn.offset; });
    if (f != fs.begin()) {
      --f;
      if (off - 1 < f->offset + std::max<uint64_t>(f->size, 1))
        return fmt::format("{}+0x{:x} ({})", demangle(f->name), off - f->offset, module);
    }
    return fmt::format("0x{:x} ({})", addr, module);
  }
  return fmt::format("0x{:x}", addr);
}

}  // namespace gpuscope

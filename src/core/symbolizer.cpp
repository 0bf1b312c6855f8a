#include "core/symbolizer.h"

#include <sys/sysmacros.h>

#include "core/perf_map.h"
#include "core/proc_maps.h"

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/demangle.h"
#include "core/elf_symbols.h"
#include "core/system.h"

namespace gpuscope {

using Clock = std::chrono::steady_clock;

pid_t ns_pid(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream in(line.substr(6));
    pid_t v = 0, last = 0;
    while (in >> v) last = v;
    return last ? last : pid;
  }
  return pid;
}

// Function symbols of one file, by file offset (what a mapping's address turns into).
struct Symbolizer::SymTable {
  struct Sym {
    uint64_t offset, size;
    std::string name;  // as the ELF file has it (mangled)
  };
  std::vector<Sym> syms;
  const Sym* find(uint64_t off) const {
    auto it = std::upper_bound(syms.begin(), syms.end(), off, [](uint64_t o, const Sym& s) { return o < s.offset; });
    if (it == syms.begin()) return nullptr;
    --it;
    // A sized symbol must contain the address; an unsized one reaches to the next symbol.
    if (it->size && off >= it->offset + it->size) return nullptr;
    return &*it;
  }
};

struct Symbolizer::Process {
  struct Mapping {
    uint64_t start, end, pgoff;
    std::string path, key;
    std::shared_ptr<SymTable> table;
    bool tried = false;
  };
  std::vector<Mapping> maps;
  Clock::time_point maps_at{};
  std::string perf_map;  // path through /proc/PID/root
  std::vector<PerfMapEntry> perf;
  struct timespec perf_mtime {};
  off_t perf_size = -1;
  Clock::time_point perf_at{};

  // Keeps what it had when the process is gone: stacks of exited processes still resolve.
  void read_maps(pid_t pid) {
    maps_at = Clock::now();
    std::vector<Mapping> fresh;
    for (auto& e : read_proc_maps(pid)) {
      if (!e.executable) continue;
      Mapping m{e.start, e.end, e.file_offset, e.path, {}, nullptr, false};
      // A file mapping has an inode; [vdso], JIT pages and [anon:...] do not.
      if (e.is_file()) m.key = fmt::format("{:x}:{:x}:{}", major(e.dev), minor(e.dev), e.ino);
      fresh.push_back(std::move(m));
    }
    if (fresh.empty()) return;  // a zombie has no mappings left
    std::sort(fresh.begin(), fresh.end(), [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
    for (auto& m : fresh)  // symbol tables already loaded stay with their mapping
      if (Mapping* old = find_in(maps, m.start); old && old->key == m.key && old->end == m.end) {
        m.table = old->table;
        m.tried = old->tried;
      }
    maps = std::move(fresh);
  }

  static Mapping* find_in(std::vector<Mapping>& v, uint64_t addr) {
    auto it = std::upper_bound(v.begin(), v.end(), addr, [](uint64_t a, const Mapping& m) { return a < m.start; });
    if (it == v.begin()) return nullptr;
    --it;
    return addr < it->end ? &*it : nullptr;
  }
  Mapping* find(uint64_t addr) { return find_in(maps, addr); }

  // CPython's -X perf and JITs append to the map as they go: re-read it when it changed.
  void refresh_perf_map() {
    auto now = Clock::now();
    if (perf_size >= 0 && now - perf_at < std::chrono::milliseconds(500)) return;
    perf_at = now;
    struct stat st;
    if (stat(perf_map.c_str(), &st) != 0) {
      perf.clear();
      perf_size = 0;
      return;
    }
    if (st.st_size == perf_size && st.st_mtim.tv_sec == perf_mtime.tv_sec && st.st_mtim.tv_nsec == perf_mtime.tv_nsec)
      return;
    perf_size = st.st_size;
    perf_mtime = st.st_mtim;
    perf = parse_perf_map(read_file_opt(perf_map).value_or(""));
  }

  const std::string* perf_find(uint64_t addr) {
    refresh_perf_map();
    return perf_map_find(perf, addr);
  }
};

static std::string base_name(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

Symbolizer::Process& Symbolizer::process(pid_t pid) {
  auto& p = procs_[pid];
  if (!p) {
    p = std::make_unique<Process>();
    p->read_maps(pid);
    p->perf_map = fmt::format("/proc/{}/root/tmp/perf-{}.map", pid, ns_pid(pid));
  }
  return *p;
}

std::shared_ptr<Symbolizer::SymTable> Symbolizer::table(pid_t pid, const std::string& path, const std::string& key) {
  auto it = tables_.find(key);
  if (it != tables_.end()) return it->second;
  auto t = std::make_shared<SymTable>();
  // Through the process's root first: a container's /usr/lib is not ours.
  for (const std::string& p : {fmt::format("/proc/{}/root{}", pid, path), path}) {
    try {
      ElfSymbols e = ElfSymbols::read(p);
      for (auto& [name, s] : e.all()) t->syms.push_back({s.file_offset, s.size, name});
      break;
    } catch (const std::exception&) {
    }
  }
  std::sort(t->syms.begin(), t->syms.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  tables_.emplace(key, t);
  return t;
}

std::string Symbolizer::user(pid_t pid, uint64_t addr, bool return_address, bool with_offset) {
  Process& p = process(pid);
  uint64_t a = return_address && addr ? addr - 1 : addr;
  Process::Mapping* m = p.find(a);
  if (!m && Clock::now() - p.maps_at > std::chrono::seconds(1)) {
    p.read_maps(pid);  // a library loaded since
    m = p.find(a);
  }
  if (m && !m->key.empty()) {
    if (!m->tried) {
      m->tried = true;
      m->table = table(pid, m->path, m->key);
    }
    uint64_t off = a - m->start + m->pgoff;
    if (m->table)
      if (const SymTable::Sym* s = m->table->find(off)) {
        std::string name = s->name.starts_with("_Z") ? demangle(s->name) : s->name;
        return with_offset
                   ? fmt::format("{}+{:#x} ({})", name, addr - m->start + m->pgoff - s->offset, base_name(m->path))
                   : name;
      }
    return fmt::format("{}+{:#x}", base_name(m->path), off);
  }
  if (const std::string* n = p.perf_find(a)) return *n;
  if (m && !m->path.empty()) return fmt::format("{}+{:#x}", m->path, a - m->start);
  return fmt::format("{:#x}", addr);
}

// The mapping holding addr; the maps are read again when none does (a library loaded since).
static Symbolizer::Process::Mapping* find_mapping(Symbolizer::Process& p, pid_t pid, uint64_t addr) {
  auto* m = p.find(addr);
  if (!m && Clock::now() - p.maps_at > std::chrono::milliseconds(200)) {
    p.read_maps(pid);  // a library loaded since
    m = p.find(addr);
  }
  return m;
}

std::optional<Symbolizer::Symbol> Symbolizer::symbol_at(pid_t pid, uint64_t addr) {
  Process::Mapping* m = find_mapping(process(pid), pid, addr);
  if (!m || m->key.empty()) return std::nullopt;
  if (!m->tried) {
    m->tried = true;
    m->table = table(pid, m->path, m->key);
  }
  uint64_t off = addr - m->start + m->pgoff;
  const SymTable::Sym* s = m->table ? m->table->find(off) : nullptr;
  if (!s) return std::nullopt;
  return Symbol{s->name, off - s->offset, base_name(m->path)};
}

std::string Symbolizer::module_of(pid_t pid, uint64_t addr) {
  Process::Mapping* m = addr ? find_mapping(process(pid), pid, addr) : nullptr;
  return m && !m->path.empty() ? base_name(m->path) : "?";
}

bool Symbolizer::snapshot(pid_t pid) {
  procs_.erase(pid);
  Process& p = process(pid);
  if (p.maps.empty()) {
    procs_.erase(pid);
    return false;
  }
  // Symbol tables are read now, while /proc/PID/root still leads to the process's files.
  for (auto& m : p.maps)
    if (!m.key.empty() && !m.tried) {
      m.tried = true;
      m.table = table(pid, m.path, m.key);
    }
  return true;
}

std::vector<pid_t> Symbolizer::pids() const {
  std::vector<pid_t> r;
  for (auto& [pid, _] : procs_) r.push_back(pid);
  return r;
}

std::vector<std::string> Symbolizer::user_stack(pid_t pid, const uint64_t* ips, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n && ips[i]; i++) out.push_back(user(pid, ips[i], i > 0));
  return out;
}

void Symbolizer::load_kallsyms() {
  ksyms_loaded_ = true;
  FILE* f = fopen("/proc/kallsyms", "re");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    uint64_t addr;
    char type;
    char name[256];
    if (sscanf(line, "%" SCNx64 " %c %255s", &addr, &type, name) != 3 || !addr) continue;
    if (type != 't' && type != 'T' && type != 'w' && type != 'W') continue;
    ksyms_.emplace_back(addr, name);
  }
  fclose(f);
  std::sort(ksyms_.begin(), ksyms_.end());
}

std::string Symbolizer::kernel(uint64_t addr) {
  if (!ksyms_loaded_) load_kallsyms();
  auto it = std::upper_bound(ksyms_.begin(), ksyms_.end(), addr,
                             [](uint64_t a, const std::pair<uint64_t, std::string>& s) { return a < s.first; });
  if (it == ksyms_.begin()) return fmt::format("{:#x}", addr);
  return std::prev(it)->second;
}

std::vector<std::string> Symbolizer::kernel_stack(const uint64_t* ips, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n && ips[i]; i++) out.push_back(kernel(ips[i]));
  return out;
}

void Symbolizer::forget(pid_t pid) { procs_.erase(pid); }

}  // namespace gpuscope

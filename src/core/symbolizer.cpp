#include "core/symbolizer.h"

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

#include "core/symbol_table.h"
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

struct Symbolizer::Process {
  struct Mapping {
    uint64_t start, end, pgoff;
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;  // 0: no file ([vdso], JIT pages, [anon:...])
    std::shared_ptr<const SymbolTable> table;
    bool tried = false;

    const SymbolTable* symbols(pid_t pid) {
      if (!tried) {
        tried = true;
        // Through the process's root first: a container's /usr/lib is not ours.
        table = SymbolTable::shared(dev, ino, {fmt::format("/proc/{}/root{}", pid, path), path});
      }
      return table.get();
    }
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
      Mapping m{e.start, e.end, e.file_offset, e.path};
      if (e.is_file()) m.dev = e.dev, m.ino = e.ino;
      fresh.push_back(std::move(m));
    }
    if (fresh.empty()) return;  // a zombie has no mappings left
    std::sort(fresh.begin(), fresh.end(), [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
    for (auto& m : fresh)  // symbol tables already loaded stay with their mapping
      if (Mapping* old = find_in(maps, m.start); old && old->dev == m.dev && old->ino == m.ino && old->end == m.end) {
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

std::string Symbolizer::user(pid_t pid, uint64_t addr, bool return_address, bool with_offset) {
  Process& p = process(pid);
  uint64_t a = return_address && addr ? addr - 1 : addr;
  Process::Mapping* m = p.find(a);
  if (!m && Clock::now() - p.maps_at > std::chrono::seconds(1)) {
    p.read_maps(pid);  // a library loaded since
    m = p.find(a);
  }
  if (m && m->ino) {
    const SymbolTable* t = m->symbols(pid);
    uint64_t off = a - m->start + m->pgoff;
    if (const SymbolTable::Entry* s = t->find(off))
      if (std::string name = t->display_name(*s); !name.empty())
        return with_offset
                   ? fmt::format("{}+{:#x} ({})", name, addr - m->start + m->pgoff - s->offset, base_name(m->path))
                   : name;
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
  if (!m || !m->ino) return std::nullopt;
  const SymbolTable* t = m->symbols(pid);
  uint64_t off = addr - m->start + m->pgoff;
  const SymbolTable::Entry* s = t->find(off);
  if (!s) return std::nullopt;
  std::string raw = t->name(*s);
  if (raw.empty()) return std::nullopt;
  return Symbol{std::move(raw), off - s->offset, base_name(m->path)};
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
    if (m.ino) m.symbols(pid);
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

#include "core/discovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <regex>

#include "core/proc_maps.h"
#include "core/system.h"

namespace gpuscope {

Discovery::Discovery(Wanted wanted, std::vector<pid_t> pids) : wanted_(std::move(wanted)), pids_(std::move(pids)) {}

bool Discovery::looks_like_cuda_library(std::string_view b) {
  auto starts = [&](std::string_view p) {
    return b.size() >= p.size() && b.substr(0, p.size()) == p && (b.size() == p.size() || b[p.size()] == '.');
  };
  return starts("libcudart.so") || starts("libcuda.so");
}

std::vector<Discovery::Mapping> Discovery::exec_mappings(pid_t pid) {
  std::vector<Mapping> out;
  for (auto& m : read_exec_file_maps(pid))
    if (!m.deleted) out.push_back({std::move(m.path), m.dev, m.ino});
  return out;
}

std::optional<CudaObject> Discovery::consider(const std::string& path, const std::string& open_path, pid_t pid) {
  auto held = std::make_shared<Fd>(open(open_path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!*held || fstat(held->get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  Key key{st.st_dev, st.st_ino};
  if (done_.count(key)) return std::nullopt;
  const std::string via = "/proc/self/fd/" + std::to_string(held->get());
  auto& syms = symbols_[key];
  if (!syms) {
    try {
      syms = std::make_shared<const ElfSymbols>(ElfSymbols::read(via, wanted_));
    } catch (const std::exception&) {
      symbols_.erase(key);
      done_.insert(key);  // held open, so not gone with its process: no ELF file
      return std::nullopt;
    }
  }
  if (syms->all().empty()) {
    done_.insert(key);
    symbols_.erase(key);
    return std::nullopt;
  }
  return CudaObject{st.st_dev, st.st_ino, path, via, pid, syms, {}, std::move(held)};
}

std::vector<CudaObject> Discovery::scan_processes(const std::vector<pid_t>* only) {
  std::vector<CudaObject> found;
  std::map<Key, size_t> index;
  auto pids = only ? *only : pids_.empty() ? list_pids() : pids_;
  const pid_t self = getpid();
  for (pid_t pid : pids) {
    if (pid == self) continue;
    for (auto& m : exec_mappings(pid)) {
      std::string_view base = std::string_view(m.path).substr(m.path.rfind('/') + 1);
      std::string open_path = "/proc/" + std::to_string(pid) + "/root" + m.path;
      if (base.rfind("ld-linux", 0) == 0 && loaders_seen_.insert({m.dev, m.ino}).second) {
        try {
          auto syms = ElfSymbols::read(open_path, [](std::string_view n) { return n == "_dl_debug_state"; });
          if (auto* s = syms.find("_dl_debug_state")) new_loaders_.push_back({open_path, s->file_offset});
        } catch (const std::exception&) {
        }
      }
      // The maps line already names the inode: skip known files without a stat.
      Key key{m.dev, m.ino};
      if (done_.count(key)) {
        if (cuda_.count(key)) cuda_pids_.push_back(pid);
        continue;
      }
      if (auto it = index.find(key); it != index.end()) {
        cuda_pids_.push_back(pid);
        auto& alt = found[it->second].alternates;
        if (alt.size() < 4) alt.emplace_back(pid, open_path);
        continue;
      }
      auto obj = consider(m.path, open_path, pid);
      if (!obj) continue;
      index[key] = found.size();
      found.push_back(std::move(*obj));
      cuda_pids_.push_back(pid);
    }
  }
  return found;
}

void Discovery::attached(const CudaObject& obj) {
  Key key{obj.dev, obj.ino};
  done_.insert(key);
  cuda_.insert(key);
  attempts_.erase(key);
  symbols_.erase(key);
}

bool Discovery::attach_failed(const CudaObject& obj) {
  Key key{obj.dev, obj.ino};
  if (++attempts_[key] < kMaxAttempts) return true;
  done_.insert(key);
  attempts_.erase(key);
  symbols_.erase(key);
  return false;
}

std::vector<Discovery::Loader> Discovery::take_new_loaders() {
  std::vector<Loader> out;
  out.swap(new_loaders_);
  return out;
}

std::vector<LdCacheEntry> ld_cache_entries() {
  std::vector<LdCacheEntry> out;
  FILE* p = popen("ldconfig -p 2>/dev/null", "re");
  if (!p) return out;
  char line[4096];
  static const std::regex re(R"(^\s*(\S+) \(([^)]*)\) => (\S+))");
  while (fgets(line, sizeof line, p)) {
    std::cmatch m;
    if (std::regex_search(line, m, re) && m[2].str().find("x86-64") != std::string::npos)
      out.push_back({m[1].str(), m[3].str()});
  }
  pclose(p);
  return out;
}

std::vector<CudaObject> Discovery::scan_ld_cache() {
  std::vector<CudaObject> found;
  for (auto& e : ld_cache_entries()) {
    if (!looks_like_cuda_library(e.name)) continue;
    auto obj = consider(e.path, e.path, 0);
    if (obj) found.push_back(std::move(*obj));
  }
  return found;
}

CudaObject Discovery::add_path(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw UsageError("--lib " + path + ": " + strerror(errno));
  if (!S_ISREG(st.st_mode)) throw UsageError("--lib " + path + ": not a regular file");
  std::shared_ptr<const ElfSymbols> syms;
  try {
    syms = std::make_shared<const ElfSymbols>(ElfSymbols::read(path, wanted_));
  } catch (const std::exception& e) {
    throw UsageError(std::string("--lib ") + e.what());
  }
  if (syms->all().empty()) throw UsageError("--lib " + path + ": defines no CUDA runtime or driver API function");
  return CudaObject{st.st_dev, st.st_ino, path, path, 0, std::move(syms), {}};
}

}  // namespace gpuscope

#pragma once
#include <sys/types.h>

#include <memory>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/elf_symbols.h"
#include "core/fd.h"

namespace gpuscope {

// A file that defines probed CUDA symbols: a libcudart/libcuda copy anywhere (system, pip
// wheel, conda, container), or an executable or library with cudart linked in statically.
struct CudaObject {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;                           // as the process sees it
  std::string open_path;                      // /proc/self/fd/N of `held`, opened through /proc/PID/root
  pid_t seen_in = 0;                          // 0 when found outside any process (ld cache, --lib)
  std::shared_ptr<const ElfSymbols> symbols;  // only the wanted names
  // Other processes mapping the same file, (pid, open path): tried in turn when attaching
  // through open_path fails because its process has gone.
  std::vector<std::pair<pid_t, std::string>> alternates;
  // The file, held open from its first sight: the process that maps it may exit (in a few ms)
  // before it is attached, and its /proc/PID/root path with it, but not this.
  std::shared_ptr<Fd> held;
};

// Finds CudaObjects by (st_dev, st_ino). A file is offered again by later scans until the caller
// says it is attached (or has failed kMaxAttempts times): a process that exits between the scan
// and the attach must not hide its library from every later process. `wanted` decides which
// symbol names count.
// The dynamic linker's cache (ldconfig -p): its x86-64 libraries, by name and path.
struct LdCacheEntry {
  std::string name;  // libvulkan.so.1
  std::string path;
};
std::vector<LdCacheEntry> ld_cache_entries();

class Discovery {
 public:
  using Wanted = ElfSymbols::Filter;
  Discovery(Wanted wanted, std::vector<pid_t> pids);

  // New objects mapped by the watched processes (all processes when no pid was given), or
  // by just `only` when given.
  std::vector<CudaObject> scan_processes(const std::vector<pid_t>* only = nullptr);
  // Dynamic linkers (ld-linux*) seen mapped since the last call, each inode once, with the
  // file offset of _dl_debug_state, which they call around every dlopen and dlclose.
  struct Loader {
    std::string open_path;
    uint64_t debug_state_offset;
  };
  std::vector<Loader> take_new_loaders();
  // libcudart/libcuda known to the dynamic linker cache.
  std::vector<CudaObject> scan_ld_cache();
  // --lib PATH; throws UsageError when the file is not ELF or defines none of the wanted symbols.
  CudaObject add_path(const std::string& path);
  // The object is attached: later scans skip it.
  void attached(const CudaObject& obj);
  // The processes the scans since the last call found mapping a CUDA object (attached or found).
  std::vector<pid_t> take_cuda_pids() { return std::exchange(cuda_pids_, {}); }
  // Whether the file (by device and inode, whatever its name) is attached or settled already.
  bool settled(const CudaObject& obj) const { return done_.count({obj.dev, obj.ino}) > 0; }
  // Attaching failed through every path offered; returns false when it is given up for good.
  bool attach_failed(const CudaObject& obj);
  static constexpr int kMaxAttempts = 3;
  // Executable mappings of one process: (path as mapped, dev, ino).
  struct Mapping {
    std::string path;
    dev_t dev;
    ino_t ino;
  };
  static std::vector<Mapping> exec_mappings(pid_t pid);
  static bool looks_like_cuda_library(std::string_view basename);

 private:
  using Key = std::pair<dev_t, ino_t>;
  std::optional<CudaObject> consider(const std::string& path, const std::string& open_path, pid_t pid);
  Wanted wanted_;
  std::vector<pid_t> pids_;
  std::set<Key> done_;  // attached, not CUDA, or given up
  std::set<Key> cuda_;  // attached
  std::vector<pid_t> cuda_pids_;
  std::map<Key, std::shared_ptr<const ElfSymbols>> symbols_;  // read once per file
  std::map<Key, int> attempts_;
  std::set<std::pair<dev_t, ino_t>> loaders_seen_;
  std::vector<Loader> new_loaders_;
};

}  // namespace gpuscope

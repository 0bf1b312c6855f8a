#pragma once
// User stacks of processes that may have exited by the time they are printed: mappings are
// read from /proc while the process runs, symbols from the ELF files when needed.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpuscope {

class StackSymbols {
 public:
  // Reads the process's file-backed executable mappings; false if it is gone.
  bool snapshot(pid_t pid);
  bool has(pid_t pid) const { return maps_.count(pid) > 0; }
  void forget(pid_t pid) { maps_.erase(pid); }
  std::vector<pid_t> pids() const {
    std::vector<pid_t> r;
    for (auto& [p, _] : maps_) r.push_back(p);
    return r;
  }
  // "function+0xoff (module)", "0xaddr (module)" or "0xaddr". Addresses are return
  // addresses: the call is the byte before.
  std::string frame(pid_t pid, uint64_t addr);

 private:
  struct Mapping {
    uint64_t start, end, offset;
    std::string path;
  };
  struct Func {
    uint64_t offset, size;
    std::string name;
  };
  const std::vector<Func>& funcs(pid_t pid, const std::string& path);

  std::map<pid_t, std::vector<Mapping>> maps_;
  std::map<std::string, std::unique_ptr<std::vector<Func>>> files_;
};

}  // namespace gpuscope

#pragma once
// Names addresses of user and kernel stacks, as BPF stack maps give them.
// User: the ELF symbol of the mapped file (demangled C++), opened through /proc/PID/root so a
// container's files are found; for code outside any file (a JIT, CPython's -X perf trampolines),
// the process's perf map /tmp/perf-NSPID.map, read through /proc/PID/root under the pid the
// process has in its own pid namespace. Kernel: /proc/kallsyms.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpuscope {

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  // One frame of pid. `return_address`: the address follows a call (every frame but the first
  // of a stack), so the call itself is looked up. `with_offset`: "name+0xoff (module)" rather
  // than the bare name (which flame graphs want, so that frames of one function merge).
  std::string user(pid_t pid, uint64_t addr, bool return_address = false, bool with_offset = false);
  // A stack as a BPF stack map stores it: innermost first, 0-terminated.
  std::vector<std::string> user_stack(pid_t pid, const uint64_t* ips, size_t n);
  // The ELF function symbol covering addr, its name as the file has it (not demangled), addr's
  // offset into it and the file's base name.
  struct Symbol {
    std::string raw;
    uint64_t offset;
    std::string module;
  };
  std::optional<Symbol> symbol_at(pid_t pid, uint64_t addr);
  // Base name of the file mapped at addr; "?" when none.
  std::string module_of(pid_t pid, uint64_t addr);
  std::string kernel(uint64_t addr);
  std::vector<std::string> kernel_stack(const uint64_t* ips, size_t n);
  // Reads the process's mappings and their symbol tables now, so that its stacks still resolve
  // after it exits; false when it is already gone.
  bool snapshot(pid_t pid);
  bool has(pid_t pid) const { return procs_.count(pid) > 0; }
  std::vector<pid_t> pids() const;
  // The process has exited: drop what was read for it.
  void forget(pid_t pid);

  struct Process;

 private:
  Process& process(pid_t pid);
  void load_kallsyms();

  // Each mapping holds its file's SymbolTable, shared process-wide: it lives while a process
  // that maps the file is known here or to another Symbolizer.
  std::unordered_map<pid_t, std::unique_ptr<Process>> procs_;
  std::vector<std::pair<uint64_t, std::string>> ksyms_;
  bool ksyms_loaded_ = false;
};

// The pid of a process in its own (innermost) pid namespace: the last NSpid field of
// /proc/PID/status; pid itself when that is unreadable.
pid_t ns_pid(pid_t pid);

}  // namespace gpuscope

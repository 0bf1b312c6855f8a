#pragma once
// Which processes a capability watches: -p and -c, filled and checked by add_scope_flags, taken
// by every collector. A new filter (a container, a cgroup) is added here: its flag, its check,
// wants() for user space and apply_scope() for the BPF side.
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

struct Scope {
  std::vector<pid_t> pids;        // only these host pids; empty: every process
  std::string comm;               // only processes with this name (checked in BPF)
  std::vector<std::string> libs;  // also probe these files
  // Throws UsageError ("pid N does not exist") for a pid that does not exist.
  void validate() const;
  bool wants_pid(uint32_t pid) const;
  // The process is in scope: what user space checks of what BPF may not have filtered.
  bool wants(uint32_t pid, std::string_view comm) const;
};

// The BPF side of a scope: the comm filter of programs that include common/comm_filter.bpf.h
// (pids are attached per process by the session, or checked in user space).
template <class Rodata>
void set_comm_filter(Rodata* ro, const std::string& comm) {
  if (comm.empty()) return;
  ro->filter_comm = true;
  strncpy(const_cast<char*>(ro->target_comm), comm.c_str(), sizeof(ro->target_comm) - 1);
}
template <class Rodata>
void apply_scope(Rodata* ro, const Scope& s) {
  set_comm_filter(ro, s.comm);
}

}  // namespace gpuscope

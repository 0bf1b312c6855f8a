#pragma once
// Which processes a capability watches: -p, -c, and the container filters --container, --pod,
// -n and --host, filled and checked by add_scope_flags, taken by every collector. A new filter
// is added here: its flag, its check, wants() for user space and apply_scope() for the BPF side.
#include <sys/types.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/containers.h"
#include "core/system.h"

namespace gpuscope {

// --container NAME|ID (any of them), --pod NAME, -n NAMESPACE, --host: all that are given hold.
struct ContainerFilter {
  std::vector<std::string> containers;
  std::string pod;
  std::string ns;
  bool host = false;
  bool active() const { return host || !containers.empty() || !pod.empty() || !ns.empty(); }
  bool matches(const ContainerInfo& c) const;
  // "--pod web -n prod", for messages.
  std::string describe() const;
};

// The cgroup v2 ids in scope, in one BPF hash map that every program of the command shares
// (common/scope_filter.bpf.h's scope_cgroups, given to each object before it loads). Ids are
// added as processes in scope are found; none is removed while gpuscope runs (a cgroup id is
// never reused while the kernel is up), so the map is bounded by what can be in scope.
class CgroupScope {
 public:
  static constexpr uint32_t kMaxCgroups = 16384;  // GS_MAX_SCOPE_CGROUPS
  ~CgroupScope();
  // The map, made on first use; throws UsageError when it cannot be.
  int fd();
  void add(uint64_t cgroup_id);
  size_t size() const;
  uint64_t full() const { return full_; }  // ids that did not fit

 private:
  mutable std::mutex mu_;
  int fd_ = -1;
  std::set<uint64_t> ids_;
  uint64_t full_ = 0;
};

struct Scope {
  std::vector<pid_t> pids;        // only these host pids; empty: every process
  std::string comm;               // only processes with this name (checked in BPF)
  std::vector<std::string> libs;  // also probe these files
  ContainerFilter where;          // only processes in these containers (checked in BPF by cgroup id)
  // Shared by every copy of the scope: one resolver and one cgroup map for a command.
  std::shared_ptr<ProcessContainers> containers = std::make_shared<ProcessContainers>();
  std::shared_ptr<CgroupScope> cgroups = std::make_shared<CgroupScope>();

  // Throws UsageError ("pid N does not exist", "--pod needs ...") for what cannot be watched.
  void validate() const;
  bool wants_pid(uint32_t pid) const;
  // The process is in scope: what user space checks of what BPF may not have filtered.
  bool wants(uint32_t pid, std::string_view comm) const;
  // A process found (at a scan, an exec): when it is in the container scope, its cgroup goes
  // into the BPF filter. Returns whether it is in that scope (true without container filters).
  bool admit(pid_t pid) const;
  // Every running process in the container scope admitted, and every container cgroup that
  // matches (processes that start there later pass the BPF filter at once).
  void admit_all() const;
  // admit() of a process already resolved.
  bool admit_info(const ContainerInfo& c) const;
};

// The BPF side of a scope: the comm and cgroup filters of programs that include
// common/scope_filter.bpf.h (pids are attached per process by the session, or checked in user
// space). Before the skeleton loads.
template <class Rodata>
void set_comm_filter(Rodata* ro, const std::string& comm) {
  if (comm.empty()) return;
  ro->filter_comm = true;
  strncpy(const_cast<char*>(ro->target_comm), comm.c_str(), sizeof(ro->target_comm) - 1);
}
template <class Skel>
void apply_scope(Skel* skel, const Scope& s) {
  set_comm_filter(skel->rodata, s.comm);
  if (!s.where.active()) return;
  skel->rodata->filter_cgroup = true;
  if (int err = bpf_map__reuse_fd(skel->maps.scope_cgroups, s.cgroups->fd()))
    throw UsageError(std::string("cannot share the container filter map: ") + strerror(-err));
  s.admit_all();
}

}  // namespace gpuscope

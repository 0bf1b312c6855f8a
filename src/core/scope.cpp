#include "core/scope.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/events.h"
#include "core/system.h"

namespace gpuscope {

static_assert(CgroupScope::kMaxCgroups == GS_MAX_SCOPE_CGROUPS);

bool ContainerFilter::matches(const ContainerInfo& c) const {
  if (!c.resolved) return false;
  if (host) return c.host();
  if (!containers.empty() &&
      std::none_of(containers.begin(), containers.end(), [&](auto& ref) { return c.matches(ref); }))
    return false;
  if (!pod.empty() && !c.in_pod(pod)) return false;
  if (!ns.empty() && !c.in_namespace(ns)) return false;
  return true;
}

std::string ContainerFilter::describe() const {
  std::string s;
  for (auto& c : containers) s += " --container " + c;
  if (!pod.empty()) s += " --pod " + pod;
  if (!ns.empty()) s += " -n " + ns;
  if (host) s += " --host";
  return s.empty() ? s : s.substr(1);
}

CgroupScope::~CgroupScope() {
  if (fd_ >= 0) close(fd_);
}

int CgroupScope::fd() {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) return fd_;
  fd_ = bpf_map_create(BPF_MAP_TYPE_HASH, "scope_cgroups", sizeof(uint64_t), sizeof(uint8_t), kMaxCgroups, nullptr);
  if (fd_ < 0) throw UsageError(std::string("cannot make the container filter's BPF map: ") + strerror(errno));
  for (uint64_t id : ids_) {
    uint8_t one = 1;
    bpf_map_update_elem(fd_, &id, &one, BPF_ANY);
  }
  return fd_;
}

void CgroupScope::add(uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  if (!cgroup_id || ids_.count(cgroup_id)) return;
  if (ids_.size() >= kMaxCgroups) {
    full_++;
    return;
  }
  ids_.insert(cgroup_id);
  uint8_t one = 1;
  if (fd_ >= 0) bpf_map_update_elem(fd_, &cgroup_id, &one, BPF_ANY);
}

size_t CgroupScope::size() const {
  std::lock_guard lock(mu_);
  return ids_.size();
}

void Scope::validate() const {
  for (pid_t pid : pids)
    if (!pid_exists(pid)) throw UsageError("pid " + std::to_string(pid) + " does not exist");
  for (auto& c : where.containers)
    if (c.empty()) throw UsageError("--container needs a container name or id");
  if (where.host && (!where.containers.empty() || !where.pod.empty() || !where.ns.empty()))
    throw UsageError("--host selects processes in no container: it cannot be combined with --container, --pod or -n");
  if (where.active() && !containers->has_cgroup_v2())
    throw UsageError(
        fmt::format("{} needs cgroup v2 (at {} or its unified/): BPF tells containers apart by their "
                    "cgroup v2 ids",
                    where.describe(), containers->paths().cgroup_root));
  if ((!where.pod.empty() || !where.ns.empty()) && !containers->kubernetes_readable())
    throw UsageError(fmt::format("{} needs the kubelet's pod directory, and {} cannot be read (--pods-dir)",
                                 where.pod.empty() ? "-n" : "--pod", containers->paths().pods_dir));
  if (!where.containers.empty()) {
    auto known = containers->containers();
    for (auto& ref : where.containers)
      if (id_prefix_ambiguous(known, ref))
        throw UsageError("--container " + ref + " is the beginning of more than one container's id");
  }
}

bool Scope::wants_pid(uint32_t pid) const {
  return pids.empty() || std::find(pids.begin(), pids.end(), static_cast<pid_t>(pid)) != pids.end();
}

bool Scope::wants(uint32_t pid, std::string_view c) const {
  if (!wants_pid(pid) || !(comm.empty() || comm == c)) return false;
  return !where.active() || where.matches(containers->of(static_cast<pid_t>(pid)));
}

bool Scope::admit(pid_t pid) const {
  if (!where.active()) return true;
  return admit_info(containers->refresh(pid));
}

bool Scope::admit_info(const ContainerInfo& c) const {
  if (!where.matches(c)) return false;
  cgroups->add(c.cgroup_id);
  return true;
}

void Scope::admit_all() const {
  if (!where.active()) return;
  if (!where.host)
    for (auto& c : containers->containers())
      if (where.matches(c)) cgroups->add(c.cgroup_id);
  // Known processes keep their entry: an exec, the one way they change cgroup here, is admitted
  // anew by the session's notice.
  for (pid_t pid : pids.empty() ? list_pids() : pids) admit_info(containers->of(pid));
}

}  // namespace gpuscope

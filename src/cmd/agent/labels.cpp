#include "cmd/agent/labels.h"

namespace gpuscope {

ContainerPaths container_paths(const std::string& pods_dir) {
  ContainerPaths p;
  p.pods_dir = pods_dir;
  p.containers_log_dir = pods_dir.substr(0, pods_dir.find_last_of('/')) + "/containers";
  return p;
}

ProcLabels labels_of(const ContainerInfo& c) {
  if (!c.in_container) return {};
  return {c.display(), c.pod, c.ns};
}

ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir) {
  ContainerResolver r(container_paths(pods_dir));
  return labels_of(r.resolve_cgroup_text(cgroup));
}

const ProcLabels& LabelCache::get(pid_t pid) {
  auto it = cache_.find(pid);
  if (it != cache_.end()) return it->second;
  return cache_[pid] = labels_of(resolver_.resolve(pid));
}

}  // namespace gpuscope

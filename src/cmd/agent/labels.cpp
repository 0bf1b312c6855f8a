#include "cmd/agent/labels.h"

namespace gpuscope {

ProcLabels labels_of(const ContainerInfo& c) { return {c.display(), c.pod, c.ns}; }

ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir) {
  ContainerResolver r(ContainerPaths::with_pods_dir(pods_dir));
  return labels_of(r.resolve_cgroup_text(cgroup));
}

}  // namespace gpuscope

#pragma once
// Container, pod and namespace labels of a process, from the core's container resolver
// (core/containers.h): the kubelet's names where readable, else the runtime's, else the short id.
#include <sys/types.h>

#include <map>
#include <string>

#include "core/containers.h"

namespace gpuscope {

struct ProcLabels {
  std::string container;  // the container's name, else its id's first 12 digits; "" on the host
  std::string pod;
  std::string ns;  // Kubernetes namespace
};

// The resolver's paths for a kubelet pod log directory (its containers/ log links beside it).
ContainerPaths container_paths(const std::string& pods_dir);
ProcLabels labels_of(const ContainerInfo& c);
// From the text of /proc/PID/cgroup; pods_dir is the kubelet's pod log directory.
ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir);

// Labels per pid, read once per process life (a process does not change its pod).
class LabelCache {
 public:
  explicit LabelCache(const std::string& pods_dir) : resolver_(container_paths(pods_dir)) {}
  const ProcLabels& get(pid_t pid);
  void forget(pid_t pid) { cache_.erase(pid); }
  // Containers whose cgroup went are resolved anew.
  void sweep() { resolver_.forget_gone(); }

 private:
  ContainerResolver resolver_;
  std::map<pid_t, ProcLabels> cache_;
};

}  // namespace gpuscope

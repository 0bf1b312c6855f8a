#pragma once
// Container, pod and namespace of a process, from its cgroup path (pod UID and container id)
// and the kubelet's log directory names (/var/log/pods/<namespace>_<pod>_<uid>,
// /var/log/containers/<pod>_<namespace>_<container>-<id>.log). No credentials, no API server.
#include <sys/types.h>

#include <map>
#include <string>

namespace gpuscope {

struct ProcLabels {
  std::string container;  // the kubelet's container name, else the container id's first 12 digits
  std::string pod;
  std::string ns;  // Kubernetes namespace
};

// From the text of /proc/PID/cgroup; pods_dir is the kubelet's pod log directory.
ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir);

// Labels per pid, read once per process life (a process does not change its pod).
class LabelCache {
 public:
  explicit LabelCache(std::string pods_dir) : pods_dir_(std::move(pods_dir)) {}
  const ProcLabels& get(pid_t pid);
  void forget(pid_t pid) { cache_.erase(pid); }

 private:
  std::string pods_dir_;
  std::map<pid_t, ProcLabels> cache_;
};

}  // namespace gpuscope

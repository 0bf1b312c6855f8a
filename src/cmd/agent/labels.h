#pragma once
// Container, pod and namespace labels of a process, from the core's container resolver
// (core/containers.h): the kubelet's names where readable, else the runtime's, else the short id.
#include <string>

#include "core/containers.h"

namespace gpuscope {

struct ProcLabels {
  // As in JSON lines: the container's name, else its id's first 12 digits; "host" on the host;
  // "" where the process's cgroup could not be read.
  std::string container;
  std::string pod;
  std::string ns;  // Kubernetes namespace
};

ProcLabels labels_of(const ContainerInfo& c);
// From the text of /proc/PID/cgroup; pods_dir is the kubelet's pod log directory.
ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir);

}  // namespace gpuscope

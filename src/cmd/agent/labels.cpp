#include "cmd/agent/labels.h"

#include <dirent.h>

#include <algorithm>
#include <regex>
#include <vector>

#include "core/system.h"

namespace gpuscope {

namespace {

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> v;
  DIR* d = opendir(dir.c_str());
  if (!d) return v;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') v.push_back(e->d_name);
  closedir(d);
  return v;
}

}  // namespace

ProcLabels labels_from_cgroup(const std::string& cgroup, const std::string& pods_dir) {
  ProcLabels l;
  // The systemd driver writes the pod UID with '_' for '-' (kubepods-burstable-pod<uid>.slice).
  static const std::regex pod_re("pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})");
  static const std::regex ctr_re("[/-]([0-9a-f]{64})(\\.scope)?(/|$|\n)");
  std::string uid, id;
  std::smatch m;
  if (std::regex_search(cgroup, m, pod_re)) {
    uid = m[1];
    std::replace(uid.begin(), uid.end(), '_', '-');
  }
  for (auto it = std::sregex_iterator(cgroup.begin(), cgroup.end(), ctr_re); it != std::sregex_iterator(); ++it)
    id = (*it)[1];
  if (!id.empty()) l.container = id.substr(0, 12);
  if (uid.empty()) return l;
  for (auto& name : dir_names(pods_dir)) {
    std::string suffix = "_" + uid;
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::string rest = name.substr(0, name.size() - suffix.size());
    size_t us = rest.find('_');  // neither namespaces nor pod names may hold '_'
    if (us == std::string::npos) continue;
    l.ns = rest.substr(0, us);
    l.pod = rest.substr(us + 1);
    // The container's name: /var/log/containers/<pod>_<ns>_<container>-<id>.log beside the pods dir.
    std::string parent = pods_dir.substr(0, pods_dir.find_last_of('/'));
    std::string prefix = l.pod + "_" + l.ns + "_", tail = "-" + id + ".log";
    if (!id.empty())
      for (auto& f : dir_names(parent + "/containers"))
        if (f.size() > prefix.size() + tail.size() && f.compare(0, prefix.size(), prefix) == 0 &&
            f.compare(f.size() - tail.size(), tail.size(), tail) == 0)
          l.container = f.substr(prefix.size(), f.size() - prefix.size() - tail.size());
    // A pod of one container names it by its log directory.
    auto ctrs = dir_names(pods_dir + "/" + name);
    if ((id.empty() || l.container == id.substr(0, 12)) && ctrs.size() == 1) l.container = ctrs[0];
    break;
  }
  return l;
}

const ProcLabels& LabelCache::get(pid_t pid) {
  auto it = cache_.find(pid);
  if (it != cache_.end()) return it->second;
  std::string cg;
  try {
    cg = read_file("/proc/" + std::to_string(pid) + "/cgroup");
  } catch (...) {
  }
  return cache_[pid] = labels_from_cgroup(cg, pods_dir_);
}

}  // namespace gpuscope

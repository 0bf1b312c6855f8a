#include "cmd/agent/processes.h"

namespace gpuscope {

PromLabels ProcEntry::prom_labels() const {
  return {{"pid", std::to_string(pid)},
          {"comm", comm},
          {"container", labels.container},
          {"pod", labels.pod},
          {"namespace", labels.ns}};
}

PromLabels comm_labels(const CommKey& k) {
  auto& [c, ctr, pod, ns] = k;
  return {{"comm", c}, {"container", ctr}, {"pod", pod}, {"namespace", ns}};
}

ProcEntry& ProcessTable::live(uint32_t pid, const std::string& comm, uint64_t cgroup_id) {
  auto it = live_.find(pid);
  if (it != live_.end()) {
    // A collector may have read /proc after the process had gone; a later record names it.
    if (it->second.comm.empty()) it->second.comm = comm;
    return it->second;
  }
  ProcEntry& p = live_[pid];
  p.id = next_id_++;
  p.pid = pid;
  p.comm = comm;
  const ContainerInfo& c = containers_->of(static_cast<pid_t>(pid));
  p.labels = labels_of(!c.resolved && cgroup_id ? containers_->of_cgroup(static_cast<pid_t>(pid), cgroup_id) : c);
  return p;
}

ProcEntry* ProcessTable::latest_gone(uint32_t pid) {
  for (auto it = gone_.rbegin(); it != gone_.rend(); ++it)
    if (it->pid == pid) return &*it;
  return nullptr;
}

ProcEntry& ProcessTable::any(uint32_t pid, const std::string& comm) {
  if (auto it = live_.find(pid); it != live_.end()) return it->second;
  if (ProcEntry* g = latest_gone(pid)) return *g;
  return live(pid, comm);
}

void ProcessTable::retire(uint32_t pid) {
  auto it = live_.find(pid);
  if (it == live_.end()) return;
  it->second.exited = true;
  it->second.exited_at = std::chrono::steady_clock::now();
  gone_.push_back(std::move(it->second));
  live_.erase(it);
  containers_->forget(static_cast<pid_t>(pid));
}

ProcEntry* ProcessTable::ended(uint32_t pid, const std::string& comm, bool add_unknown, uint64_t cgroup_id) {
  ProcEntry* p = nullptr;
  if (live_.count(pid)) {
    retire(pid);
    p = &gone_.back();
  } else if (!(p = latest_gone(pid))) {
    if (!add_unknown) return nullptr;
    live(pid, comm, cgroup_id);  // a life shorter than one refresh
    retire(pid);
    p = &gone_.back();
  }
  if (p->comm.empty()) p->comm = comm;
  return p;
}

void ProcessTable::begin() {
  containers_->sweep();
  for (auto& [_, p] : live_) p.seen = false;
}

void ProcessTable::end(uint64_t seq, uint64_t scraped, const std::function<void(const ProcEntry&)>& fold) {
  // Gone from every collector without an end record (lost, or no exit hook).
  std::vector<uint32_t> vanished;
  for (auto& [pid, p] : live_)
    if (!p.seen) vanished.push_back(pid);
  for (uint32_t pid : vanished) retire(pid);
  auto now = std::chrono::steady_clock::now();
  for (auto it = gone_.begin(); it != gone_.end();) {
    bool expired = std::chrono::duration<double>(now - it->exited_at).count() > retain_s_;
    if (it->published_seq && (scraped >= it->published_seq || expired)) {
      fold(*it);
      it = gone_.erase(it);
      continue;
    }
    if (!it->published_seq) it->published_seq = seq;
    ++it;
  }
}

}  // namespace gpuscope

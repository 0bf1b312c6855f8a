#pragma once
// The processes the agent exports series for, shared by its collectors: each collector keeps its
// own per-process state keyed by ProcEntry::id (a pid may be reused while the old life's series
// are still exported) and marks the processes it saw at each refresh. A process no collector saw
// and whose end no collector reported has ended too. An ended process keeps its series until a
// scrape has seen their final values (or --retain-exited passes), then folds: each collector
// forgets it, keeping per-comm totals.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "cmd/agent/labels.h"
#include "cmd/agent/prom.h"
#include "core/containers.h"

namespace gpuscope {

struct ProcEntry {
  uint64_t id = 0;  // this life of the pid
  uint32_t pid = 0;
  std::string comm;
  ProcLabels labels;
  bool exited = false;
  std::chrono::steady_clock::time_point exited_at{};
  uint64_t published_seq = 0;  // once ended: the first publication that held its final values
  bool seen = false;           // in this refresh's snapshots

  PromLabels prom_labels() const;
};

// Totals of one comm in one container: what ended processes leave behind.
using CommKey = std::tuple<std::string, std::string, std::string, std::string>;  // comm, container, pod, ns
inline CommKey comm_key(const std::string& comm, const ProcLabels& l) { return {comm, l.container, l.pod, l.ns}; }
inline CommKey comm_key(const ProcEntry& p) { return comm_key(p.comm, p.labels); }
PromLabels comm_labels(const CommKey& k);

// A collector's state per process life, and what the lives folded leave to their comm's totals.
template <class State>
class PerProcess {
 public:
  State& operator[](uint64_t id) { return lives_[id]; }
  const State* find(uint64_t id) const {
    auto it = lives_.find(id);
    return it == lives_.end() ? nullptr : &it->second;
  }
  void erase(uint64_t id) { lives_.erase(id); }
  // A life's series went: total(state) joins its comm's (0 where it had no state: every comm
  // seen is counted).
  template <class Total>
  void fold(const ProcEntry& e, Total total) {
    uint64_t& n = folded_[comm_key(e)];
    auto it = lives_.find(e.id);
    if (it == lives_.end()) return;
    n += total(it->second);
    lives_.erase(it);
  }
  // Per comm: the lives folded plus those of `table`.
  template <class Table, class Total>
  std::map<CommKey, uint64_t> comm_totals(const Table& table, Total total) const {
    std::map<CommKey, uint64_t> comm = folded_;
    table.each([&](const ProcEntry& e) {
      uint64_t& n = comm[comm_key(e)];
      if (auto* s = find(e.id)) n += total(*s);
    });
    return comm;
  }
  auto begin() { return lives_.begin(); }
  auto end() { return lives_.end(); }

 private:
  std::map<uint64_t, State> lives_;
  std::map<CommKey, uint64_t> folded_;
};

class ProcessTable {
 public:
  ProcessTable(std::shared_ptr<ProcessContainers> containers, double retain_exited_s)
      : containers_(std::move(containers)), retain_s_(retain_exited_s) {}

  // The running process, added when new. `cgroup_id` (a BPF record's cgroup v2 id, 0 if none)
  // names its container when the process has gone before /proc was read.
  ProcEntry& live(uint32_t pid, const std::string& comm, uint64_t cgroup_id = 0);
  // The running process, else its latest ended life, else a new running one.
  ProcEntry& any(uint32_t pid, const std::string& comm);
  // Its life has ended: the ended entry (a new one when add_unknown and the pid was not known).
  ProcEntry* ended(uint32_t pid, const std::string& comm, bool add_unknown, uint64_t cgroup_id = 0);
  bool running(uint32_t pid) const { return live_.count(pid) != 0; }

  // A refresh: begin() clears every `seen`; the collectors take; end() ends what none saw and
  // folds, through `fold`, what was scraped after its end.
  void begin();
  void end(uint64_t seq, uint64_t scraped, const std::function<void(const ProcEntry&)>& fold);

  template <class F>
  void each(F fn) const {
    for (auto& [_, p] : live_) fn(p);
    for (auto& p : gone_) fn(p);
  }
  size_t running_count() const { return live_.size(); }
  size_t exited_count() const { return gone_.size(); }

 private:
  ProcEntry* latest_gone(uint32_t pid);
  void retire(uint32_t pid);

  std::shared_ptr<ProcessContainers> containers_;
  double retain_s_;
  uint64_t next_id_ = 1;
  std::map<uint32_t, ProcEntry> live_;
  std::deque<ProcEntry> gone_;
};

}  // namespace gpuscope

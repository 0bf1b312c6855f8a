#pragma once
// The agent's collector interface, in the spirit of node_exporter's collectors: a collector has
// a name and flags, says what it needs from the host, starts on the shared uprobe session, takes
// a snapshot at each refresh, and writes its own series, JSON fields, endpoints, health and loss
// counters. The agent is a registry of them and a loop (agent.h); adding one is a file in its
// capability's folder that registers itself (GPUSCOPE_AGENT_COLLECTOR, registry.h). Collectors
// reach one another only through typed services (CollectorServices), never by name.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <set>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include "cmd/agent/anomaly.h"
#include "cmd/agent/processes.h"
#include "cmd/agent/prom.h"
#include "core/cli.h"

namespace CLI {
class App;
}

namespace gpuscope {

class EventLoop;
class JsonLine;
class UprobeSession;

// The agent's own flags, which every collector may read.
struct AgentOptions {
  CommonFlags common;
  Scope scope;
  std::string listen = "127.0.0.1:9400";
  std::string collectors;  // empty: every registered collector
  std::string pin_dir = "/sys/fs/bpf";
  std::string nvml = "libnvidia-ml.so.1";
  unsigned max_kernels = 50;  // series per process for kernels and GPU time
  double interval_s = 1;
  double retain_s = 60;
  AnomalyConfig anomaly;
  double max_cpu_percent = 2;  // 0: governor off
};

// What collectors offer one another, by type rather than by name: before any collector loads,
// each says in plan() what it will take (so that the one providing it loads what that needs); a
// collector provides objects as it loads, and the others take them from then on. What a
// collector provided is withdrawn when it turns off.
class CollectorServices {
 public:
  template <class T>
  void need() {
    needs_.insert(std::type_index(typeid(T)));
  }
  template <class T>
  bool needed() const {
    return needs_.count(std::type_index(typeid(T))) != 0;
  }
  template <class T>
  void provide(T* p, const void* owner) {
    given_[std::type_index(typeid(T))] = {p, owner};
  }
  template <class T>
  T* get() const {
    auto it = given_.find(std::type_index(typeid(T)));
    return it == given_.end() ? nullptr : static_cast<T*>(it->second.first);
  }
  void withdraw(const void* owner) {
    std::erase_if(given_, [&](auto& g) { return g.second.second == owner; });
  }

 private:
  std::set<std::type_index> needs_;
  std::map<std::type_index, std::pair<void*, const void*>> given_;
};

// What the agent gives a collector.
struct AgentHost {
  const AgentOptions& options;
  UprobeSession* session;  // null where no collector attaches uprobes (bench/)
  ProcessTable& procs;
  // One line on stderr, "gpuscope: agent: <collector>: <line>".
  std::function<void(const std::string& collector, const std::string& line)> log;
  CollectorServices& services;
};

struct CollectorHealth {
  bool up = true;
  std::string why;  // when down
};

struct Endpoint {
  std::string body;
  std::string content_type = "application/json";
};

// Events or calls not recorded, by reason.
using LostCounts = std::map<std::string, uint64_t>;

// The refresh's place in the publication sequence: what the first scrape after it will have seen.
struct RefreshSeq {
  uint64_t seq = 0;      // this refresh's publication
  uint64_t scraped = 0;  // the latest publication /metrics has served
};

class AgentCollector {
 public:
  virtual ~AgentCollector() = default;
  virtual std::string_view name() const = 0;
  // The subcommand whose BPF programs, and so whose host needs, it shares (gpuscope doctor).
  virtual std::string_view subcommand() const { return name(); }
  // Its flags, on the agent's subcommand, before parsing.
  virtual void add_flags(CLI::App*) {}
  // Bad input (a flag's value, a library named): throws UsageError before anything loads.
  virtual void check(const AgentOptions&) const {}
  // Before any collector loads: what it will take from the others (CollectorServices::need).
  virtual void plan(CollectorServices&) const {}
  // Probes on the shared session: the session starts after every collector's load, and a session
  // that cannot start turns these collectors off with its reason.
  virtual bool uses_session() const { return false; }
  // Loads its BPF objects and adds its probes; throws with the reason it is off.
  virtual void load(AgentHost& host) = 0;
  // After the session started (or for one without uprobes, after load): its events and timers.
  virtual void start(AgentHost&, EventLoop&) {}
  // Loop thread, once a refresh: its snapshot, and the processes it saw in the table.
  virtual void take() = 0;
  // After the table folded what exited and was scraped.
  virtual void settle(const RefreshSeq&) {}
  // A process whose series were scraped after its end: forget it, keeping what totals need.
  virtual void fold(const ProcEntry&) {}
  virtual void metrics(PromSet& m) = 0;
  // Its fields in /api/processes' object for one process.
  virtual void process_json(const ProcEntry&, JsonLine&) const {}
  // Its endpoints: the paths (asked while it is off too, to say so), and their bodies now.
  virtual std::vector<std::string> paths() const { return {}; }
  virtual void endpoints(std::map<std::string, Endpoint>&) {}
  virtual CollectorHealth health() const { return {}; }
  // How the agent's start line names it.
  virtual std::string describe() const { return std::string(name()); }
  virtual void lost(LostCounts&) const {}
  // What the anomaly rules read.
  virtual void observe(AnomalyInput&) const {}
  // The governor: a sampling rate it can cut first (empty: none), and deferring per-event work
  // (exits, new processes) to the refresh.
  virtual std::string sampling_step() const { return ""; }
  virtual void reduce_sampling(bool) {}
  virtual void defer_events(bool) {}
  // Ending, in three steps: probes off (beside the session's detach: each waits for an RCU grace
  // period), events left read, then after the final refresh whatever it still holds.
  virtual void detach() {}
  virtual void drain() {}
  virtual void finish() {}
};

}  // namespace gpuscope

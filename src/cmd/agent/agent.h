#pragma once
// The agent: a registry of collectors (collector.h) and what they publish. The loop thread loads,
// starts and refreshes them, and each refresh renders /metrics and the JSON API once; the HTTP
// thread only reads what was published.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cmd/agent/collector.h"
#include "cmd/agent/governor.h"
#include "cmd/agent/http.h"
#include "cmd/agent/processes.h"

namespace gpuscope {

class Agent {
 public:
  // `wanted`: the collectors asked for, in registry order.
  Agent(const AgentOptions& o, std::vector<std::unique_ptr<AgentCollector>> wanted, UprobeSession* session);
  ~Agent();

  // Bad input in the collectors' flags: throws UsageError before anything loads.
  void check() const;
  // Loads every collector (a collector that cannot is off, with its reason; the others carry on),
  // starts the session on the probes of those that use it, then starts them all on the loop.
  void start(EventLoop* loop);
  // Loop thread: the collectors' snapshots, folded and published.
  void refresh();
  // Ends the collectors: probes off (beside the session's detach), events read, a last refresh.
  void stop();
  // Any thread.
  HttpReply serve(const std::string& path);

  // The running collectors, for the governor.
  std::vector<AgentCollector*> running() const;
  void set_governor(const Governor* g) { governor_ = g; }
  bool session_started() const { return session_started_; }
  // Anomalies found by a refresh, besides their log line (the --json line).
  void on_anomaly(std::function<void(const AnomalyEvent&)> fn) { on_anomaly_ = std::move(fn); }
  // "kernels,memleak,...": what runs, as the start line says it.
  std::string running_names() const;
  size_t series() const;  // in the last published /metrics
  double render_s() const { return render_s_; }

 private:
  struct Slot {
    std::unique_ptr<AgentCollector> c;
    bool running = false;
    std::string why;  // when not running
  };
  struct Published {
    uint64_t seq = 0;
    size_t series = 0;
    std::string metrics, processes, health, anomalies;
    std::map<std::string, Endpoint> endpoints;
  };

  void load(Slot& s);
  void off(Slot& s, const std::string& why);
  void start_session();
  void observe_anomalies();
  std::map<std::pair<std::string, std::string>, uint64_t> lost() const;
  std::string render_metrics(size_t* series);
  std::string render_processes() const;
  std::string render_health(size_t series);

  const AgentOptions& o_;
  UprobeSession* session_;
  ProcessTable procs_;
  CollectorServices services_;
  AgentHost host_;
  std::vector<Slot> slots_;
  bool session_started_ = false;
  AnomalyRules anomalies_;
  std::function<void(const AnomalyEvent&)> on_anomaly_;
  const Governor* governor_ = nullptr;
  std::chrono::steady_clock::time_point last_refresh_ = std::chrono::steady_clock::now();
  uint64_t seq_ = 0;
  double render_s_ = 0;
  std::chrono::steady_clock::time_point last_trim_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  std::shared_ptr<const Published> pub_;
  uint64_t scraped_seq_ = 0;  // the latest publication /metrics has served
  uint64_t scrapes_ = 0;
};

// The agent's own footprint (Prometheus's process_* metrics).
void add_process_metrics(PromSet& m);
void add_memory_metrics(PromSet& m);

}  // namespace gpuscope

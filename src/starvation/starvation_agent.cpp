// Starvation: the CPU time of each thread while its process's GPUs sat idle, and the stacks it
// ran (/api/starvation/folded). Reads the bridge's pins: up only while a bridge publishes.
#include <CLI/CLI.hpp>

#include "cmd/agent/registry.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/flamegraph.h"
#include "starvation/starvation_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
constexpr unsigned kSampleHz = 49;  // stack sampling rate, a quarter of it under the governor

class StarvationAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "starvation"; }

  void add_flags(CLI::App* cmd) override {
    add_number(cmd, "--starvation-min-idle-ms", min_idle_ms_,
               "GPU idle this long before a thread's CPU time counts as starving (default 1000)", "milliseconds", 1,
               86400000);
  }

  void load(AgentHost& host) override {
    host_ = &host;
    StarvationCollector::Config c;
    c.scope = host.options.scope;
    c.min_idle_ms = min_idle_ms_;
    c.pin_dir = host.options.pin_dir;
    c.fold = true;
    c.max_stacks = kMaxStacks;
    c.max_threads = kMaxThreads;
    c.sample_hz = kSampleHz;
    c.log = [this](const std::string& line) {
      note_ = line;
      host_->log("starvation", line);
    };
    collector_ = std::make_unique<StarvationCollector>(std::move(c));
  }

  void start(AgentHost&, EventLoop& loop) override {
    loop.every(0.05, [this] {
      if (!collector_) return;
      try {
        collector_->tick();
      } catch (const std::exception& e) {
        fprintf(stderr, "gpuscope: agent: collector starvation is off: %s\n", e.what());
        note_ = e.what();
        collector_.reset();
      }
    });
  }

  void take() override { report_ = collector_ ? collector_->collect() : StarvationReport{}; }

  void settle(const RefreshSeq& r) override {
    if (!collector_) return;
    for (auto& row : report_.rows) {
      auto& t = threads_[{row.pid, row.tid}];
      if (!t.pid) {
        t.pid = row.pid;
        t.tid = row.tid;
        t.labels = labels_of(host_->options.scope.containers->of(static_cast<pid_t>(row.pid)));
      }
      t.comm = row.comm;
      t.thread = row.thread;
      t.cpu_ns += row.cpu_time_ns;
    }
    for (auto& [pid, tid] : report_.gone)
      if (auto it = threads_.find({pid, tid}); it != threads_.end()) it->second.gone = true;
    fold_gone_threads(r);
    for (auto& [k, w] : report_.folded) {
      auto it = stacks_.find(k);
      if (it != stacks_.end())
        it->second += w;
      else if (stacks_.size() < kMaxFoldedStacks)
        stacks_.emplace(k, w);
      else
        folded_lost_++;
    }
  }

  void metrics(PromSet& m) override {
    if (!collector_) return;
    m.family("gpuscope_starvation_cpu_seconds_total", T::counter,
             "On-CPU time of a thread while its process's GPUs sat idle");
    m.family("gpuscope_comm_starvation_cpu_seconds_total", T::counter,
             "On-CPU time while the GPUs sat idle, per process name and container, exited threads included");
    std::map<CommKey, uint64_t> comm = exited_;
    for (auto& [_, t] : threads_) {
      PromLabels l{{"pid", std::to_string(t.pid)}, {"tid", std::to_string(t.tid)},    {"comm", t.comm},
                   {"thread", t.thread},           {"container", t.labels.container}, {"pod", t.labels.pod},
                   {"namespace", t.labels.ns}};
      m.add("gpuscope_starvation_cpu_seconds_total", l, static_cast<double>(t.cpu_ns) / 1e9);
      comm[comm_key(t.comm, t.labels)] += t.cpu_ns;
    }
    for (auto& [k, ns] : comm)
      m.add("gpuscope_comm_starvation_cpu_seconds_total", comm_labels(k), static_cast<double>(ns) / 1e9);
    auto st = collector_->stats();
    m.family("gpuscope_starvation_switch_hook", T::gauge,
             "1 while the sched_switch hook is attached: only while a GPU of a process the bridge lists nears idle");
    m.add("gpuscope_starvation_switch_hook", {}, st.switch_hooked ? 1 : 0);
    m.family("gpuscope_starvation_switch_hook_attaches_total", T::counter,
             "Times the sched_switch hook was attached, the one at start included");
    m.add("gpuscope_starvation_switch_hook_attaches_total", {}, static_cast<double>(st.switch_attaches));
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    uint64_t ns = 0;
    bool any = false;
    for (auto it = threads_.lower_bound({e.pid, 0}); it != threads_.end() && it->first.first == e.pid; ++it)
      ns += it->second.cpu_ns, any = true;
    if (any) j.num("starving_cpu_ns", ns);
  }

  std::vector<std::string> paths() const override { return {"/api/starvation/folded"}; }

  void endpoints(std::map<std::string, Endpoint>& out) override {
    out["/api/starvation/folded"] = {folded_text(stacks_), "text/plain; charset=utf-8"};
  }

  // Loaded, it is up only while a bridge publishes fresh data: its verdicts need it.
  CollectorHealth health() const override {
    if (collector_ && collector_->bridge_state() == "fresh") return {};
    return {false, note_};
  }

  void lost(LostCounts& out) const override {
    if (collector_) {
      auto s = collector_->stats();
      out["thread_map_full"] = s.lost_threads;
      out["sample_map_full"] = s.lost_samples;
      out["stack_map_full"] = s.lost_stacks;
    }
    out["folded_stacks_full"] = folded_lost_;
  }

  std::string sampling_step() const override {
    return fmt::format("stack sampling at {} Hz (of {})", kSampleHz / 4, kSampleHz);
  }
  void reduce_sampling(bool on) override {
    if (collector_) collector_->set_sample_hz(on ? kSampleHz / 4 : kSampleHz);
  }
  void finish() override {
    if (collector_) collector_->stop();
  }

 private:
  static constexpr uint32_t kMaxStacks = 1024, kMaxThreads = 4096;
  static constexpr size_t kMaxFoldedStacks = 10000;  // further stacks are counted lost
  // A thread's CPU time while its process's GPUs sat idle, since the agent started.
  struct Thread {
    uint32_t pid = 0, tid = 0;
    std::string comm, thread;
    ProcLabels labels;
    uint64_t cpu_ns = 0;
    uint64_t published_seq = 0;  // once gone: the first publication without further change
    bool gone = false;
  };

  // A thread gone stays until a scrape has seen its final value, then folds into its comm's.
  void fold_gone_threads(const RefreshSeq& r) {
    for (auto it = threads_.begin(); it != threads_.end();) {
      Thread& t = it->second;
      if (t.gone && t.published_seq && r.scraped >= t.published_seq) {
        exited_[comm_key(t.comm, t.labels)] += t.cpu_ns;
        uint32_t pid = t.pid;
        it = threads_.erase(it);
        auto next = threads_.lower_bound({pid, 0});
        if ((next == threads_.end() || next->first.first != pid) && !host_->procs.running(pid))
          host_->options.scope.containers->forget(static_cast<pid_t>(pid));
        continue;
      }
      if (t.gone && !t.published_seq) t.published_seq = r.seq;
      ++it;
    }
  }

  AgentHost* host_ = nullptr;
  uint64_t min_idle_ms_ = 1000;
  std::unique_ptr<StarvationCollector> collector_;
  std::string note_;  // its latest note on the bridge, or why it stopped
  StarvationReport report_;
  std::map<std::pair<uint32_t, uint32_t>, Thread> threads_;  // by (pid, tid)
  std::map<CommKey, uint64_t> exited_;                       // CPU ns of threads gone
  Folded stacks_;
  uint64_t folded_lost_ = 0;
};

}  // namespace

std::unique_ptr<AgentCollector> make_starvation_collector() { return std::make_unique<StarvationAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_starvation_collector, 70);

}  // namespace gpuscope

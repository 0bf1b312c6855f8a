// GPU memory per process: outstanding bytes and allocations, calls by result, leaks at exit
// (/api/leaks).
#include <algorithm>
#include <deque>

#include "cmd/agent/registry.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/uprobe_session.h"
#include "memleak/memleak_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
constexpr size_t kLeakReports = 100;  // ended processes kept for /api/leaks
constexpr size_t kLeaksPerReport = 20;

std::string category_name(unsigned c) {
  switch (c) {
    case GS_MEM_DEVICE: return "device";
    case GS_MEM_MANAGED: return "managed";
    case GS_MEM_PINNED: return "pinned_host";
    default: return "vmm";
  }
}

uint64_t allocations(const gs_ml_proc& p) { return p.allocs_ok; }

class MemleakAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "memleak"; }
  bool uses_session() const override { return true; }

  void load(AgentHost& host) override {
    host_ = &host;
    collector_ = std::make_unique<MemleakCollector>(
        *host.session, MemleakCollector::Config{host.options.scope, false, true, kMaxAllocs, kMaxProcs});
    collector_->on_end([this](const MemleakProcess& p, const std::vector<MemleakLeak>& l) { ended(p, l); });
  }

  void start(AgentHost& host, EventLoop& loop) override {
    collector_->start(*host.session);
    collector_->watch(loop);
    loop.after_wakeup([this] {
      if (!deferred_) collector_->tick();
    });
  }

  void take() override {
    collector_->tick();  // exits deferred by the governor, before the sweep looks for processes gone
    collector_->sweep();
    snap_ = collector_->snapshot();
    for (auto& mp : snap_.processes) {
      ProcEntry& p = host_->procs.live(mp.pid, mp.comm);
      procs_[p.id] = mp.counters;
      p.seen = true;
    }
  }

  void fold(const ProcEntry& e) override { procs_.fold(e, allocations); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_memory_outstanding_bytes", T::gauge,
             "GPU memory allocated and not yet freed, per process and category (device: device, managed and VMM; "
             "pinned_host: page-locked host memory)");
    m.family("gpuscope_memory_outstanding_allocations", T::gauge, "Allocations not yet freed, per process");
    m.family("gpuscope_memory_allocations_total", T::counter, "Allocating calls per process and result");
    m.family("gpuscope_memory_frees_total", T::counter, "Freeing calls per process and result");
    m.family("gpuscope_comm_memory_allocations_total", T::counter,
             "Successful allocations per process name and container, exited processes included");
    m.family("gpuscope_memory_leaked_bytes_total", T::counter,
             "Bytes still allocated when a process exited or exec'd, per process name and container");
    m.family("gpuscope_memory_leaked_allocations_total", T::counter,
             "Allocations still live when a process exited or exec'd, per process name and container");
    host_->procs.each([&](const ProcEntry& e) {
      if (auto* c = procs_.find(e.id)) process_series(m, e.prom_labels(), *c);
    });
    for (auto& [k, n] : procs_.comm_totals(host_->procs, allocations))
      m.add("gpuscope_comm_memory_allocations_total", comm_labels(k), static_cast<double>(n));
    for (auto& [k, t] : leaked_) {
      PromLabels l{{"comm", k.first}, {"container", k.second}};
      m.add("gpuscope_memory_leaked_bytes_total", l, static_cast<double>(t.bytes));
      m.add("gpuscope_memory_leaked_allocations_total", l, static_cast<double>(t.allocations));
    }
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    const gs_ml_proc* p = procs_.find(e.id);
    if (!p) return;
    const gs_ml_proc& c = *p;
    j.num("outstanding_bytes", c.outstanding_bytes).num("outstanding_allocs", c.outstanding_allocs);
    j.num("pinned_bytes", c.pinned_bytes).num("allocs_ok", c.allocs_ok);
    j.num("allocs_failed", c.allocs_failed).num("frees_ok", c.frees_ok).num("bad_frees", c.bad_frees);
  }

  std::vector<std::string> paths() const override { return {"/api/leaks"}; }

  void endpoints(std::map<std::string, Endpoint>& out) override {
    fmt::memory_buffer b;
    JsonLine j(b);
    j.begin_array("leaks");
    for (auto& r : reports_) {
      j.begin_object().num("pid", r.pid).str("comm", r.comm).str("container", r.container).str("state", r.state);
      j.num("leaked_bytes", r.bytes).begin_array("allocations");
      for (auto& l : r.leaks) {
        j.begin_object().hex("addr", l.addr).num("size_bytes", l.size).str("api", api_symbol(l.api));
        j.str("category", category_name(l.category)).num("age_ns", l.age_ns).end_object();
      }
      j.end_array().end_object();
    }
    j.end_array();
    j.begin_array("totals");
    for (auto& [k, t] : leaked_) {
      j.begin_object().str("comm", k.first).str("container", k.second).num("leaked_bytes", t.bytes);
      j.num("leaked_allocations", t.allocations).end_object();
    }
    j.end_array().end();
    out["/api/leaks"] = {std::string(b.data(), b.size())};
  }

  void lost(LostCounts& out) const override {
    auto s = collector_->stats();
    out["allocation_map_full"] = s.allocs_map_full;
    out["process_map_full"] = s.procs_map_full;
    out["ring_buffer_full"] = s.events_lost;
    out["no_thread_state"] = s.no_thread_state;
    out["error_code_map_full"] = s.error_codes_lost;
  }

  void observe(AnomalyInput& in) const override {
    for (auto& p : snap_.processes) in.procs.push_back({p.pid, p.comm, p.counters.outstanding_bytes});
  }

  void defer_events(bool on) override { deferred_ = on; }
  void drain() override { collector_->drain(); }

 private:
  // Sizes for an always-on process beside others (the subcommand keeps its larger ones).
  static constexpr uint32_t kMaxAllocs = 32768, kMaxProcs = 4096;
  struct LeakTotals {
    uint64_t bytes = 0, allocations = 0;
  };
  struct LeakReport {
    uint32_t pid;
    std::string comm, container, state;
    uint64_t bytes = 0;
    std::vector<MemleakLeak> leaks;  // the largest few
  };

  static void process_series(PromSet& m, const PromLabels& l, const gs_ml_proc& c) {
    auto with = [&](const char* label, const char* v) {
      auto x = l;
      x.push_back({label, v});
      return x;
    };
    m.add("gpuscope_memory_outstanding_bytes", with("category", "device"), static_cast<double>(c.outstanding_bytes));
    m.add("gpuscope_memory_outstanding_bytes", with("category", "pinned_host"), static_cast<double>(c.pinned_bytes));
    m.add("gpuscope_memory_outstanding_allocations", with("category", "device"),
          static_cast<double>(c.outstanding_allocs));
    m.add("gpuscope_memory_outstanding_allocations", with("category", "pinned_host"),
          static_cast<double>(c.pinned_allocs));
    m.add("gpuscope_memory_allocations_total", with("result", "ok"), static_cast<double>(c.allocs_ok));
    m.add("gpuscope_memory_allocations_total", with("result", "failed"), static_cast<double>(c.allocs_failed));
    m.add("gpuscope_memory_frees_total", with("result", "ok"), static_cast<double>(c.frees_ok));
    m.add("gpuscope_memory_frees_total", with("result", "failed"), static_cast<double>(c.frees_failed));
    m.add("gpuscope_memory_frees_total", with("result", "bad"), static_cast<double>(c.bad_frees));
    m.add("gpuscope_memory_frees_total", with("result", "untracked"), static_cast<double>(c.frees_untracked));
  }

  // A process's final summary and leaks: its life has ended.
  void ended(const MemleakProcess& mp, const std::vector<MemleakLeak>& leaks) {
    ProcEntry* p = host_->procs.ended(mp.pid, mp.comm, true);
    procs_[p->id] = mp.counters;
    uint64_t bytes = mp.counters.outstanding_bytes + mp.counters.pinned_bytes;
    auto& t = leaked_[{p->comm, p->labels.container}];
    t.bytes += bytes;
    t.allocations += mp.counters.outstanding_allocs + mp.counters.pinned_allocs;
    if (!bytes) return;
    LeakReport r{mp.pid, p->comm, p->labels.container, mp.state, bytes, leaks};
    std::sort(r.leaks.begin(), r.leaks.end(), [](auto& a, auto& b) { return a.size > b.size; });
    if (r.leaks.size() > kLeaksPerReport) r.leaks.resize(kLeaksPerReport);
    reports_.push_back(std::move(r));
    if (reports_.size() > kLeakReports) reports_.pop_front();
  }

  AgentHost* host_ = nullptr;
  std::unique_ptr<MemleakCollector> collector_;
  bool deferred_ = false;
  MemleakSnapshot snap_;
  PerProcess<gs_ml_proc> procs_;
  std::map<std::pair<std::string, std::string>, LeakTotals> leaked_;  // (comm, container)
  std::deque<LeakReport> reports_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_memleak_collector() { return std::make_unique<MemleakAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_memleak_collector, 20);

}  // namespace gpuscope

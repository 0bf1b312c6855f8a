// Memory copies and memsets per process and direction: calls and bytes as Prometheus counters.
#include <map>

#include "cmd/agent/registry.h"
#include "copies/copies_collector.h"
#include "core/output.h"
#include "core/uprobe_session.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

struct CopiesOfProcess {
  std::map<unsigned, CopyRow> by_direction;  // cumulative rows, by enum gs_copy_dir
};

uint64_t copy_calls(const CopiesOfProcess& p) {
  uint64_t n = 0;
  for (auto& [_, r] : p.by_direction) n += r.calls;
  return n;
}

class CopiesAgent final : public AgentCollector {
 public:
  std::string_view name() const override { return "copies"; }
  bool uses_session() const override { return true; }

  void load(AgentHost& host) override {
    host_ = &host;
    collector_ = std::make_unique<CopiesCollector>(*host.session, CopiesCollector::Config{host.options.scope});
    if (!collector_->exits_hooked())
      host.log("copies", "no tp_btf (" + collector_->exit_hook_error() + "): exited processes keep their series");
  }

  void take() override {
    std::map<uint32_t, std::vector<CopyRow>> by_pid;
    for (auto& r : collector_->snapshot()) by_pid[r.pid].push_back(std::move(r));
    for (auto& [pid, rows] : by_pid) {
      const CopyRow& first = rows.front();
      ProcEntry* e = first.exited ? host_->procs.ended(pid, first.comm, true, first.cgroup_id)
                                  : &host_->procs.live(pid, first.comm, first.cgroup_id);
      if (!e) continue;
      if (!first.exited) e->seen = true;
      auto& p = procs_[e->id];
      for (auto& r : rows) p.by_direction[r.direction] = r;
    }
  }

  void fold(const ProcEntry& e) override { procs_.fold(e, copy_calls); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_memory_copies_total", T::counter,
             "Memory copies and memsets that succeeded, per process and direction (H2D, D2H, D2D, H2H, peer, "
             "default: cudaMemcpyDefault and cuMemcpy, memset)");
    m.family("gpuscope_memory_copy_bytes_total", T::counter,
             "Bytes moved or set by the copies and memsets that succeeded, per process and direction");
    m.family("gpuscope_memory_copy_failures_total", T::counter,
             "Memory copies and memsets that returned an error, per process and direction");
    host_->procs.each([&](const ProcEntry& e) {
      const CopiesOfProcess* p = procs_.find(e.id);
      if (!p) return;
      auto l = e.prom_labels();
      for (auto& [dir, r] : p->by_direction) {
        PromLabels d{{"direction", copy_direction_name(dir)}};
        m.add("gpuscope_memory_copies_total", l, d, static_cast<double>(r.calls));
        m.add("gpuscope_memory_copy_bytes_total", l, d, static_cast<double>(r.bytes));
        if (r.failed) m.add("gpuscope_memory_copy_failures_total", l, d, static_cast<double>(r.failed));
      }
    });
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    const CopiesOfProcess* p = procs_.find(e.id);
    uint64_t calls = 0, bytes = 0;
    if (p)
      for (auto& [_, r] : p->by_direction) calls += r.calls, bytes += r.bytes;
    j.num("memory_copies", calls).num("memory_copy_bytes", bytes);
  }

  void lost(LostCounts& out) const override {
    if (!collector_) return;
    auto s = collector_->stats();
    out["row_map_full"] = s.rows_full;
    out["no_thread_state"] = s.no_state;
    out["exit_events"] = s.lost;
  }

  void detach() override {
    if (collector_) collector_->detach();
  }

 private:
  AgentHost* host_ = nullptr;
  std::unique_ptr<CopiesCollector> collector_;
  PerProcess<CopiesOfProcess> procs_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_copies_collector() { return std::make_unique<CopiesAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_copies_collector, 35);

}  // namespace gpuscope

// Kernel launches per process and kernel, named; /api/kernels with the GPU time of each kernel.
#include <algorithm>
#include <set>

#include "gputime/gputime_agent.h"
#include "cmd/agent/registry.h"
#include "core/cli.h"
#include "core/event_loop.h"
#include "core/flamegraph.h"
#include "core/output.h"
#include "core/uprobe_session.h"
#include "kernels/kernels_collector.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
using KernelKey = std::pair<std::string, std::string>;  // (kernel, module)

struct KernelsOfProcess {
  std::map<KernelKey, uint64_t> kernels;  // launches, handles naming the same kernel summed
  uint64_t graph_launches = 0;
  std::set<KernelKey> named;      // kernels with their own series (sticky, at most --max-kernels-per-process)
  std::vector<LaunchSite> sites;  // with --launch-site-every: its launch sites (the latest refresh's)
};

// The sites shown per process in /api/processes.
constexpr size_t kTopSites = 5;

template <typename M>
const typename M::mapped_type* find_in(const M& m, const typename M::key_type& k) {
  auto it = m.find(k);
  return it == m.end() ? nullptr : &it->second;
}

uint64_t launches(const KernelsOfProcess& p) {
  uint64_t n = 0;
  for (auto& [_, c] : p.kernels) n += c;
  return n;
}

class KernelsAgent final : public AgentCollector {
 public:
  explicit KernelsAgent(std::function<std::vector<KernelRow>()> rows = {}) : rows_(std::move(rows)) {}
  std::string_view name() const override { return "kernels"; }
  bool uses_session() const override { return !rows_; }

  void add_flags(CLI::App* cmd) override {
    add_number(cmd, "--launch-site-every", site_every_,
               "Take the user stack (native and CPython frames) of every Nth launch per process, and each "
               "kernel's first: /api/kernels/folded and each process's top launch sites (default 0: off; 1024 costs "
               "no more than the floor's noise on the stand-in loop)",
               "launches", 0, 1000000000);
  }

  void load(AgentHost& host) override {
    host_ = &host;
    if (rows_) return;
    shared_rows_ = host.services.needed<KernelsCollector>();
    KernelsCollector::Config kc{
        host.options.scope, CountLayer::Auto, false, kMaxRows, host.services.needed<LaunchTimingHost>(), shared_rows_};
    kc.stacks = site_every_ > 0;
    kc.stack_every = site_every_;
    collector_ = std::make_unique<KernelsCollector>(*host.session, kc);
    if (kc.stacks)
      collector_->on_exit_sites([this](uint32_t pid, std::vector<LaunchSite> sites) {
        // Its rows went first (exited()): the entry they ended.
        if (auto it = ended_.find(pid); it != ended_.end()) procs_[it->second].sites = std::move(sites);
        ended_.erase(pid);
      });
    // Another collector (errors) reads a process's rows when an event of it arrives: its exit waits
    // for the refresh, after every ring buffer of that wake-up was read.
    if (shared_rows_) collector_->defer_exits(true);
    collector_->on_exit([this](uint32_t pid, const std::vector<KernelRow>& rows) { exited(pid, rows); });
    host.services.provide<KernelsCollector>(collector_.get(), this);
    if ((timing_ = collector_->launch_timing_host())) host.services.provide<LaunchTimingHost>(&*timing_, this);
  }

  void start(AgentHost& host, EventLoop& loop) override {
    if (!collector_) return;
    collector_->start(*host.session);
    collector_->watch(loop);
    // Names are learnt four times a second rather than at every wake-up: each learning walks
    // the whole count map, and the agent's other timers wake it often.
    loop.every(0.25, [this] { collector_->tick(); });
  }

  void take() override {
    std::map<uint32_t, std::vector<KernelRow>> by_pid;
    for (auto& r : rows_ ? rows_() : collector_->snapshot()) by_pid[r.pid].push_back(std::move(r));
    ended_.clear();  // both exit sinks ran in one finish_exits()
    std::map<uint32_t, std::vector<LaunchSite>> sites;
    if (site_every_ && collector_)
      for (auto& s : collector_->sites()) sites[s.pid].push_back(std::move(s));
    for (auto& [pid, rows] : by_pid) {
      ProcEntry& p = host_->procs.live(pid, rows.front().comm, rows.front().cgroup_id);
      set_rows(procs_[p.id], pid, rows);
      procs_[p.id].sites = std::move(sites[pid]);
      p.seen = true;
    }
  }

  void settle(const RefreshSeq&) override {
    for (auto& [_, p] : procs_) choose_named(p);
  }

  void fold(const ProcEntry& e) override { procs_.fold(e, launches); }

  void metrics(PromSet& m) override {
    m.family("gpuscope_kernel_launches_total", T::counter,
             "Kernel launches per process and kernel; kernels beyond the busiest --max-kernels-per-process are "
             "summed in kernel=\"other\"");
    m.family("gpuscope_graph_launches_total", T::counter, "CUDA graph launches per process");
    m.family("gpuscope_comm_kernel_launches_total", T::counter,
             "Kernel launches per process name and container, exited processes included");
    host_->procs.each([&](const ProcEntry& e) {
      const KernelsOfProcess* k = procs_.find(e.id);
      if (!k) return;
      const KernelsOfProcess& p = *k;
      auto l = e.prom_labels();
      uint64_t other = 0;
      for (auto& [k, n] : p.kernels) {
        if (!p.named.count(k)) {
          other += n;
          continue;
        }
        m.add("gpuscope_kernel_launches_total", l, {{"kernel", k.first}, {"module", k.second}}, static_cast<double>(n));
      }
      if (other || p.kernels.size() > p.named.size())
        m.add("gpuscope_kernel_launches_total", l, {{"kernel", "other"}, {"module", ""}}, static_cast<double>(other));
      if (p.graph_launches) m.add("gpuscope_graph_launches_total", l, static_cast<double>(p.graph_launches));
    });
    for (auto& [k, n] : procs_.comm_totals(host_->procs, launches))
      m.add("gpuscope_comm_kernel_launches_total", comm_labels(k), static_cast<double>(n));
  }

  void process_json(const ProcEntry& e, JsonLine& j) const override {
    static const KernelsOfProcess none;
    const KernelsOfProcess* k = procs_.find(e.id);
    const KernelsOfProcess& p = k ? *k : none;
    j.num("kernel_launches", launches(p)).num("graph_launches", p.graph_launches).num("kernels", p.kernels.size());
    if (!site_every_) return;
    std::vector<const LaunchSite*> top;
    for (auto& s : p.sites) top.push_back(&s);
    std::sort(top.begin(), top.end(), [](auto* a, auto* b) { return a->launches > b->launches; });
    if (top.size() > kTopSites) top.resize(kTopSites);
    j.begin_array("launch_sites");
    for (auto* s : top)
      j.begin_object()
          .str("site", s->site)
          .str("kernel", s->kernel)
          .num("launches", s->launches)
          .num("samples", s->samples)
          .boolean("estimated", s->estimated)
          .end_object();
    j.end_array();
  }

  std::vector<std::string> paths() const override {
    if (!site_every_) return {"/api/kernels"};
    return {"/api/kernels", "/api/kernels/folded", "/api/kernels/folded/gpu-time"};
  }

  void endpoints(std::map<std::string, Endpoint>& out) override {
    fmt::memory_buffer b;
    JsonLine j(b);
    j.begin_array("kernels");
    const auto* gputime = host_->services.get<GpuTimeByProcess>();
    host_->procs.each(
        [&](const ProcEntry& e) { api_rows(j, e, procs_.find(e.id), gputime ? gputime->of(e.id) : nullptr); });
    j.end_array().end();
    out["/api/kernels"] = {std::string(b.data(), b.size())};
    if (!site_every_) return;
    Folded by_launches, by_gpu_ns;
    host_->procs.each([&](const ProcEntry& e) {
      const KernelsOfProcess* p = procs_.find(e.id);
      if (p) fold_sites(*p, e, gputime ? gputime->of(e.id) : nullptr, by_launches, by_gpu_ns);
    });
    out["/api/kernels/folded"] = {folded_text(by_launches), "text/plain; charset=utf-8"};
    out["/api/kernels/folded/gpu-time"] = {folded_text(by_gpu_ns), "text/plain; charset=utf-8"};
  }

  void lost(LostCounts& out) const override {
    if (!collector_) return;
    auto s = collector_->stats();
    out["row_map_full"] = s.rows_full;
    out["naming_events"] = s.lost;
    if (site_every_) {
      out["launch_stacks"] = s.stacks_lost;
      out["launch_site_map_full"] = s.samples_full;
    }
  }

  void defer_events(bool on) override {
    if (collector_) collector_->defer_exits(on || shared_rows_);
  }
  void drain() override {
    if (collector_) collector_->drain();
  }

 private:
  // The agent's count map beside others: within its 20 MB of maps.
  static constexpr uint32_t kMaxRows = 16384;

  static void set_rows(KernelsOfProcess& p, uint32_t pid, const std::vector<KernelRow>& rows) {
    p.kernels.clear();
    p.graph_launches = 0;
    for (auto& r : rows) {
      if (r.pid != pid) continue;
      if (r.graph())
        p.graph_launches += r.launches;
      else
        p.kernels[{r.kernel, r.module}] += r.launches;
    }
  }

  // A process's final rows: its life has ended.
  void exited(uint32_t pid, const std::vector<KernelRow>& rows) {
    ProcEntry* e = host_->procs.ended(pid, rows.empty() ? "" : rows.front().comm, !rows.empty(),
                                      rows.empty() ? 0 : rows.front().cgroup_id);
    if (e && !rows.empty()) set_rows(procs_[e->id], pid, rows);
    if (e && site_every_) ended_[pid] = e->id;
  }

  void choose_named(KernelsOfProcess& p) const {
    const size_t max = host_->options.max_kernels;
    // A row first seen unnamed ("[unknown …]") is renamed once its name is learnt: the old key goes.
    std::erase_if(p.named, [&](const KernelKey& k) { return !p.kernels.count(k); });
    std::vector<std::pair<uint64_t, KernelKey>> fresh;
    for (auto& [k, n] : p.kernels)
      if (!p.named.count(k)) fresh.push_back({n, k});
    std::sort(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.first > b.first; });
    // Once named, a kernel keeps its series, so that no counter of it ever goes backwards.
    for (auto& [n, k] : fresh) {
      if (p.named.size() >= max) break;
      p.named.insert(k);
    }
  }

  // One process's /api/kernels rows: GPU time goes on the first row of its kernel's name, under
  // the same top-N rule as /metrics; kernels timed on the GPU that no counted launch names
  // (launched before the agent came) get rows of their own.
  static void api_rows(JsonLine& j, const ProcEntry& e, const KernelsOfProcess* k, const GpuTimeOfProcess* g) {
    static const KernelsOfProcess no_launches;
    static const GpuTimeOfProcess no_gpu_time;
    const KernelsOfProcess& p = k ? *k : no_launches;
    const GpuTimeOfProcess& gt = g ? *g : no_gpu_time;
    uint64_t other = 0;
    std::vector<std::pair<uint64_t, const KernelKey*>> v;
    for (auto& [key, n] : p.kernels)
      if (p.named.count(key))
        v.push_back({n, &key});
      else
        other += n;
    std::sort(v.begin(), v.end(), [](auto& a, auto& c) { return a.first > c.first; });
    std::set<std::string> gpu_done;
    KernelGpuTime gpu_other;
    for (auto& [name, t] : gt.kernels)
      if (!gt.named.count(name)) gpu_other += t;
    bool has_gpu_other = gt.kernels.size() > gt.named.size();
    auto row = [&](const std::string& kernel, const std::string& mod, uint64_t n, const KernelGpuTime* t) {
      j.begin_object().num("pid", e.pid).str("comm", e.comm).str("container", e.labels.container);
      j.str("kernel", kernel).str("module", mod).num("launches", n);
      if (t) {
        j.num("gpu_kernels", t->count).num("gpu_time_ns", t->total_ns);
        j.num("gpu_mean_ns", t->count ? t->total_ns / t->count : 0).num("gpu_max_ns", t->max_ns);
      }
      j.end_object();
    };
    auto gpu_of = [&](const std::string& name) -> const KernelGpuTime* {
      if (!gt.named.count(name) || !gpu_done.insert(name).second) return nullptr;
      return &gt.kernels.at(name);
    };
    for (auto& [n, key] : v) row(key->first, key->second, n, gpu_of(key->first));
    for (auto& name : gt.named)
      if (!gpu_done.count(name)) row(name, "", 0, &gt.kernels.at(name));
    if (p.kernels.size() > p.named.size() || has_gpu_other)
      row("other", "", other, has_gpu_other ? &gpu_other : nullptr);
  }

  // A process's sites as folded stacks, root first (its name, its frames, the kernel), weighted
  // by launches and by GPU time: a kernel's GPU time split over its sites as its launches are.
  static void fold_sites(const KernelsOfProcess& p, const ProcEntry& e, const GpuTimeOfProcess* g, Folded& launches,
                         Folded& gpu_ns) {
    std::map<std::string, uint64_t> of_kernel;  // its counted launches, over every module
    for (auto& [key, n] : p.kernels) of_kernel[key.first] += n;
    for (auto& s : p.sites) {
      if (!s.launches) continue;
      std::vector<std::string> f{e.comm};
      f.insert(f.end(), s.stack.rbegin(), s.stack.rend());
      f.push_back("[kernel] " + s.kernel);
      std::string key = gpuscope::fold(f);
      launches[key] += s.launches;
      const auto* t = g ? find_in(g->kernels, s.kernel) : nullptr;
      if (uint64_t all = of_kernel[s.kernel]; t && all)
        gpu_ns[key] += static_cast<uint64_t>(static_cast<unsigned __int128>(t->total_ns) * s.launches / all);
    }
  }

  // Off by default: a sampled process's mapped files' symbol tables are read at its first naming
  // call (so that its stacks resolve after its exit), which beside libtorch is most of the
  // agent's memory; not measured on a GPU host yet.
  uint32_t site_every_ = 0;
  std::map<uint32_t, uint64_t> ended_;  // pid -> the entry its rows' exit ended, for its sites' exit
  std::function<std::vector<KernelRow>()> rows_;
  AgentHost* host_ = nullptr;
  std::unique_ptr<KernelsCollector> collector_;
  bool shared_rows_ = false;  // others read its rows (KernelsCollector::launched_since)
  std::optional<LaunchTimingHost> timing_;
  PerProcess<KernelsOfProcess> procs_;
};

}  // namespace

std::unique_ptr<AgentCollector> make_kernels_collector() { return std::make_unique<KernelsAgent>(); }
GPUSCOPE_AGENT_COLLECTOR(make_kernels_collector, 10);
std::unique_ptr<AgentCollector> make_kernels_collector(std::function<std::vector<KernelRow>()> rows) {
  return std::make_unique<KernelsAgent>(std::move(rows));
}

}  // namespace gpuscope

#include "cmd/agent/agent.h"

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/cuda_api.h"
#include "core/output.h"
#include "core/system.h"
#include "ioctl/decode.h"
#include "kernels/kernels.h"
#include "latency/histogram.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;
constexpr size_t kLeakReports = 100;  // ended processes kept for /api/leaks
constexpr size_t kLeaksPerReport = 20;
// API duration buckets: everything up to 1.023 µs in the first, up to about 17 s in the last.
constexpr unsigned kFirstBucket = 9, kLastBucket = 33;
// Kernel duration buckets: 4^i µs, 1 µs to 16.8 s. Kernels run from about a microsecond to
// seconds; powers of 4 span that in 13 buckets (powers of 2 would double every kernel's series
// within the same cardinality bound), and each bound is one of the collector's log2 bounds, so
// the counts are exact.
constexpr size_t kKernelBuckets = 13;

const std::vector<double>& kernel_bounds_s() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (size_t i = 0; i < kKernelBuckets; i++) v.push_back(static_cast<double>(uint64_t{1} << (2 * i)) * 1e-6);
    return v;
  }();
  return b;
}

// The collector's (2^(k-1), 2^k] µs counts folded into kernel_bounds_s(), +Inf last.
std::vector<uint64_t> kernel_bucket_counts(const KernelGpuTime& t) {
  std::vector<uint64_t> c(kKernelBuckets + 1, 0);
  for (size_t k = 0; k < KernelGpuTime::kBuckets; k++) c[std::min((k + 1) / 2, kKernelBuckets)] += t.le_log2_us[k];
  return c;
}

std::string category_name(unsigned c) {
  switch (c) {
    case GS_MEM_DEVICE: return "device";
    case GS_MEM_MANAGED: return "managed";
    case GS_MEM_PINNED: return "pinned_host";
    default: return "vmm";
  }
}

std::string body(fmt::memory_buffer& b) { return std::string(b.data(), b.size()); }

}  // namespace

AgentView::Proc& AgentView::proc(uint32_t pid, const std::string& comm) {
  auto it = live_.find(pid);
  if (it != live_.end()) {
    // A collector may have read /proc after the process had gone; a later record names it.
    if (it->second.comm.empty()) it->second.comm = comm;
    return it->second;
  }
  Proc& p = live_[pid];
  p.pid = pid;
  p.comm = comm;
  p.labels = labels_.get(static_cast<pid_t>(pid));
  return p;
}

AgentView::Proc* AgentView::gone(uint32_t pid) {
  for (auto it = gone_.rbegin(); it != gone_.rend(); ++it)
    if (it->pid == pid) return &*it;
  return nullptr;
}

// The process's life has ended: its series stay until a scrape has seen their final values.
void AgentView::retire(uint32_t pid) {
  auto it = live_.find(pid);
  if (it == live_.end()) return;
  it->second.exited = true;
  it->second.exited_at = std::chrono::steady_clock::now();
  gone_.push_back(std::move(it->second));
  live_.erase(it);
  labels_.forget(static_cast<pid_t>(pid));
}

void AgentView::set_kernels(Proc& p, const std::vector<KernelRow>& rows) {
  p.kernels.clear();
  p.graph_launches = 0;
  for (auto& r : rows) {
    if (r.pid != p.pid) continue;
    if (r.graph())
      p.graph_launches += r.launches;
    else
      p.kernels[{r.kernel, r.module}] += r.launches;
  }
}

void AgentView::kernels_exited(uint32_t pid, const std::vector<KernelRow>& rows) {
  Proc* p = nullptr;
  if (live_.count(pid)) {
    retire(pid);
    p = &gone_.back();
  } else if (!(p = gone(pid))) {
    if (rows.empty()) return;
    Proc& n = proc(pid, rows.front().comm);  // a life shorter than one refresh
    (void)n;
    retire(pid);
    p = &gone_.back();
  }
  if (!rows.empty()) {
    set_kernels(*p, rows);
    if (p->comm.empty()) p->comm = rows.front().comm;
  }
}

void AgentView::memleak_ended(const MemleakProcess& mp, const std::vector<MemleakLeak>& leaks) {
  Proc* p = nullptr;
  if (live_.count(mp.pid)) {
    retire(mp.pid);
    p = &gone_.back();
  } else if (!(p = gone(mp.pid))) {
    proc(mp.pid, mp.comm);
    retire(mp.pid);
    p = &gone_.back();
  }
  p->has_mem = true;
  p->mem = mp.counters;
  if (p->comm.empty()) p->comm = mp.comm;
  uint64_t bytes = mp.counters.outstanding_bytes + mp.counters.pinned_bytes;
  auto& t = leaked_[{p->comm, p->labels.container}];
  t.bytes += bytes;
  t.allocations += mp.counters.outstanding_allocs + mp.counters.pinned_allocs;
  if (bytes) {
    LeakReport r{mp.pid, p->comm, p->labels.container, mp.state, bytes, leaks};
    std::sort(r.leaks.begin(), r.leaks.end(), [](auto& a, auto& b) { return a.size > b.size; });
    if (r.leaks.size() > kLeaksPerReport) r.leaks.resize(kLeaksPerReport);
    leak_reports_.push_back(std::move(r));
    if (leak_reports_.size() > kLeakReports) leak_reports_.pop_front();
  }
}

void AgentView::take_ioctl(const AgentInput& in) {
  ioctl_now_ = ioctl_exited_;
  struct PerPid {
    std::string comm;
    uint64_t calls = 0, errors = 0;
    bool exited = false;
  };
  std::map<uint32_t, PerPid> per_pid;
  for (auto& r : in.ioctl->ioctls) {
    auto req = decode_ioctl(r.key.rdev >> GS_KDEV_MINORBITS, in.uvm_major, r.key.request);
    std::string name = req.name.empty() ? fmt::format("0x{:x}", r.key.request) : req.name;
    auto add = [&](IoctlTotals& t) {
      t.calls += r.val.count;
      t.errors += r.val.errors;
      t.total_ns += r.val.total_ns;
    };
    add(ioctl_now_[name]);
    if (r.exited) add(ioctl_exited_[name]);
    auto& pp = per_pid[r.key.pid];
    pp.comm = std::string(r.val.comm, strnlen(r.val.comm, sizeof r.val.comm));
    pp.calls += r.val.count;
    pp.errors += r.val.errors;
    pp.exited = pp.exited || r.exited;
  }
  for (auto& [pid, pp] : per_pid) {
    Proc* p = live_.count(pid) ? &live_[pid] : gone(pid);
    if (!p) p = &proc(pid, pp.comm);
    p->has_ioctl = true;
    p->ioctl_calls = pp.calls;
    p->ioctl_errors = pp.errors;
    // Final values: not seen, so an exited process leaves with this refresh.
    if (!pp.exited && !p->exited) p->seen = true;
  }
}

void AgentView::take_starvation(const StarvationReport& r, uint64_t seq, uint64_t scraped) {
  has_folded_ = true;
  for (auto& row : r.rows) {
    auto& t = starving_[{row.pid, row.tid}];
    if (!t.pid) {
      t.pid = row.pid;
      t.tid = row.tid;
      t.labels = labels_.get(static_cast<pid_t>(row.pid));
    }
    t.comm = row.comm;
    t.thread = row.thread;
    t.cpu_ns += row.cpu_time_ns;
  }
  for (auto& [pid, tid] : r.gone)
    if (auto it = starving_.find({pid, tid}); it != starving_.end()) it->second.gone = true;
  // A thread gone stays until a scrape has seen its final value, then folds into its comm's.
  for (auto it = starving_.begin(); it != starving_.end();) {
    StarvingThread& t = it->second;
    if (t.gone && t.published_seq && scraped >= t.published_seq) {
      starving_exited_[{t.comm, t.labels.container, t.labels.pod, t.labels.ns}] += t.cpu_ns;
      uint32_t pid = t.pid;
      it = starving_.erase(it);
      auto next = starving_.lower_bound({pid, 0});
      if ((next == starving_.end() || next->first.first != pid) && !live_.count(pid))
        labels_.forget(static_cast<pid_t>(pid));
      continue;
    }
    if (t.gone && !t.published_seq) t.published_seq = seq;
    ++it;
  }
  for (auto& [k, w] : r.folded) {
    auto it = stacks_.find(k);
    if (it != stacks_.end())
      it->second += w;
    else if (stacks_.size() < cfg_.max_folded_stacks)
      stacks_.emplace(k, w);
    else
      folded_lost_++;
  }
}

void AgentView::take_gputime(const std::vector<GpuTimeProcess>& procs) {
  for (auto& g : procs) {
    Proc* p = live_.count(g.pid) ? &live_[g.pid] : gone(g.pid);
    if (!p) p = &proc(g.pid, g.comm);
    if (p->comm.empty()) p->comm = g.comm;
    p->has_gpu = true;
    p->gpu_kernels = g.kernels;
    p->gpu_busy_ns = g.busy_ns;
    // Final values: not seen, so an ended process leaves with this refresh.
    if (!g.exited && !p->exited) p->seen = true;
  }
}

// The processes the bridge lists on the GPUs now; one it lists is running.
void AgentView::take_process_gpus(const std::vector<ProcessGpuSample>& samples) {
  for (auto& [_, p] : live_) p.on_gpus.clear();
  for (auto& s : samples) {
    Proc* p = live_.count(s.pid) ? &live_[s.pid] : gone(s.pid);
    if (!p) p = &proc(s.pid, s.comm);
    if (p->exited) continue;
    p->on_gpus[s.gpu] = s.m;
    p->seen = true;
  }
}

// As choose_named, ranked by GPU time: the kernels that take the GPU longest get their own series.
void AgentView::choose_gpu_named(Proc& p) {
  std::erase_if(p.gpu_named, [&](const std::string& k) { return !p.gpu_kernels.count(k); });
  if (p.gpu_named.size() >= cfg_.max_kernels_per_process) return;
  std::vector<std::pair<uint64_t, const std::string*>> fresh;
  for (auto& [k, t] : p.gpu_kernels)
    if (!p.gpu_named.count(k)) fresh.push_back({t.total_ns, &k});
  std::stable_sort(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (auto& [_, k] : fresh) {
    if (p.gpu_named.size() >= cfg_.max_kernels_per_process) break;
    p.gpu_named.insert(*k);
  }
}

void AgentView::choose_named(Proc& p) {
  // A row first seen unnamed ("[unknown …]") is renamed once its name is learnt: the old key goes.
  std::erase_if(p.named, [&](const KernelKey& k) { return !p.kernels.count(k); });
  if (p.named.size() >= cfg_.max_kernels_per_process) return;
  std::vector<std::pair<uint64_t, KernelKey>> fresh;
  for (auto& [k, n] : p.kernels)
    if (!p.named.count(k)) fresh.push_back({n, k});
  std::sort(fresh.begin(), fresh.end(), [](auto& a, auto& b) { return a.first > b.first; });
  // Once named, a kernel keeps its series, so that no counter of it ever goes backwards.
  for (auto& [n, k] : fresh) {
    if (p.named.size() >= cfg_.max_kernels_per_process) break;
    p.named.insert(k);
  }
}

void AgentView::refresh(const AgentInput& in) {
  auto t0 = std::chrono::steady_clock::now();
  for (auto& [_, p] : live_) p.seen = false;
  if (in.kernels) {
    std::map<uint32_t, std::vector<KernelRow>> by_pid;
    for (auto& r : *in.kernels) by_pid[r.pid].push_back(r);
    for (auto& [pid, rows] : by_pid) {
      Proc& p = proc(pid, rows.front().comm);
      set_kernels(p, rows);
      p.seen = true;
    }
  }
  if (in.memleak)
    for (auto& mp : in.memleak->processes) {
      Proc& p = proc(mp.pid, mp.comm);
      p.has_mem = true;
      p.mem = mp.counters;
      p.seen = true;
    }
  if (in.ioctl) take_ioctl(in);
  if (in.gputime) take_gputime(*in.gputime);
  if (in.process_gpus) take_process_gpus(*in.process_gpus);
  // Gone from every collector without an exit record (lost, or no exit hook).
  std::vector<uint32_t> vanished;
  for (auto& [pid, p] : live_)
    if (!p.seen) vanished.push_back(pid);
  for (uint32_t pid : vanished) retire(pid);

  uint64_t scraped;
  {
    std::lock_guard g(mu_);
    scraped = scraped_seq_;
  }
  uint64_t seq = ++seq_;
  auto now = std::chrono::steady_clock::now();
  for (auto it = gone_.begin(); it != gone_.end();) {
    bool expired = std::chrono::duration<double>(now - it->exited_at).count() > cfg_.retain_exited_s;
    if (it->published_seq && (scraped >= it->published_seq || expired)) {
      auto& t = folded_[comm_key(*it)];
      for (auto& [_, n] : it->kernels) t.launches += n;
      t.graph_launches += it->graph_launches;
      if (it->has_mem) t.allocations += it->mem.allocs_ok;
      it = gone_.erase(it);
      continue;
    }
    if (!it->published_seq) it->published_seq = seq;
    ++it;
  }
  for (auto& [_, p] : live_) choose_named(p), choose_gpu_named(p);
  for (auto& p : gone_) choose_named(p), choose_gpu_named(p);
  if (in.starvation) take_starvation(*in.starvation, seq, scraped);

  auto pub = std::make_shared<Published>();
  pub->seq = seq;
  pub->metrics = render_metrics(in, &pub->series);
  pub->processes = render_processes();
  pub->kernels = render_kernels();
  pub->leaks = render_leaks();
  pub->health = render_health(in, pub->series);
  if (in.anomalies) pub->anomalies = in.anomalies->json();
  if (has_folded_) pub->folded = folded_text(stacks_);
  pub->has_folded = has_folded_;
  render_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard g(mu_);
  pub_ = std::move(pub);
}

size_t AgentView::series() const {
  std::lock_guard g(mu_);
  return pub_ ? pub_->series : 0;
}

HttpReply AgentView::serve(const std::string& path) {
  std::shared_ptr<const Published> pub;
  {
    std::lock_guard g(mu_);
    pub = pub_;
    if (pub && path == "/metrics") {
      scraped_seq_ = std::max(scraped_seq_, pub->seq);
      scrapes_++;
    }
  }
  HttpReply r;
  if (!pub) {
    r.status = 503;
    r.body = "starting\n";
    return r;
  }
  r.content_type = "application/json";
  if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = pub->metrics;
  } else if (path == "/api/processes") {
    r.body = pub->processes;
  } else if (path == "/api/kernels") {
    r.body = pub->kernels;
  } else if (path == "/api/leaks") {
    r.body = pub->leaks;
  } else if (path == "/api/health") {
    r.body = pub->health;
  } else if (path == "/api/anomalies") {
    r.body = pub->anomalies;
    if (r.body.empty()) {
      r.status = 503;
      r.content_type = "text/plain; charset=utf-8";
      r.body = "anomaly rules are off\n";
    }
  } else if (path == "/api/starvation/folded") {
    r.content_type = "text/plain; charset=utf-8";
    if (pub->has_folded) {
      r.body = pub->folded;
    } else {
      r.status = 503;
      r.body = "the starvation collector is off; /api/health says why\n";
    }
  } else if (path == "/") {
    r.content_type = "text/plain; charset=utf-8";
    r.body =
        "gpuscope agent: /metrics /api/processes /api/kernels /api/leaks /api/anomalies /api/starvation/folded "
        "/api/health\n";
  } else {
    r.status = 404;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "not found\n";
  }
  return r;
}

std::string AgentView::render_metrics(const AgentInput& in, size_t* series) {
  PromSet m;
  auto plabels = [](const Proc& p) {
    return PromLabels{{"pid", std::to_string(p.pid)},
                      {"comm", p.comm},
                      {"container", p.labels.container},
                      {"pod", p.labels.pod},
                      {"namespace", p.labels.ns}};
  };
  auto each = [&](auto fn) {
    for (auto& [_, p] : live_) fn(p);
    for (auto& p : gone_) fn(p);
  };
  if (in.kernels) {
    m.family("gpuscope_kernel_launches_total", T::counter,
             "Kernel launches per process and kernel; kernels beyond the busiest --max-kernels-per-process are "
             "summed in kernel=\"other\"");
    m.family("gpuscope_graph_launches_total", T::counter, "CUDA graph launches per process");
    m.family("gpuscope_comm_kernel_launches_total", T::counter,
             "Kernel launches per process name and container, exited processes included");
    std::map<CommKey, CommTotals> comm = folded_;
    each([&](const Proc& p) {
      auto l = plabels(p);
      uint64_t other = 0, all = 0;
      for (auto& [k, n] : p.kernels) {
        all += n;
        if (!p.named.count(k)) {
          other += n;
          continue;
        }
        m.add("gpuscope_kernel_launches_total", l, {{"kernel", k.first}, {"module", k.second}}, static_cast<double>(n));
      }
      if (other || p.kernels.size() > p.named.size()) {
        m.add("gpuscope_kernel_launches_total", l, {{"kernel", "other"}, {"module", ""}}, static_cast<double>(other));
      }
      if (p.graph_launches) m.add("gpuscope_graph_launches_total", l, static_cast<double>(p.graph_launches));
      auto& t = comm[comm_key(p)];
      t.launches += all;
      t.graph_launches += p.graph_launches;
    });
    for (auto& [k, t] : comm) {
      auto& [c, ctr, pod, ns] = k;
      m.add("gpuscope_comm_kernel_launches_total", {{"comm", c}, {"container", ctr}, {"pod", pod}, {"namespace", ns}},
            static_cast<double>(t.launches));
    }
  }
  if (in.memleak) {
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
    std::map<CommKey, uint64_t> comm;
    for (auto& [k, t] : folded_) comm[k] = t.allocations;
    each([&](const Proc& p) {
      if (!p.has_mem) return;
      auto l = plabels(p);
      auto cat = [&](const char* c) {
        auto x = l;
        x.push_back({"category", c});
        return x;
      };
      auto res = [&](const char* r) {
        auto x = l;
        x.push_back({"result", r});
        return x;
      };
      const gs_ml_proc& c = p.mem;
      m.add("gpuscope_memory_outstanding_bytes", cat("device"), static_cast<double>(c.outstanding_bytes));
      m.add("gpuscope_memory_outstanding_bytes", cat("pinned_host"), static_cast<double>(c.pinned_bytes));
      m.add("gpuscope_memory_outstanding_allocations", cat("device"), static_cast<double>(c.outstanding_allocs));
      m.add("gpuscope_memory_outstanding_allocations", cat("pinned_host"), static_cast<double>(c.pinned_allocs));
      m.add("gpuscope_memory_allocations_total", res("ok"), static_cast<double>(c.allocs_ok));
      m.add("gpuscope_memory_allocations_total", res("failed"), static_cast<double>(c.allocs_failed));
      m.add("gpuscope_memory_frees_total", res("ok"), static_cast<double>(c.frees_ok));
      m.add("gpuscope_memory_frees_total", res("failed"), static_cast<double>(c.frees_failed));
      m.add("gpuscope_memory_frees_total", res("bad"), static_cast<double>(c.bad_frees));
      m.add("gpuscope_memory_frees_total", res("untracked"), static_cast<double>(c.frees_untracked));
      comm[comm_key(p)] += c.allocs_ok;
    });
    for (auto& [k, n] : comm) {
      auto& [c, ctr, pod, ns] = k;
      m.add("gpuscope_comm_memory_allocations_total",
            {{"comm", c}, {"container", ctr}, {"pod", pod}, {"namespace", ns}}, static_cast<double>(n));
    }
    for (auto& [k, t] : leaked_) {
      m.add("gpuscope_memory_leaked_bytes_total", {{"comm", k.first}, {"container", k.second}},
            static_cast<double>(t.bytes));
      m.add("gpuscope_memory_leaked_allocations_total", {{"comm", k.first}, {"container", k.second}},
            static_cast<double>(t.allocations));
    }
  }
  if (in.latency) {
    m.family("gpuscope_api_calls_total", T::counter, "CUDA API calls by API, layer and result (return code name)");
    m.family("gpuscope_api_duration_seconds", T::histogram,
             "CUDA API call duration, from the in-kernel log2 histograms; _sum is estimated from bucket midpoints");
    std::vector<double> bounds;
    for (unsigned b = kFirstBucket; b <= kLastBucket; b++) bounds.push_back(static_cast<double>(bucket_le(b)) / 1e9);
    for (auto& [key, row] : in.latency->rows) {
      unsigned api = key.second;
      PromLabels l{{"api", api_symbol(api)}, {"layer", layer_name(api_desc(api).layer)}};
      for (auto& [ret, n] : row.rets) {
        auto x = l;
        x.push_back({"result", latency_ret_name(api, ret)});
        m.add("gpuscope_api_calls_total", x, static_cast<double>(n));
      }
      std::vector<uint64_t> counts(bounds.size() + 1, 0);
      double sum_s = 0;
      for (unsigned b = 0; b < kLatBuckets; b++) {
        uint64_t n = row.buckets[b];
        if (!n) continue;
        unsigned i = b <= kFirstBucket ? 0 : b - kFirstBucket;
        counts[std::min<size_t>(i, bounds.size())] += n;
        double hi = std::min<double>(static_cast<double>(bucket_le(b)), row.max_ns ? row.max_ns : 1e300);
        sum_s += n * (static_cast<double>(bucket_low(b)) + hi) / 2 * 1e-9;
      }
      m.histogram("gpuscope_api_duration_seconds", l, bounds, counts, sum_s);
    }
    m.family("gpuscope_api_probe_hits_total", T::counter,
             "Entries of the latency collector's probes by API and outcome: timed, or not timed as nested in an "
             "outer call of the same layer, filtered out (-c), or an unsampled launch");
    for (unsigned api = 0; api < in.latency->sites.size(); api++) {
      const LatencySiteCounts& c = in.latency->sites[api];
      if (!c.entries) continue;
      PromLabels l{{"api", api_symbol(api)}, {"layer", layer_name(api_desc(api).layer)}};
      for (auto [outcome, n] : {std::pair<const char*, uint64_t>{"timed", c.timed()},
                                {"nested", c.nested},
                                {"filtered", c.filtered},
                                {"unsampled", c.unsampled}}) {
        auto x = l;
        x.push_back({"outcome", outcome});
        m.add("gpuscope_api_probe_hits_total", x, static_cast<double>(n));
      }
    }
    m.family("gpuscope_api_launch_sample", T::gauge,
             "The latency collector times one kernel launch in this many (gpuscope_api_calls_total and "
             "gpuscope_api_duration_seconds of launch APIs count the timed ones)");
    m.add("gpuscope_api_launch_sample", {}, static_cast<double>(in.latency->launch_sample));
  }
  if (in.ioctl) {
    m.family("gpuscope_ioctl_calls_total", T::counter,
             "ioctl calls on NVIDIA device nodes by request, exited processes included");
    m.family("gpuscope_ioctl_errors_total", T::counter, "ioctl calls on NVIDIA device nodes that failed, by request");
    m.family("gpuscope_ioctl_duration_seconds_total", T::counter,
             "Time spent in ioctl calls on NVIDIA device nodes, by request");
    for (auto& [req, t] : ioctl_now_) {
      m.add("gpuscope_ioctl_calls_total", {{"request", req}}, static_cast<double>(t.calls));
      m.add("gpuscope_ioctl_errors_total", {{"request", req}}, static_cast<double>(t.errors));
      m.add("gpuscope_ioctl_duration_seconds_total", {{"request", req}}, static_cast<double>(t.total_ns) / 1e9);
    }
    m.family("gpuscope_process_ioctl_calls_total", T::counter, "ioctl calls on NVIDIA device nodes per process");
    each([&](const Proc& p) {
      if (p.has_ioctl) m.add("gpuscope_process_ioctl_calls_total", plabels(p), static_cast<double>(p.ioctl_calls));
    });
  }
  if (in.starvation) {
    m.family("gpuscope_starvation_cpu_seconds_total", T::counter,
             "On-CPU time of a thread while its process's GPUs sat idle");
    m.family("gpuscope_comm_starvation_cpu_seconds_total", T::counter,
             "On-CPU time while the GPUs sat idle, per process name and container, exited threads included");
    std::map<CommKey, uint64_t> comm = starving_exited_;
    for (auto& [_, t] : starving_) {
      m.add("gpuscope_starvation_cpu_seconds_total",
            {{"pid", std::to_string(t.pid)},
             {"tid", std::to_string(t.tid)},
             {"comm", t.comm},
             {"thread", t.thread},
             {"container", t.labels.container},
             {"pod", t.labels.pod},
             {"namespace", t.labels.ns}},
            static_cast<double>(t.cpu_ns) / 1e9);
      comm[{t.comm, t.labels.container, t.labels.pod, t.labels.ns}] += t.cpu_ns;
    }
    for (auto& [k, ns] : comm) {
      auto& [c, ctr, pod, nsp] = k;
      m.add("gpuscope_comm_starvation_cpu_seconds_total",
            {{"comm", c}, {"container", ctr}, {"pod", pod}, {"namespace", nsp}}, static_cast<double>(ns) / 1e9);
    }
  }
  if (in.gputime) {
    m.family("gpuscope_kernel_duration_seconds", T::histogram,
             "GPU execution time of the kernels recorded (all, or those in --gputime-duty's windows) per process and "
             "kernel, from libgpuscope-cupti.so's records; kernels beyond the --max-kernels-per-process with the most "
             "GPU time are summed in kernel=\"other\"");
    m.family("gpuscope_gpu_busy_seconds_total", T::counter,
             "Time in which at least one kernel of the process ran on the device (overlapping kernels counted once); "
             "a duty window's share counts for its whole period");
    m.family("gpuscope_gputime_duty_ratio", T::gauge,
             "Share of the time this agent asks libgpuscope-cupti.so to record (--gputime-duty; 1: always)");
    m.add("gpuscope_gputime_duty_ratio", {}, in.gputime_duty);
    each([&](const Proc& p) {
      if (!p.has_gpu) return;
      auto l = plabels(p);
      auto one = [&](const std::string& kernel, const KernelGpuTime& t) {
        auto x = l;
        x.push_back({"kernel", kernel});
        m.histogram("gpuscope_kernel_duration_seconds", x, kernel_bounds_s(), kernel_bucket_counts(t),
                    static_cast<double>(t.total_ns) / 1e9);
      };
      KernelGpuTime other;
      for (auto& [k, t] : p.gpu_kernels)
        if (p.gpu_named.count(k))
          one(k, t);
        else
          other += t;
      if (p.gpu_kernels.size() > p.gpu_named.size()) one("other", other);
      for (auto& [dev, ns] : p.gpu_busy_ns)
        m.add("gpuscope_gpu_busy_seconds_total", l, {{"device", std::to_string(dev)}}, static_cast<double>(ns) / 1e9);
    });
  }
  if (in.devices) add_device_metrics(m, *in.devices, in.hostname, in.bridge_age_s);
  if (in.process_gpus) {
    m.family("gpuscope_process_gpu_utilization_ratio", T::gauge,
             "SM utilization by the process on the GPU, 0-1 (NVML's per-process samples, the highest of the bridge's "
             "last tick)");
    m.family("gpuscope_process_gpu_memory_utilization_ratio", T::gauge,
             "Memory controller utilization by the process on the GPU, 0-1");
    m.family("gpuscope_process_gpu_memory_used_bytes", T::gauge, "Device memory the process holds on the GPU (NVML)");
    each([&](const Proc& p) {
      for (auto& [gpu, g] : p.on_gpus) {
        const PromLabels d{{"gpu", std::to_string(gpu)}};
        m.add("gpuscope_process_gpu_utilization_ratio", plabels(p), d, g.sm_util_pct / 100.0);
        m.add("gpuscope_process_gpu_memory_utilization_ratio", plabels(p), d, g.mem_util_pct / 100.0);
        m.add("gpuscope_process_gpu_memory_used_bytes", plabels(p), d, static_cast<double>(g.used_gpu_memory_bytes));
      }
    });
  }
  m.family("gpuscope_events_lost_total", T::counter,
           "Events or calls a collector could not record, by collector and reason");
  for (auto& [k, n] : in.lost)
    m.add("gpuscope_events_lost_total", {{"collector", k.first}, {"reason", k.second}}, static_cast<double>(n));
  m.family("gpuscope_collector_up", T::gauge, "1 when the collector runs; /api/health says why not");
  for (auto& c : in.collectors) m.add("gpuscope_collector_up", {{"collector", c.name}}, c.up ? 1 : 0);
  m.family("gpuscope_exported_processes", T::gauge, "Processes with series, by state");
  m.add("gpuscope_exported_processes", {{"state", "running"}}, static_cast<double>(live_.size()));
  m.add("gpuscope_exported_processes", {{"state", "exited"}}, static_cast<double>(gone_.size()));
  if (in.anomalies) in.anomalies->add_metrics(m);
  if (in.governor) in.governor->add_metrics(m);
  if (in.programs) {
    m.family("gpuscope_bpf_program_runs_total", T::counter,
             "Runs of each of the agent's BPF programs, by program name, while kernel.bpf_stats_enabled is 1");
    m.family("gpuscope_bpf_program_run_seconds_total", T::counter,
             "Time in each of the agent's BPF programs, by program name, while kernel.bpf_stats_enabled is 1");
    for (auto& [name, s] : *in.programs) {
      m.add("gpuscope_bpf_program_runs_total", {{"program", name}}, static_cast<double>(s.runs));
      m.add("gpuscope_bpf_program_run_seconds_total", {{"program", name}}, static_cast<double>(s.run_time_ns) / 1e9);
    }
  }
  add_process_metrics(m);
  *series = m.series();
  return m.text();
}

std::string AgentView::render_processes() {
  std::map<uint32_t, uint64_t> starving;
  for (auto& [k, t] : starving_) starving[k.first] += t.cpu_ns;
  fmt::memory_buffer b;
  JsonLine j(b);
  j.begin_array("processes");
  auto one = [&](const Proc& p) {
    j.begin_object();
    j.num("pid", p.pid).str("comm", p.comm).str("container", p.labels.container).str("pod", p.labels.pod);
    j.str("namespace", p.labels.ns).str("state", p.exited ? "exited" : "running");
    uint64_t launches = 0;
    for (auto& [_, n] : p.kernels) launches += n;
    j.num("kernel_launches", launches).num("graph_launches", p.graph_launches).num("kernels", p.kernels.size());
    if (p.has_mem) {
      j.num("outstanding_bytes", p.mem.outstanding_bytes).num("outstanding_allocs", p.mem.outstanding_allocs);
      j.num("pinned_bytes", p.mem.pinned_bytes).num("allocs_ok", p.mem.allocs_ok);
      j.num("allocs_failed", p.mem.allocs_failed).num("frees_ok", p.mem.frees_ok).num("bad_frees", p.mem.bad_frees);
    }
    if (p.has_ioctl) j.num("ioctl_calls", p.ioctl_calls).num("ioctl_errors", p.ioctl_errors);
    if (auto s = starving.find(p.pid); s != starving.end()) j.num("starving_cpu_ns", s->second);
    if (!p.on_gpus.empty()) {
      j.begin_array("gpus");
      for (auto& [gpu, g] : p.on_gpus) {
        j.begin_object().num("gpu", gpu).real("sm_utilization_ratio", g.sm_util_pct / 100.0, 2);
        j.real("memory_utilization_ratio", g.mem_util_pct / 100.0, 2).num("memory_used_bytes", g.used_gpu_memory_bytes);
        j.end_object();
      }
      j.end_array();
    }
    if (p.has_gpu) {
      j.begin_array("gpu_busy");
      for (auto& [dev, ns] : p.gpu_busy_ns) j.begin_object().num("device", dev).num("busy_ns", ns).end_object();
      j.end_array();
    }
    j.end_object();
  };
  for (auto& [_, p] : live_) one(p);
  for (auto& p : gone_) one(p);
  j.end_array().end();
  return body(b);
}

std::string AgentView::render_kernels() {
  fmt::memory_buffer b;
  JsonLine j(b);
  j.begin_array("kernels");
  auto one = [&](const Proc& p) {
    uint64_t other = 0;
    std::vector<std::pair<uint64_t, const KernelKey*>> v;
    for (auto& [k, n] : p.kernels)
      if (p.named.count(k))
        v.push_back({n, &k});
      else
        other += n;
    std::sort(v.begin(), v.end(), [](auto& a, auto& c) { return a.first > c.first; });
    // GPU time goes on the first row of its kernel's name, under the same top-N rule as /metrics.
    std::set<std::string> gpu_done;
    KernelGpuTime gpu_other;
    for (auto& [k, t] : p.gpu_kernels)
      if (!p.gpu_named.count(k)) gpu_other += t;
    bool has_gpu_other = p.gpu_kernels.size() > p.gpu_named.size();
    auto row = [&](const std::string& k, const std::string& mod, uint64_t n, const KernelGpuTime* g) {
      j.begin_object().num("pid", p.pid).str("comm", p.comm).str("container", p.labels.container);
      j.str("kernel", k).str("module", mod).num("launches", n);
      if (g) {
        j.num("gpu_kernels", g->count).num("gpu_time_ns", g->total_ns);
        j.num("gpu_mean_ns", g->count ? g->total_ns / g->count : 0).num("gpu_max_ns", g->max_ns);
      }
      j.end_object();
    };
    auto gpu_of = [&](const std::string& k) -> const KernelGpuTime* {
      if (!p.gpu_named.count(k) || !gpu_done.insert(k).second) return nullptr;
      return &p.gpu_kernels.at(k);
    };
    for (auto& [n, k] : v) row(k->first, k->second, n, gpu_of(k->first));
    // Kernels timed on the GPU that no counted launch names (launched before the agent came).
    for (auto& k : p.gpu_named)
      if (!gpu_done.count(k)) row(k, "", 0, &p.gpu_kernels.at(k));
    if (p.kernels.size() > p.named.size() || has_gpu_other)
      row("other", "", other, has_gpu_other ? &gpu_other : nullptr);
  };
  for (auto& [_, p] : live_) one(p);
  for (auto& p : gone_) one(p);
  j.end_array().end();
  return body(b);
}

std::string AgentView::render_leaks() {
  fmt::memory_buffer b;
  JsonLine j(b);
  j.begin_array("leaks");
  for (auto& r : leak_reports_) {
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
  for (auto& [k, t] : leaked_)
    j.begin_object()
        .str("comm", k.first)
        .str("container", k.second)
        .num("leaked_bytes", t.bytes)
        .num("leaked_allocations", t.allocations)
        .end_object();
  j.end_array().end();
  return body(b);
}

std::string AgentView::render_health(const AgentInput& in, size_t series) {
  fmt::memory_buffer b;
  JsonLine j(b);
  bool all = true;
  j.begin_array("collectors");
  for (auto& c : in.collectors) {
    all = all && c.up;
    j.begin_object().str("name", c.name).boolean("up", c.up);
    if (!c.up) j.str("why", c.why);
    j.end_object();
  }
  j.end_array();
  j.begin_array("events_lost");
  for (auto& [k, n] : in.lost)
    j.begin_object().str("collector", k.first).str("reason", k.second).num("events", n).end_object();
  j.end_array();
  uint64_t scrapes;
  {
    std::lock_guard g(mu_);
    scrapes = scrapes_;
  }
  j.str("status", all ? "ok" : "degraded").num("series", series).num("scrapes", scrapes);
  j.num("processes_running", live_.size()).num("processes_exited", gone_.size());
  if (in.governor) {
    j.begin_object("governor").num("level", in.governor->level()).real("cpu_percent", in.governor->cpu_percent(), 2);
    j.begin_array("reduced");
    for (unsigned i = 0; i < in.governor->level(); i++) j.str(in.governor->steps()[i].name);
    j.end_array().end_object();
  }
  j.end();
  return body(b);
}

void add_process_metrics(PromSet& m) {
  static const long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  std::string stat = read_file("/proc/self/stat");
  size_t rp = stat.rfind(')');
  std::vector<std::string> f;
  if (rp != std::string::npos) {
    std::istringstream ss(stat.substr(rp + 2));
    for (std::string s; ss >> s;) f.push_back(s);
  }
  // Fields from state (3) on: utime 14, stime 15, starttime 22, vsize 23, rss 24.
  auto field = [&](int n) { return n - 3 < static_cast<int>(f.size()) ? std::stod(f[n - 3]) : 0.0; };
  m.family("process_cpu_seconds_total", T::counter, "User and system CPU time of the agent, in seconds");
  m.add("process_cpu_seconds_total", {}, (field(14) + field(15)) / tick);
  m.family("process_resident_memory_bytes", T::gauge, "Resident memory of the agent, in bytes");
  m.add("process_resident_memory_bytes", {}, field(24) * page);
  m.family("process_virtual_memory_bytes", T::gauge, "Virtual memory of the agent, in bytes");
  m.add("process_virtual_memory_bytes", {}, field(23));
  double boot = 0;
  std::istringstream st(read_file("/proc/stat"));
  for (std::string line; std::getline(st, line);)
    if (line.rfind("btime ", 0) == 0) boot = std::stod(line.substr(6));
  m.family("process_start_time_seconds", T::gauge, "Start time of the agent since the Unix epoch, in seconds");
  m.add("process_start_time_seconds", {}, boot + field(22) / tick);
  size_t fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') fds++;
    closedir(d);
    fds--;  // the directory stream's own
  }
  m.family("process_open_fds", T::gauge, "Open file descriptors of the agent (BPF maps, programs and links included)");
  m.add("process_open_fds", {}, static_cast<double>(fds));
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  m.family("process_max_fds", T::gauge, "The agent's limit of open file descriptors");
  m.add("process_max_fds", {}, static_cast<double>(rl.rlim_cur));
}

}  // namespace gpuscope

#include "cmd/agent/anomaly.h"

#include <fmt/format.h>

#include <chrono>

#include "core/output.h"

namespace gpuscope {

namespace {
constexpr size_t kRecent = 200;  // events kept for /api/anomalies

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

std::vector<AnomalyEvent> AnomalyRules::observe(const std::vector<ProcMem>& procs,
                                                const std::map<std::string, uint64_t>& errors, double dt_s) {
  std::vector<AnomalyEvent> out;
  double now = unix_now();
  // Holders as of the previous refresh: a process that allocates in the same interval as
  // another is not said to have taken memory the other already held.
  std::map<uint32_t, uint64_t> held_before;
  for (auto& [pid, s] : procs_)
    if (s.last_bytes) held_before[pid] = s.last_bytes;
  std::map<uint32_t, ProcState> next;
  for (auto& p : procs) {
    auto it = procs_.find(p.pid);
    bool known = it != procs_.end();
    ProcState s = known ? it->second : ProcState{};
    // Said of the process whose memory crosses the limit, not of the one that held it first.
    bool crossed = (!known || s.last_bytes < cfg_.alloc_alert_bytes) && p.gpu_bytes >= cfg_.alloc_alert_bytes;
    if (crossed) {
      for (auto& [other, bytes] : held_before) {
        if (other == p.pid) continue;
        AnomalyEvent e{"unexpected_allocation", now, p.pid, p.comm, "", p.gpu_bytes, other};
        e.detail = fmt::format("pid {} ({}) holds {} bytes of GPU memory, over {}, while pid {} already held {}", p.pid,
                               p.comm, p.gpu_bytes, cfg_.alloc_alert_bytes, other, bytes);
        out.push_back(std::move(e));
        break;
      }
    }
    if (known && p.gpu_bytes > s.last_bytes) {
      s.rises++;
    } else if (known && p.gpu_bytes < s.last_bytes) {
      s.rises = 0;
      s.grew_fired = false;
    }
    if (s.rises >= cfg_.growth_intervals && !s.grew_fired) {
      AnomalyEvent e{"memory_growth", now, p.pid, p.comm, "", p.gpu_bytes};
      e.detail = fmt::format("pid {} ({}): GPU memory rose in {} refreshes without a fall, now {} bytes", p.pid, p.comm,
                             s.rises, p.gpu_bytes);
      out.push_back(std::move(e));
      s.grew_fired = true;
    }
    s.last_bytes = p.gpu_bytes;
    next[p.pid] = s;
  }
  procs_ = std::move(next);  // exited processes' state goes with them

  for (auto& [api, n] : errors) {
    auto it = errors_.find(api);
    uint64_t before = it == errors_.end() ? 0 : it->second;  // totals since the agent started
    double rate = dt_s > 0 && n >= before ? static_cast<double>(n - before) / dt_s : 0;
    if (rate > cfg_.error_burst_per_s) {
      if (bursting_.insert(api).second) {
        AnomalyEvent e{"error_burst", now};
        e.api = api;
        e.rate_per_s = rate;
        e.detail = fmt::format("{} failed {:.0f} times a second (limit {:g})", api, rate, cfg_.error_burst_per_s);
        out.push_back(std::move(e));
      }
    } else {
      bursting_.erase(api);
    }
  }
  errors_ = errors;

  std::lock_guard g(mu_);
  for (auto& e : out) {
    counts_[e.rule]++;
    recent_.push_back(e);
    if (recent_.size() > kRecent) recent_.pop_front();
  }
  return out;
}

void AnomalyRules::add_metrics(PromSet& m) const {
  m.family("gpuscope_anomalies_total", PromSet::Type::counter,
           "Anomalies the agent's rules found, by rule; /api/anomalies has the latest");
  std::lock_guard g(mu_);
  for (const char* r : kRules) {
    auto it = counts_.find(r);
    m.add("gpuscope_anomalies_total", {{"rule", r}}, static_cast<double>(it == counts_.end() ? 0 : it->second));
  }
}

std::string AnomalyRules::json() const {
  fmt::memory_buffer b;
  JsonLine j(b);
  std::lock_guard g(mu_);
  j.begin_array("anomalies");
  for (auto& e : recent_) {
    j.begin_object().str("rule", e.rule).real("time_s", e.time_s, 3);
    if (e.pid) j.num("pid", e.pid).str("comm", e.comm);
    if (e.rule != "error_burst") j.num("bytes", e.bytes);
    if (e.other_pid) j.num("other_pid", e.other_pid);
    if (!e.api.empty()) j.str("api", e.api).real("rate_per_s", e.rate_per_s, 1);
    j.str("detail", e.detail).end_object();
  }
  j.end_array();
  j.begin_object("totals");
  for (const char* r : kRules) {
    auto it = counts_.find(r);
    j.num(r, it == counts_.end() ? 0 : it->second);
  }
  j.end_object().end();
  return std::string(b.data(), b.size());
}

}  // namespace gpuscope

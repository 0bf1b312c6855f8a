#include "cmd/agent/agent.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "core/bpf.h"
#include "core/output.h"
#include "core/symbol_table.h"
#include "core/system.h"
#include "core/uprobe_session.h"

namespace gpuscope {

namespace {

using T = PromSet::Type;

std::string body(fmt::memory_buffer& b) { return std::string(b.data(), b.size()); }

}  // namespace

Agent::Agent(const AgentOptions& o, std::vector<std::unique_ptr<AgentCollector>> wanted, UprobeSession* session)
    : o_(o),
      session_(session),
      procs_(o.scope.containers, o.retain_s),
      host_{o, session, procs_,
            [](const std::string& c, const std::string& line) {
              fprintf(stderr, "gpuscope: agent: %s: %s\n", c.c_str(), line.c_str());
            },
            services_},
      anomalies_(o.anomaly) {
  for (auto& c : wanted) slots_.push_back({std::move(c)});
  for (auto& s : slots_) s.c->plan(services_);
}

Agent::~Agent() = default;

void Agent::check() const {
  for (auto& s : slots_) s.c->check(o_);
}

void Agent::off(Slot& s, const std::string& why) {
  s.running = false;
  s.why = why;
  services_.withdraw(s.c.get());
  fprintf(stderr, "gpuscope: agent: collector %s is off: %s\n", std::string(s.c->name()).c_str(), why.c_str());
}

void Agent::load(Slot& s) {
  try {
    s.c->load(host_);
    s.running = true;
  } catch (const std::exception& e) {
    off(s, e.what());
  }
}

void Agent::start_session() {
  bool any = false;
  for (auto& s : slots_) any = any || (s.running && s.c->uses_session());
  if (!any || !session_) return;
  try {
    session_->start();
    session_started_ = true;
  } catch (const UsageError&) {
    throw;  // a --lib none of whose probes attach, before the bridge pins anything
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuscope: agent: no uprobes attached: %s\n", e.what());
    for (auto& s : slots_)
      if (s.running && s.c->uses_session()) {
        s.running = false;
        s.why = e.what();
        services_.withdraw(s.c.get());
      }
  }
}

void Agent::start(EventLoop* loop) {
  // The session's collectors first: the session starts (and a bad --lib is refused) before the
  // others load, the bridge among them, which pins.
  for (auto& s : slots_)
    if (s.c->uses_session()) load(s);
  start_session();
  for (auto& s : slots_)
    if (!s.c->uses_session()) load(s);
  if (!loop) return;
  for (auto& s : slots_) {
    if (!s.running) continue;
    try {
      s.c->start(host_, *loop);
    } catch (const std::exception& e) {
      off(s, e.what());
    }
  }
  if (session_started_) session_->watch(*loop, false);
}

void Agent::stop() {
  {
    // Each detach waits for an RCU grace period: the collectors' probes go while the session's do.
    std::vector<std::jthread> detaching;
    for (auto* c : running()) detaching.emplace_back([c] { c->detach(); });
    if (session_started_) session_->detach();
  }
  for (auto* c : running()) c->drain();
  refresh();
  for (auto* c : running()) c->finish();
}

std::vector<AgentCollector*> Agent::running() const {
  std::vector<AgentCollector*> v;
  for (auto& s : slots_)
    if (s.running) v.push_back(s.c.get());
  return v;
}

std::string Agent::running_names() const {
  std::string up;
  for (auto* c : running()) up += (up.empty() ? "" : ",") + c->describe();
  return up;
}

void Agent::observe_anomalies() {
  AnomalyInput in;
  for (auto* c : running()) c->observe(in);
  auto now = std::chrono::steady_clock::now();
  double dt = std::chrono::duration<double>(now - last_refresh_).count();
  last_refresh_ = now;
  for (auto& e : anomalies_.observe(in.procs, in.errors, dt)) {
    fprintf(stderr, "gpuscope: agent: anomaly %s: %s\n", e.rule.c_str(), e.detail.c_str());
    if (on_anomaly_) on_anomaly_(e);
  }
}

void Agent::refresh() {
  auto t0 = std::chrono::steady_clock::now();
  if (session_started_) session_->rescan_noticed();  // those deferred by the governor
  procs_.begin();
  auto run = running();
  for (auto* c : run) c->take();
  RefreshSeq r;
  {
    std::lock_guard g(mu_);
    r.scraped = scraped_seq_;
  }
  r.seq = ++seq_;
  procs_.end(r.seq, r.scraped, [&](const ProcEntry& e) {
    for (auto* c : run) c->fold(e);
  });
  for (auto* c : run) c->settle(r);
  observe_anomalies();

  auto pub = std::make_shared<Published>();
  pub->seq = r.seq;
  pub->metrics = render_metrics(&pub->series);
  pub->processes = render_processes();
  pub->health = render_health(pub->series);
  pub->anomalies = anomalies_.json();
  for (auto* c : run) c->endpoints(pub->endpoints);
  render_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard g(mu_);
    pub_ = std::move(pub);
  }
  // Refreshes, rescans and symbol tables dropped with their processes free memory all through the
  // heap, which glibc keeps unless told (11.6 MB of 24 beside PyTorch on the H200): given back at
  // most every 10 s, when over 4 MiB lies free (a trim walks the heap: about a millisecond).
  if (auto now = std::chrono::steady_clock::now(); now - last_trim_ >= std::chrono::seconds(10)) {
    last_trim_ = now;
    if (mallinfo2().fordblks > (4u << 20)) malloc_trim(0);
  }
}

size_t Agent::series() const {
  std::lock_guard g(mu_);
  return pub_ ? pub_->series : 0;
}

HttpReply Agent::serve(const std::string& path) {
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
  const std::map<std::string, const std::string*> own = {
      {"/api/processes", &pub->processes}, {"/api/health", &pub->health}, {"/api/anomalies", &pub->anomalies}};
  r.content_type = "application/json";
  if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = pub->metrics;
  } else if (auto it = own.find(path); it != own.end()) {
    r.body = *it->second;
  } else if (auto e = pub->endpoints.find(path); e != pub->endpoints.end()) {
    r.content_type = e->second.content_type;
    r.body = e->second.body;
  } else {
    r.content_type = "text/plain; charset=utf-8";
    std::string paths = "/metrics /api/processes /api/anomalies /api/health";
    for (auto& s : slots_)
      for (auto& p : s.c->paths()) {
        paths += " " + p;
        if (p == path) {
          r.status = 503;
          r.body = "the " + std::string(s.c->name()) + " collector is off; /api/health says why\n";
        }
      }
    if (r.status == 503) return r;
    r.status = path == "/" ? 200 : 404;
    r.body = path == "/" ? "gpuscope agent: " + paths + "\n" : "not found\n";
  }
  return r;
}

std::map<std::pair<std::string, std::string>, uint64_t> Agent::lost() const {
  std::map<std::pair<std::string, std::string>, uint64_t> out;
  for (auto* c : running()) {
    LostCounts l;
    c->lost(l);
    for (auto& [reason, n] : l) out[{std::string(c->name()), reason}] = n;
  }
  if (session_) out[{"session", "notices_lost"}] = session_->stats().notices_lost;
  return out;
}

std::string Agent::render_metrics(size_t* series) {
  PromSet m;
  for (auto* c : running()) c->metrics(m);
  m.family("gpuscope_events_lost_total", T::counter,
           "Events or calls a collector could not record, by collector and reason");
  for (auto& [k, n] : lost())
    m.add("gpuscope_events_lost_total", {{"collector", k.first}, {"reason", k.second}}, static_cast<double>(n));
  m.family("gpuscope_collector_up", T::gauge, "1 when the collector runs; /api/health says why not");
  for (auto& s : slots_)
    m.add("gpuscope_collector_up", {{"collector", std::string(s.c->name())}}, s.running && s.c->health().up ? 1 : 0);
  m.family("gpuscope_exported_processes", T::gauge, "Processes with series, by state");
  m.add("gpuscope_exported_processes", {{"state", "running"}}, static_cast<double>(procs_.running_count()));
  m.add("gpuscope_exported_processes", {{"state", "exited"}}, static_cast<double>(procs_.exited_count()));
  anomalies_.add_metrics(m);
  if (governor_) governor_->add_metrics(m);
  // The agent's BPF programs by name; nothing is counted while kernel.bpf_stats_enabled is 0.
  if (bpf_stats_enabled()) {
    m.family("gpuscope_bpf_program_runs_total", T::counter,
             "Runs of each of the agent's BPF programs, by program name, while kernel.bpf_stats_enabled is 1");
    m.family("gpuscope_bpf_program_run_seconds_total", T::counter,
             "Time in each of the agent's BPF programs, by program name, while kernel.bpf_stats_enabled is 1");
    for (auto& [name, s] : own_program_stats()) {
      m.add("gpuscope_bpf_program_runs_total", {{"program", name}}, static_cast<double>(s.runs));
      m.add("gpuscope_bpf_program_run_seconds_total", {{"program", name}}, static_cast<double>(s.run_time_ns) / 1e9);
    }
  }
  add_process_metrics(m);
  *series = m.series();
  return m.text();
}

std::string Agent::render_processes() const {
  fmt::memory_buffer b;
  JsonLine j(b);
  j.begin_array("processes");
  auto run = running();
  procs_.each([&](const ProcEntry& p) {
    j.begin_object();
    j.num("pid", p.pid).str("comm", p.comm).str("container", p.labels.container).str("pod", p.labels.pod);
    j.str("namespace", p.labels.ns).str("state", p.exited ? "exited" : "running");
    for (auto* c : run) c->process_json(p, j);
    j.end_object();
  });
  j.end_array().end();
  return body(b);
}

std::string Agent::render_health(size_t series) {
  fmt::memory_buffer b;
  JsonLine j(b);
  bool all = true;
  j.begin_array("collectors");
  for (auto& s : slots_) {
    CollectorHealth h = s.running ? s.c->health() : CollectorHealth{false, s.why};
    all = all && h.up;
    j.begin_object().str("name", std::string(s.c->name())).boolean("up", h.up);
    if (!h.up) j.str("why", h.why);
    j.end_object();
  }
  j.end_array();
  j.begin_array("events_lost");
  for (auto& [k, n] : lost())
    j.begin_object().str("collector", k.first).str("reason", k.second).num("events", n).end_object();
  j.end_array();
  uint64_t scrapes;
  {
    std::lock_guard g(mu_);
    scrapes = scrapes_;
  }
  j.str("status", all ? "ok" : "degraded").num("series", series).num("scrapes", scrapes);
  j.num("processes_running", procs_.running_count()).num("processes_exited", procs_.exited_count());
  if (governor_) {
    j.begin_object("governor").num("level", governor_->level()).real("cpu_percent", governor_->cpu_percent(), 2);
    j.begin_array("reduced");
    for (unsigned i = 0; i < governor_->level(); i++) j.str(governor_->steps()[i].name);
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
  add_memory_metrics(m);
}

// Where the agent's resident memory goes, beside process_resident_memory_bytes.
void add_memory_metrics(PromSet& m) {
  struct mallinfo2 mi = mallinfo2();
  // An allocator other than glibc's (ASAN's, a preloaded one) answers mallinfo2 with zeros:
  // no series then, rather than a heap of 0 bytes.
  if (mi.arena != 0 || mi.hblkhd != 0) {
    m.family("gpuscope_heap_bytes", T::gauge,
             "The agent's malloc heap: in use in its arenas, in use in blocks mapped on their own, and "
             "free but not given back to the system");
    m.add("gpuscope_heap_bytes", {{"state", "in_use"}}, static_cast<double>(mi.uordblks));
    m.add("gpuscope_heap_bytes", {{"state", "mmapped"}}, static_cast<double>(mi.hblkhd));
    m.add("gpuscope_heap_bytes", {{"state", "free"}}, static_cast<double>(mi.fordblks));
  }
  m.family("gpuscope_symbol_tables", T::gauge,
           "ELF symbol tables held (one per library file mapped by a traced process)");
  m.add("gpuscope_symbol_tables", {}, static_cast<double>(SymbolTable::live()));
  m.family("gpuscope_symbol_table_bytes", T::gauge, "Heap bytes of the symbol tables held");
  m.add("gpuscope_symbol_table_bytes", {}, static_cast<double>(SymbolTable::live_bytes()));
}

}  // namespace gpuscope

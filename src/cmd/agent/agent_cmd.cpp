// gpuscope agent: the collectors always on, served as Prometheus metrics and a JSON API.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "cmd/agent/agent.h"
#include "cmd/agent/registry.h"
#include "cmd/agent/http.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "core/where.h"

namespace gpuscope {

namespace {

struct AgentCommand {
  AgentOptions o;
  std::vector<std::unique_ptr<AgentCollector>> all = make_agent_collectors();
};

std::string known_collectors(const AgentCommand& a) {
  std::string s;
  for (auto& c : a.all) s += (s.empty() ? "" : ",") + std::string(c->name());
  return s;
}

// --collectors: the registered ones named, in registry order.
std::vector<std::unique_ptr<AgentCollector>> take_wanted(AgentCommand& a) {
  std::vector<std::string> names;
  std::stringstream ss(a.o.collectors.empty() ? known_collectors(a) : a.o.collectors);
  for (std::string c; std::getline(ss, c, ',');) {
    if (c.empty()) continue;
    if (std::none_of(a.all.begin(), a.all.end(), [&](auto& x) { return x->name() == c; }))
      throw UsageError("unknown collector '" + c + "' in --collectors; known: " + known_collectors(a));
    names.push_back(c);
  }
  if (names.empty()) throw UsageError("--collectors must name at least one collector");
  std::vector<std::unique_ptr<AgentCollector>> wanted;
  for (auto& c : a.all)
    if (std::find(names.begin(), names.end(), c->name()) != names.end()) wanted.push_back(std::move(c));
  return wanted;
}

// The HTTP thread starts with SIGINT and SIGTERM blocked: they go to the loop thread only.
std::unique_ptr<HttpServer> serve_http(const std::string& listen, Agent& agent) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  std::unique_ptr<HttpServer> http;
  try {
    http = std::make_unique<HttpServer>(listen, [&agent](const std::string& p) { return agent.serve(p); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return http;
}

void json_line(const std::function<void(JsonLine&)>& fill) {
  fmt::memory_buffer b;
  JsonLine j(b);
  fill(j);
  j.end();
  fwrite(b.data(), 1, b.size(), stdout);
  fflush(stdout);
}

// Past --max-cpu-percent the governor cuts, in order: the collectors' sampling rates, the
// refreshes (the collectors' map walks and rendering), then the work done per event (exits, new
// processes), batched into the refresh.
std::unique_ptr<Governor> make_governor(const AgentOptions& o, Agent& agent, UprobeSession& session, EventLoop& loop,
                                        unsigned& refresh_every) {
  std::vector<Governor::Step> steps;
  for (auto* c : agent.running())
    if (auto s = c->sampling_step(); !s.empty()) steps.push_back({s, 4});
  const unsigned sampling = steps.size();
  steps.push_back({"refresh every 4th interval", 4});
  steps.push_back({"refresh every 16th interval", 4});
  steps.push_back({"events read every 50 ms, exits and new processes handled at the refresh, in batches", 1});
  auto on_change = [&, sampling](unsigned level) {
    bool defer = level >= sampling + 3;
    for (auto* c : agent.running()) c->reduce_sampling(level >= 1 && sampling), c->defer_events(defer);
    refresh_every = level >= sampling + 2 ? 16 : level >= sampling + 1 ? 4 : 1;
    if (agent.session_started()) session.defer_rescans(defer);
    loop.set_min_wakeup_gap(defer ? 0.05 : 0);
  };
  return std::make_unique<Governor>(Governor::Config{o.max_cpu_percent, std::max(2.0, 4 * o.interval_s), 3}, steps,
                                    on_change, Governor::Sources{agent_cpu_source(), nullptr});
}

int run_agent(AgentCommand& a) {
  const AgentOptions& o = a.o;
  parse_listen(o.listen);
  o.scope.validate();
  UprobeSession session(o.scope, o.common.verbose);
  session.name_processes_early(false);
  Agent agent(o, take_wanted(a), &session);
  agent.check();
  auto http = serve_http(o.listen, agent);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  session.open_libs();  // a bad --lib is bad input, as in the subcommands: refused before anything loads
  // Exec and dlopen notices find new CUDA processes; the full rescan only backs them up.
  session.set_full_rescan_period(std::chrono::seconds(15));
  EventLoop loop(o.common.duration_s);
  agent.start(&loop);
  WhereView where(o.scope);
  if (o.common.json)
    agent.on_anomaly([&where](const AnomalyEvent& e) {
      json_line([&](JsonLine& j) {
        j.record("anomaly", static_cast<uint64_t>(e.time_s * 1e9));
        // error_burst is counted per API, over every process.
        if (e.pid) where.process(j, static_cast<pid_t>(e.pid), e.comm);
        j.str("rule", e.rule)
            .num("bytes", e.bytes)
            .num("other_pid", e.other_pid)
            .str("api", e.api)
            .real("rate_per_s", e.rate_per_s, 1);
        j.str("detail", e.detail);
      });
    });
  unsigned refresh_every = 1, ticks = 0;
  std::unique_ptr<Governor> governor;
  if (o.max_cpu_percent > 0) governor = make_governor(o, agent, session, loop, refresh_every);
  agent.set_governor(governor.get());
  agent.refresh();
  loop.every(o.interval_s, [&] {
    if (governor) governor->tick();
    if (++ticks % refresh_every == 0) agent.refresh();
  });
  auto st = session.stats();
  std::string up = agent.running_names();
  if (o.common.json)
    json_line([&](JsonLine& j) {
      j.record("agent", realtime_ns()).str("listen", o.listen).num("port", http->port()).str("collectors", up);
      j.num("probes", st.probes);
    });
  fprintf(stderr,
          "gpuscope: agent listening on %s (port %d), collectors: %s; %zu probes in %zu CUDA objects. Ctrl-C to "
          "end.\n",
          o.listen.c_str(), http->port(), up.empty() ? "none" : up.c_str(), st.probes, st.objects);
  loop.run();
  agent.stop();
  http.reset();
  if (o.common.json)
    json_line([&](JsonLine& j) {
      j.record("agent_end", realtime_ns()).num("series", agent.series()).real("render_s", agent.render_s(), 6);
    });
  return 0;
}

void add_agent_flags(CLI::App* cmd, AgentOptions& o) {
  cmd->add_option("--listen", o.listen, "ADDR:PORT to serve HTTP on (default 127.0.0.1:9400, loopback only)")
      ->type_name("ADDR:PORT");
  add_number(cmd, "--max-kernels-per-process", o.max_kernels,
             "Kernel series per process; the rest are summed in kernel=\"other\" (default 50)", "kernels", 1, 100000);
  add_number(cmd, "--interval", o.interval_s, "Refresh what is served every SECONDS (default 1)", "seconds", 0.05,
             3600);
  add_number(cmd, "--retain-exited", o.retain_s,
             "Drop an exited process's series after SECONDS even if no scrape saw them (default 60)", "seconds", 0,
             86400);
  cmd->add_option("--bridge-pin-dir", o.pin_dir,
                  "Where a gpuscope bridge pins its maps; with none publishing there, the agent runs one (default "
                  "/sys/fs/bpf)");
  cmd->add_option("--nvml", o.nvml, "NVML library, for the GPUs' UUID and model name (default libnvidia-ml.so.1)");
  add_number(cmd, "--alloc-alert-bytes", o.anomaly.alloc_alert_bytes,
             "Anomaly: a process holding more GPU memory than BYTES while another holds some (default 1 GiB)", "bytes",
             1, 1e15);
  add_number(cmd, "--growth-intervals", o.anomaly.growth_intervals,
             "Anomaly: GPU memory rising over N refreshes without a fall (default 30)", "refreshes", 2, 100000);
  add_number(cmd, "--error-burst-rate", o.anomaly.error_burst_per_s,
             "Anomaly: failed calls of one CUDA API per second above RATE (default 50)", "per second", 0.001, 1e9);
  cmd->add_option_function<std::string>(
         "--max-cpu-percent",
         [&o](const std::string& v) {
           auto fail = [] {
             throw UsageError(
                 "--max-cpu-percent must be a number of percent of one core between 0.1 and 10000, or 0 (off)");
           };
           double p = 0;
           try {
             p = parse_number("--max-cpu-percent", v, "percent", 0, 10000, false);
           } catch (const UsageError&) {
             fail();
           }
           // Below 0.1 % of a core the governor would only chase the noise of its own measurement.
           if (p != 0 && p < 0.1) fail();
           o.max_cpu_percent = p;
         },
         "Governor: the agent's CPU limit in percent of one core, 0.1 to 10000; past it the agent does less "
         "(default 2, 0: off)")
      ->type_name("PERCENT");
}

}  // namespace

void register_agent(CLI::App& app) {
  auto a = std::make_shared<AgentCommand>();  // held by the command registry until exit
  auto* cmd = app.add_subcommand("agent", "Run the collectors continuously; serve Prometheus /metrics and a JSON API");
  add_common_flags(cmd, a->o.common);
  add_scope_flags(cmd, a->o.scope);
  cmd->add_option("--collectors", a->o.collectors, "Comma-separated collectors (default " + known_collectors(*a) + ")")
      ->type_name("LIST");
  add_agent_flags(cmd, a->o);
  for (auto& c : a->all) c->add_flags(cmd);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope agent                                  # every process, http://127.0.0.1:9400/metrics\n"
      "  gpuscope agent --listen 0.0.0.0:9400 --collectors kernels,memleak\n"
      "  curl -s 127.0.0.1:9400/api/health");
  add_command(cmd, [a] { return run_agent(*a); });
}
GPUSCOPE_COMMAND(register_agent, 100);

}  // namespace gpuscope

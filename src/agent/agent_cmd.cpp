// gpuscope agent: the collectors always on, served as Prometheus metrics and a JSON API.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "agent/agent.h"
#include "agent/http.h"
#include "core/cli.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"

namespace gpuscope {

namespace {

struct AgentOptions {
  CommonFlags common;
  Scope scope;
  std::string listen = "127.0.0.1:9400";
  std::string collectors = "kernels,memleak,latency,bridge";
  std::string pin_dir = "/sys/fs/bpf";
  std::string nvml = "libnvidia-ml.so.1";
  unsigned max_kernels = 50;
  double interval_s = 1;
  double retain_s = 60;
  std::string pods_dir = "/var/log/pods";
  AnomalyConfig anomaly;
  double max_cpu_percent = 2;  // 0: governor off
};

const std::vector<std::string> kServed = {"kernels", "memleak", "latency", "bridge"};
// Collectors of gpuscope that the agent does not run yet: accepted, reported down.
const std::vector<std::string> kNotYet = {"ioctl", "starvation"};

std::vector<std::string> parse_collectors(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string c; std::getline(ss, c, ',');) {
    if (c.empty()) continue;
    bool known = std::find(kServed.begin(), kServed.end(), c) != kServed.end() ||
                 std::find(kNotYet.begin(), kNotYet.end(), c) != kNotYet.end();
    if (!known)
      throw UsageError("unknown collector '" + c + "' in --collectors; known: kernels, memleak, latency, bridge, " +
                       "ioctl, starvation");
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  if (out.empty()) throw UsageError("--collectors must name at least one collector");
  return out;
}

bool wanted(const std::vector<std::string>& v, const char* c) { return std::find(v.begin(), v.end(), c) != v.end(); }

int run_agent(const AgentOptions& o) {
  auto names = parse_collectors(o.collectors);
  parse_listen(o.listen);
  o.scope.validate();
  AgentView view({o.max_kernels, o.retain_s, o.pods_dir});
  // Signals go to the loop thread only: the HTTP thread is started with them blocked.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  std::unique_ptr<HttpServer> http;
  try {
    http = std::make_unique<HttpServer>(o.listen, [&view](const std::string& p) { return view.serve(p); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);

  std::vector<CollectorStatus> status;
  auto down = [&](const std::string& n, const std::string& why) {
    status.push_back({n, false, why});
    fprintf(stderr, "gpuscope: agent: collector %s is off: %s\n", n.c_str(), why.c_str());
  };
  UprobeSession session(o.scope, o.common.verbose);
  std::unique_ptr<KernelsCollector> kernels;
  std::unique_ptr<MemleakCollector> memleak;
  std::unique_ptr<LatencyCollector> latency;
  // A collector that cannot load is off, with its reason; the others carry on.
  auto start = [&](const char* n, auto make) {
    if (!wanted(names, n)) return;
    try {
      make();
      status.push_back({n, true, ""});
    } catch (const std::exception& e) {
      down(n, e.what());
    }
  };
  start("kernels",
        [&] { kernels = std::make_unique<KernelsCollector>(session, KernelsCollector::Config{o.scope.comm}); });
  start("memleak", [&] {
    memleak = std::make_unique<MemleakCollector>(session, MemleakCollector::Config{o.scope.comm, o.scope.pids, false});
  });
  start("latency", [&] {
    latency = std::make_unique<LatencyCollector>(session,
                                                 LatencyCollector::Config{select_apis({}, "all"), false, o.scope.comm});
  });
  std::unique_ptr<BridgeReader> bridge;
  if (wanted(names, "bridge")) bridge = std::make_unique<BridgeReader>(o.pin_dir, o.nvml);
  for (auto& n : names)
    if (std::find(kNotYet.begin(), kNotYet.end(), n) != kNotYet.end()) down(n, "not yet served by the agent");
  if (kernels)
    kernels->on_exit([&](uint32_t pid, const std::vector<KernelRow>& rows) { view.kernels_exited(pid, rows); });
  if (memleak)
    memleak->on_end([&](const MemleakProcess& p, const std::vector<MemleakLeak>& l) { view.memleak_ended(p, l); });
  bool session_started = false;
  if (kernels || memleak || latency) {
    try {
      session.start();
      session_started = true;
    } catch (const std::exception& e) {
      for (auto& s : status)
        if (s.up) s = {s.name, false, e.what()};
      fprintf(stderr, "gpuscope: agent: no uprobes attached: %s\n", e.what());
      kernels.reset();
      memleak.reset();
      latency.reset();
    }
  }
  if (kernels) kernels->start(session);
  if (memleak) memleak->start(session);

  EventLoop loop(o.common.duration_s);
  if (kernels) kernels->watch(loop);
  if (memleak) memleak->watch(loop);
  if (session_started) session.watch(loop, false);
  // The rules read what each refresh reads; the governor slows the refreshes (the collectors' map
  // walks are the agent's main cost) when the agent's CPU passes --max-cpu-percent.
  AnomalyRules anomalies(o.anomaly);
  std::unique_ptr<Governor> governor;
  unsigned refresh_every = 1, ticks = 0;
  if (o.max_cpu_percent > 0) {
    std::vector<Governor::Step> steps = {{"refresh every 4th interval", 4}, {"refresh every 16th interval", 4}};
    governor = std::make_unique<Governor>(Governor::Config{o.max_cpu_percent, std::max(2.0, 4 * o.interval_s), 3},
                                          steps, [&refresh_every, steps](unsigned level) {
                                            refresh_every = 1;
                                            for (unsigned i = 0; i < level; i++)
                                              refresh_every *= static_cast<unsigned>(steps[i].factor);
                                          });
  }
  auto last_refresh = std::chrono::steady_clock::now();
  loop.after_wakeup([&] {
    if (kernels) kernels->tick();
    if (memleak) memleak->tick();
  });
  std::string bridge_why = "unread";
  auto refresh = [&] {
    AgentInput in;
    std::vector<KernelRow> k;
    MemleakSnapshot m;
    LatencySnapshot l;
    if (kernels) {
      k = kernels->snapshot();
      in.kernels = &k;
      auto s = kernels->stats();
      in.lost[{"kernels", "row_map_full"}] = s.rows_full;
      in.lost[{"kernels", "naming_events"}] = s.lost;
    }
    if (memleak) {
      memleak->sweep();
      m = memleak->snapshot();
      in.memleak = &m;
      auto s = memleak->stats();
      in.lost[{"memleak", "allocation_map_full"}] = s.allocs_map_full;
      in.lost[{"memleak", "process_map_full"}] = s.procs_map_full;
      in.lost[{"memleak", "ring_buffer_full"}] = s.events_lost;
      in.lost[{"memleak", "no_thread_state"}] = s.no_thread_state;
      in.lost[{"memleak", "error_code_map_full"}] = s.error_codes_lost;
    }
    if (latency) {
      l = latency->snapshot();
      in.latency = &l;
      auto s = latency->stats();
      in.lost[{"latency", "no_thread_state"}] = s.untimed_no_state;
      in.lost[{"latency", "histogram_map_full"}] = s.uncounted_hist_full;
    }
    in.lost[{"session", "notices_lost"}] = session.stats().notices_lost;
    {
      std::vector<AnomalyRules::ProcMem> pm;
      for (auto& p : m.processes) pm.push_back({p.pid, p.comm, p.counters.outstanding_bytes});
      std::map<std::string, uint64_t> errors;
      for (auto& [key, row] : l.rows)
        for (auto& [ret, n] : row.rets)
          if (ret != 0 && ret != 600) errors[api_symbol(key.second)] += n;  // 600: not ready (polling), not failed
      auto now = std::chrono::steady_clock::now();
      double dt = std::chrono::duration<double>(now - last_refresh).count();
      last_refresh = now;
      for (auto& e : anomalies.observe(pm, errors, dt)) {
        fprintf(stderr, "gpuscope: agent: anomaly %s: %s\n", e.rule.c_str(), e.detail.c_str());
        if (o.common.json) {
          fmt::memory_buffer b;
          JsonLine j(b);
          j.str("type", "anomaly").str("rule", e.rule).num("pid", e.pid).str("comm", e.comm);
          j.num("bytes", e.bytes).num("other_pid", e.other_pid).str("api", e.api).real("rate_per_s", e.rate_per_s, 1);
          j.str("detail", e.detail).end();
          fwrite(b.data(), 1, b.size(), stdout);
          fflush(stdout);
        }
      }
      in.anomalies = &anomalies;
      in.governor = governor.get();
    }
    in.collectors = status;
    std::vector<DeviceSample> devs;
    if (bridge) {
      // Read from a running bridge's pins each refresh: it may start or stop while the agent runs.
      CollectorStatus b{"bridge", true, ""};
      try {
        devs = bridge->read(&in.bridge_age_s);
        in.devices = &devs;
        in.hostname = bridge->hostname();
      } catch (const std::exception& e) {
        b = {"bridge", false, e.what()};
        if (bridge_why != b.why) fprintf(stderr, "gpuscope: agent: collector bridge is off: %s\n", e.what());
      }
      bridge_why = b.why;
      in.collectors.push_back(b);
    }
    view.refresh(in);
  };
  refresh();
  loop.every(o.interval_s, [&] {
    if (governor) governor->tick();
    if (++ticks % refresh_every == 0) refresh();
  });
  auto st = session.stats();
  std::string up;
  for (auto& s : status)
    if (s.up) up += (up.empty() ? "" : ",") + s.name;
  if (o.common.json) {
    fmt::memory_buffer b;
    JsonLine(b)
        .str("type", "agent")
        .str("listen", o.listen)
        .num("port", http->port())
        .str("collectors", up)
        .num("probes", st.probes)
        .end();
    fwrite(b.data(), 1, b.size(), stdout);
    fflush(stdout);
  }
  fprintf(stderr,
          "gpuscope: agent listening on %s (port %d), collectors: %s; %zu probes in %zu CUDA objects. Ctrl-C to "
          "end.\n",
          o.listen.c_str(), http->port(), up.empty() ? "none" : up.c_str(), st.probes, st.objects);
  loop.run();
  session.detach();
  if (kernels) kernels->drain();
  if (memleak) memleak->drain();
  refresh();
  http.reset();
  if (o.common.json) {
    fmt::memory_buffer b;
    JsonLine(b).str("type", "agent_end").num("series", view.series()).real("render_s", view.render_s(), 6).end();
    fwrite(b.data(), 1, b.size(), stdout);
  }
  return 0;
}

}  // namespace

void register_agent(CLI::App& app) {
  auto o = std::make_shared<AgentOptions>();  // held by the command registry until exit
  auto* cmd = app.add_subcommand("agent", "Run the collectors continuously; serve Prometheus /metrics and a JSON API");
  add_common_flags(cmd, o->common);
  add_scope_flags(cmd, o->scope);
  cmd->add_option("--listen", o->listen, "ADDR:PORT to serve HTTP on (default 127.0.0.1:9400, loopback only)");
  cmd->add_option("--collectors", o->collectors, "Comma-separated collectors (default kernels,memleak,latency,bridge)");
  add_number(cmd, "--max-kernels-per-process", o->max_kernels,
             "Kernel series per process; the rest are summed in kernel=\"other\" (default 50)", "kernels", 1, 100000);
  add_number(cmd, "--interval", o->interval_s, "Refresh what is served every SECONDS (default 1)", "seconds", 0.05,
             3600);
  add_number(cmd, "--retain-exited", o->retain_s,
             "Drop an exited process's series after SECONDS even if no scrape saw them (default 60)", "seconds", 0,
             86400);
  cmd->add_option("--bridge-pin-dir", o->pin_dir,
                  "Where a running gpuscope bridge pins its maps (default /sys/fs/bpf)");
  cmd->add_option("--nvml", o->nvml, "NVML library, for the GPUs' UUID and model name (default libnvidia-ml.so.1)");
  cmd->add_option("--pods-dir", o->pods_dir, "The kubelet's pod log directory, for pod and namespace names");
  add_number(cmd, "--alloc-alert-bytes", o->anomaly.alloc_alert_bytes,
             "Anomaly: a process holding more GPU memory than BYTES while another holds some (default 1 GiB)", "bytes",
             1, 1e15);
  add_number(cmd, "--growth-intervals", o->anomaly.growth_intervals,
             "Anomaly: GPU memory rising over N refreshes without a fall (default 30)", "refreshes", 2, 100000);
  add_number(cmd, "--error-burst-rate", o->anomaly.error_burst_per_s,
             "Anomaly: failed calls of one CUDA API per second above RATE (default 50)", "per second", 0.001, 1e9);
  add_number(cmd, "--max-cpu-percent", o->max_cpu_percent,
             "Governor: the agent's CPU limit in percent of one core; past it the agent does less (default 2, 0: off)",
             "percent", 0, 10000);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope agent                                  # every process, http://127.0.0.1:9400/metrics\n"
      "  gpuscope agent --listen 0.0.0.0:9400 --collectors kernels,memleak\n"
      "  curl -s 127.0.0.1:9400/api/health");
  add_command(cmd, [o] { return run_agent(*o); });
}

}  // namespace gpuscope

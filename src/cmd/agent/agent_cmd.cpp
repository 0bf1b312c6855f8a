// gpuscope agent: the collectors always on, served as Prometheus metrics and a JSON API.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "cmd/agent/agent.h"
#include "cmd/agent/http.h"
#include "bridge/bridge.h"
#include "bridge/nvml.h"
#include "core/cli.h"
#include "core/cuda_api.h"
#include "core/event_loop.h"
#include "core/output.h"
#include "core/system.h"

namespace gpuscope {

namespace {

// An always-on process times one launch in 16: the histogram still fills within a second on
// a launch-bound process, and 15 launches in 16 cost one entry probe, shared with kernels'.
constexpr unsigned kAgentLaunchSample = 16;

struct AgentOptions {
  CommonFlags common;
  Scope scope;
  std::string listen = "127.0.0.1:9400";
  std::string collectors = "kernels,memleak,latency,ioctl,starvation,gputime,bridge";
  std::string pin_dir = "/sys/fs/bpf";
  std::string nvml = "libnvidia-ml.so.1";
  unsigned max_kernels = 50;
  double interval_s = 1;
  double retain_s = 60;
  std::string pods_dir = "/var/log/pods";
  AnomalyConfig anomaly;
  double max_cpu_percent = 2;  // 0: governor off
  uint64_t starvation_min_idle_ms = 1000;
  unsigned bridge_poll_ms = 100;
  // Map sizes for an always-on process beside others (the subcommands keep their larger ones):
  // the agent's BPF maps stay within 20 MB.
  uint32_t max_allocs = 32768, max_procs = 4096, max_kernel_rows = 16384, max_ioctl_rows = 4096, max_stacks = 1024,
           max_threads = 4096;
  // GPU time: 512 KiB of ring buffer holds 3 full hand-offs (2048 records each), drained as
  // they come; the subcommands' 8 MiB would put the agent's maps past 20 MB.
  uint32_t gpu_ring_bytes = 1u << 19;
  // latency: the rows timed (empty: agent_latency_rows()) and one launch in N timed.
  std::vector<std::string> latency_apis;
  unsigned latency_sample = kAgentLaunchSample;
  size_t max_gpu_kernel_rows = 16384;
  // CUPTI's activity costs a launch-bound loop ~20 %: on 1 s in every 10 s (--gputime-duty).
  uint32_t gpu_on_ms = 1000, gpu_period_ms = 10000;
};

constexpr unsigned kSampleHz = 49;  // starvation's stack sampling rate, a quarter of it under the governor

const std::vector<std::string> kServed = {"kernels", "memleak", "latency", "ioctl", "starvation", "gputime", "bridge"};

std::vector<std::string> parse_collectors(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string c; std::getline(ss, c, ',');) {
    if (c.empty()) continue;
    if (std::find(kServed.begin(), kServed.end(), c) == kServed.end())
      throw UsageError("unknown collector '" + c +
                       "' in --collectors; known: kernels, memleak, latency, ioctl, starvation, gputime, bridge");
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  if (out.empty()) throw UsageError("--collectors must name at least one collector");
  return out;
}

// --gputime-duty ON/PERIOD (seconds), or a share of the default 10 s period; 1: always exact.
void parse_duty(const std::string& v, AgentOptions& o) {
  const std::string flag = "--gputime-duty";
  size_t slash = v.find('/');
  double on, period = 10;
  if (slash == std::string::npos) {
    on = period * parse_number(flag, v, "the share of time recorded (or ON/PERIOD seconds)", 0.005, 1, false);
  } else {
    period = parse_number(flag, v.substr(slash + 1), "seconds per period in ON/PERIOD", 0.1, 3600, false);
    on = parse_number(flag, v.substr(0, slash), "seconds on in ON/PERIOD", 0.05, 3600, false);
    if (on > period) throw UsageError("--gputime-duty ON/PERIOD: ON (" + v.substr(0, slash) + ") exceeds PERIOD");
  }
  o.gpu_on_ms = static_cast<uint32_t>(on * 1000 + 0.5);
  o.gpu_period_ms = static_cast<uint32_t>(period * 1000 + 0.5);
}

bool wanted(const std::vector<std::string>& v, const char* c) { return std::find(v.begin(), v.end(), c) != v.end(); }

int run_agent(const AgentOptions& o) {
  auto names = parse_collectors(o.collectors);
  parse_listen(o.listen);
  o.scope.validate();
  if (wanted(names, "bridge")) nvml::check_library(o.nvml);
  const std::vector<bool> latency_rows =
      o.latency_apis.empty() ? always_on_latency_rows() : select_apis(o.latency_apis, "all");
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
  session.open_libs();  // a bad --lib is bad input, as in the subcommands: refused before anything loads
  // Exec and dlopen notices find new CUDA processes; the full rescan only backs them up.
  session.set_full_rescan_period(std::chrono::seconds(15));
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
  start("kernels", [&] {
    kernels = std::make_unique<KernelsCollector>(
        session, KernelsCollector::Config{o.scope, CountLayer::Auto, false, o.max_kernel_rows});
  });
  start("memleak", [&] {
    memleak = std::make_unique<MemleakCollector>(
        session, MemleakCollector::Config{o.scope, false, true, o.max_allocs, o.max_procs});
  });
  start("latency", [&] {
    latency = std::make_unique<LatencyCollector>(
        session, LatencyCollector::Config{latency_rows, false, o.scope, o.latency_sample});
  });
  std::unique_ptr<IoctlCollector> ioctl;
  start("ioctl", [&] {
    ioctl = std::make_unique<IoctlCollector>(
        IoctlCollector::Config{o.scope.pids, o.scope.comm, false, false, o.max_ioctl_rows});
  });
  // Costs nothing where no process loads libgpuscope-cupti.so: one uprobe per handed buffer.
  std::unique_ptr<GpuTimeCollector> gputime;
  start("gputime", [&] {
    GpuTimeCollector::Config c;
    c.pids = o.scope.pids;
    c.comm = o.scope.comm;
    c.max_kernel_rows = o.max_gpu_kernel_rows;
    c.ring_bytes = o.gpu_ring_bytes;
    c.release_exited = true;
    c.mode = o.gpu_on_ms < o.gpu_period_ms ? GS_GT_MODE_DUTY : GS_GT_MODE_KERNELS;
    c.duty_on_ms = o.gpu_on_ms;
    c.duty_period_ms = o.gpu_period_ms;
    gputime = std::make_unique<GpuTimeCollector>(std::move(c));
  });
  // The library comes by dlopen at cuInit: the session's notice has it scanned at once.
  if (gputime)
    session.on_maps_changed([&](pid_t pid) {
      if (gputime) gputime->notice(pid);  // reset below if it cannot start
    });
  bool session_started = false;
  if (kernels || memleak || latency) {
    try {
      session.start();
      session_started = true;
    } catch (const UsageError&) {
      throw;  // a --lib none of whose probes attach, before the bridge below pins anything
    } catch (const std::exception& e) {
      for (auto& s : status)
        if (s.up && (s.name == "kernels" || s.name == "memleak" || s.name == "latency")) s = {s.name, false, e.what()};
      fprintf(stderr, "gpuscope: agent: no uprobes attached: %s\n", e.what());
      kernels.reset();
      memleak.reset();
      latency.reset();
    }
  }
  // Device series: a running bridge's pins, else a bridge run here (before starvation, which
  // reads the same pins). Pins whose writer has gone (the agent or bridge before this one, within
  // the readers' 10 s of staleness) are taken over at once, now and whenever their writer goes.
  std::unique_ptr<BridgeReader> bridge;
  std::unique_ptr<BridgePublisher> own_bridge;
  std::mutex bridge_mu;
  std::string own_bridge_why;  // under bridge_mu: why the agent runs no bridge
  std::atomic<bool> own_bridge_done{false};
  std::optional<BridgeHolder> tried;  // the holder at the last failed try
  auto tried_at = std::chrono::steady_clock::now();
  auto take_bridge_if_free = [&] {
    if (own_bridge) return false;
    BridgeHolder h = bridge_holder(o.pin_dir);
    if (h.publishing) return false;
    // A failed try is repeated when the pins change hands, and at most every 30 s otherwise.
    auto now = std::chrono::steady_clock::now();
    if (tried && tried->pid == h.pid && now - tried_at < std::chrono::seconds(30)) return false;
    try {
      BridgeOptions b;
      b.nvml = o.nvml;
      b.pin_dir = o.pin_dir;
      b.poll_interval_ms = o.bridge_poll_ms;
      b.verbose = o.common.verbose;
      own_bridge = std::make_unique<BridgePublisher>(b);
      tried.reset();
      std::lock_guard g(bridge_mu);
      own_bridge_why.clear();
      if (h.pid)
        fprintf(stderr, "gpuscope: agent: bridge pid %u under %s is not publishing; the agent runs one\n", h.pid,
                o.pin_dir.c_str());
      else
        fprintf(stderr, "gpuscope: agent: no bridge was publishing under %s; the agent runs one\n", o.pin_dir.c_str());
      return true;
    } catch (const std::exception& e) {
      tried = h;
      tried_at = now;
      std::lock_guard g(bridge_mu);
      own_bridge_why = e.what();
      return false;
    }
  };
  if (wanted(names, "bridge")) {
    bridge = std::make_unique<BridgeReader>(o.pin_dir, o.nvml);
    take_bridge_if_free();
  }
  std::unique_ptr<StarvationCollector> starvation;
  std::string starvation_note;  // the collector's latest note on the bridge
  if (wanted(names, "starvation")) {
    StarvationCollector::Config c;
    c.scope = o.scope;
    c.min_idle_ms = o.starvation_min_idle_ms;
    c.pin_dir = o.pin_dir;
    c.fold = true;
    c.max_stacks = o.max_stacks;
    c.max_threads = o.max_threads;
    c.sample_hz = kSampleHz;
    c.log = [&starvation_note](const std::string& line) {
      starvation_note = line;
      fprintf(stderr, "gpuscope: agent: starvation: %s\n", line.c_str());
    };
    try {
      starvation = std::make_unique<StarvationCollector>(std::move(c));
    } catch (const std::exception& e) {
      down("starvation", e.what());
    }
  }
  if (kernels)
    kernels->on_exit([&](uint32_t pid, const std::vector<KernelRow>& rows) { view.kernels_exited(pid, rows); });
  if (memleak)
    memleak->on_end([&](const MemleakProcess& p, const std::vector<MemleakLeak>& l) { view.memleak_ended(p, l); });
  if (kernels) kernels->start(session);
  if (memleak) memleak->start(session);
  if (gputime) {
    try {
      gputime->start();
    } catch (const std::exception& e) {
      std::erase_if(status, [](auto& c) { return c.name == "gputime"; });
      down("gputime", e.what());
      gputime.reset();
    }
  }

  EventLoop loop(o.common.duration_s);
  if (kernels) kernels->watch(loop);
  if (memleak) memleak->watch(loop);
  if (gputime) gputime->watch(loop);
  if (session_started) session.watch(loop, false);
  // The rules read what each refresh reads. Past --max-cpu-percent the governor cuts, in order:
  // the stack sampling rate, the refreshes (the collectors' map walks and rendering), then the
  // work done per event (exits, new processes), batched into the refresh.
  AnomalyRules anomalies(o.anomaly);
  std::unique_ptr<Governor> governor;
  unsigned refresh_every = 1, ticks = 0;
  bool defer_events = false;
  if (o.max_cpu_percent > 0) {
    std::vector<Governor::Step> steps;
    if (starvation) steps.push_back({fmt::format("stack sampling at {} Hz (of {})", kSampleHz / 4, kSampleHz), 4});
    const unsigned sampling = steps.size();
    steps.push_back({"refresh every 4th interval", 4});
    steps.push_back({"refresh every 16th interval", 4});
    steps.push_back({"events read every 50 ms, exits and new processes handled at the refresh, in batches", 1});
    governor = std::make_unique<Governor>(
        Governor::Config{o.max_cpu_percent, std::max(2.0, 4 * o.interval_s), 3}, steps, [&, sampling](unsigned level) {
          if (starvation) starvation->set_sample_hz(level >= 1 && sampling ? kSampleHz / 4 : kSampleHz);
          refresh_every = level >= sampling + 2 ? 16 : level >= sampling + 1 ? 4 : 1;
          defer_events = level >= sampling + 3;
          if (kernels) kernels->defer_exits(defer_events);
          if (session_started) session.defer_rescans(defer_events);
          loop.set_min_wakeup_gap(defer_events ? 0.05 : 0);
        });
  }
  auto last_refresh = std::chrono::steady_clock::now();
  // Names are learnt four times a second rather than at every wake-up: each learning walks
  // the whole count map, and the agent's other timers wake it often.
  if (kernels) loop.every(0.25, [&] { kernels->tick(); });
  if (memleak)
    loop.after_wakeup([&] {
      if (!defer_events) memleak->tick();
    });
  // The bridge ticks on its own thread: the loop's rescans and refreshes must not make its data
  // look stale to its readers (starvation calls it stale after 300 ms).
  std::jthread bridge_thread;
  auto start_bridge_thread = [&] {
    own_bridge_done = false;
    pthread_sigmask(SIG_BLOCK, &block, &old);  // signals stay with the loop thread
    bridge_thread = std::jthread([&](std::stop_token stop) {
      auto next = std::chrono::steady_clock::now();
      std::mutex m;
      std::condition_variable_any cv;
      while (!stop.stop_requested()) {
        next += std::chrono::milliseconds(o.bridge_poll_ms);
        std::unique_lock l(m);
        cv.wait_until(l, stop, next, [] { return false; });  // woken early only by the stop
        if (stop.stop_requested()) break;
        try {
          if (!own_bridge->tick()) break;  // another bridge took the pins over: it is read instead
        } catch (const std::exception& e) {
          std::lock_guard g(bridge_mu);
          own_bridge_why = e.what();
          break;
        }
      }
      own_bridge_done = true;
    });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  };
  if (own_bridge) start_bridge_thread();
  // The bridge read may stop publishing at any time; so may the agent's own, taken over by
  // another bridge that may stop in turn.
  if (bridge)
    loop.every(0.5, [&] {
      if (own_bridge && own_bridge_done) {
        bridge_thread = {};  // joins
        own_bridge.reset();
      }
      if (take_bridge_if_free()) start_bridge_thread();
    });
  if (starvation)
    loop.every(0.05, [&] {
      try {
        starvation->tick();
      } catch (const std::exception& e) {
        fprintf(stderr, "gpuscope: agent: collector starvation is off: %s\n", e.what());
        starvation_note = e.what();
        starvation.reset();
      }
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
    if (session_started) session.rescan_noticed();  // those deferred by the governor
    if (memleak) {
      memleak->tick();  // exits deferred by the governor, before the sweep looks for processes gone
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
    IoctlSnapshot io;
    if (ioctl) {
      io = ioctl->snapshot();
      in.ioctl = &io;
      in.uvm_major = ioctl->uvm_major();
      auto s = ioctl->stats();
      in.lost[{"ioctl", "state_map_full"}] = s.state_full;
      in.lost[{"ioctl", "counter_map_full"}] = s.map_full;
    }
    StarvationReport sr;
    if (starvation) {
      sr = starvation->collect();
      in.starvation = &sr;
      auto s = starvation->stats();
      in.lost[{"starvation", "thread_map_full"}] = s.lost_threads;
      in.lost[{"starvation", "sample_map_full"}] = s.lost_samples;
      in.lost[{"starvation", "stack_map_full"}] = s.lost_stacks;
      in.lost[{"starvation", "folded_stacks_full"}] = view.folded_lost();
    }
    std::vector<GpuTimeProcess> gt;
    if (gputime) {
      gt = gputime->snapshot();
      in.gputime = &gt;
      auto s = gputime->stats();
      in.lost[{"gputime", "ring_buffer_full"}] = s.lost_ringbuf;
      in.lost[{"gputime", "unreadable"}] = s.lost_read;
      in.lost[{"gputime", "over_batch_limit"}] = s.lost_too_many;
      in.lost[{"gputime", "names_lost"}] = s.lost_names;
      in.lost[{"gputime", "row_map_full"}] = s.rows_full;
      in.lost[{"gputime", "cupti_no_buffer"}] = s.cupti_dropped;
      in.lost[{"gputime", "library_dropped"}] = s.lib_dropped;
      in.lost[{"gputime", "no_client_slot"}] = s.no_slot;
      in.gputime_duty = static_cast<double>(o.gpu_on_ms) / o.gpu_period_ms;
    }
    in.lost[{"session", "notices_lost"}] = session.stats().notices_lost;
    std::map<std::string, ProgramStats> programs;
    if (bpf_stats_enabled()) {
      programs = own_program_stats();
      in.programs = &programs;
    }
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
    if (wanted(names, "starvation") && (starvation || !starvation_note.empty())) {
      // Loaded, it is up only while a bridge publishes fresh data: its verdicts need it.
      std::string state = starvation ? starvation->bridge_state() : "off";
      std::erase_if(in.collectors, [](auto& c) { return c.name == "starvation"; });
      if (state == "fresh")
        in.collectors.push_back({"starvation", true, ""});
      else
        in.collectors.push_back({"starvation", false, starvation_note});
    }
    if (gputime) {
      // Up while a copy of the library is probed: beside gpuscope, or one a process in scope loaded.
      std::erase_if(in.collectors, [](auto& c) { return c.name == "gputime"; });
      in.collectors.push_back({"gputime", gputime->probing(),
                               gputime->probing()
                                   ? ""
                                   : "no libgpuscope-cupti.so probed: none beside gpuscope (" +
                                         cupti_lib_beside_self() + ") and no process in scope has loaded one"});
    }
    std::vector<DeviceSample> devs;
    std::vector<ProcessGpuSample> on_gpus;
    if (bridge) {
      // Read from a running bridge's pins each refresh: it may start or stop while the agent runs.
      CollectorStatus b{"bridge", true, ""};
      try {
        devs = bridge->read(&in.bridge_age_s);
        in.devices = &devs;
        on_gpus = bridge->read_processes();
        std::erase_if(on_gpus, [&](const ProcessGpuSample& p) {
          return (!o.scope.pids.empty() && std::find(o.scope.pids.begin(), o.scope.pids.end(),
                                                     static_cast<pid_t>(p.pid)) == o.scope.pids.end()) ||
                 (!o.scope.comm.empty() && p.comm != o.scope.comm);
        });
        in.process_gpus = &on_gpus;
        in.hostname = bridge->hostname();
      } catch (const std::exception& e) {
        b = {"bridge", false, e.what()};
        std::lock_guard g(bridge_mu);
        if (!own_bridge_why.empty()) b.why += "; no bridge could run in the agent: " + own_bridge_why;
        if (bridge_why != b.why) fprintf(stderr, "gpuscope: agent: collector bridge is off: %s\n", b.why.c_str());
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
  // Loaded; up while a bridge publishes (/api/health).
  if (starvation) up += std::string(up.empty() ? "" : ",") + "starvation";
  if (own_bridge) up += std::string(up.empty() ? "" : ",") + "bridge (in the agent)";
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
  if (bridge_thread.joinable()) {
    bridge_thread.request_stop();
    bridge_thread.join();
  }
  {
    // Each detach waits for an RCU grace period: the GPU-time probes go while the session's do.
    std::jthread gpu_stop([&] {
      if (gputime) gputime->stop();
    });
    session.detach();
  }
  if (kernels) kernels->drain();
  if (memleak) memleak->drain();
  if (ioctl) ioctl->detach();
  refresh();
  if (starvation) starvation->stop();
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
  cmd->add_option("--collectors", o->collectors,
                  "Comma-separated collectors (default kernels,memleak,latency,ioctl,starvation,gputime,bridge)");
  cmd->add_option("--latency-apis", o->latency_apis,
                  "CUDA APIs the latency collector times (comma-separated; default: synchronization, memory, copies, "
                  "graphs and the driver's launches, not the per-operation device and context queries)")
      ->delimiter(',');
  add_number(cmd, "--latency-sample-launches", o->latency_sample,
             "Time one kernel launch in N (needs uprobe sessions, kernel 6.12+; default 16; 1: every launch)", "N", 1,
             65535);
  add_number(cmd, "--max-kernels-per-process", o->max_kernels,
             "Kernel series per process; the rest are summed in kernel=\"other\" (default 50)", "kernels", 1, 100000);
  add_number(cmd, "--interval", o->interval_s, "Refresh what is served every SECONDS (default 1)", "seconds", 0.05,
             3600);
  add_number(cmd, "--retain-exited", o->retain_s,
             "Drop an exited process's series after SECONDS even if no scrape saw them (default 60)", "seconds", 0,
             86400);
  cmd->add_option("--bridge-pin-dir", o->pin_dir,
                  "Where a gpuscope bridge pins its maps; with none publishing there, the agent runs one (default "
                  "/sys/fs/bpf)");
  add_number(cmd, "--bridge-poll-interval-ms", o->bridge_poll_ms,
             "NVML poll interval of the bridge the agent runs when none is running (default 100)", "milliseconds", 10,
             60000);
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
  cmd->add_option_function<std::string>(
      "--gputime-duty", [o](const std::string& v) { parse_duty(v, *o); },
      "GPU time recorded ON seconds in every PERIOD (ON/PERIOD), or a share of 10 s; 1: always (default 1/10)");
  add_number(cmd, "--starvation-min-idle-ms", o->starvation_min_idle_ms,
             "GPU idle this long before a thread's CPU time counts as starving (default 1000)", "milliseconds", 1,
             86400000);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope agent                                  # every process, http://127.0.0.1:9400/metrics\n"
      "  gpuscope agent --listen 0.0.0.0:9400 --collectors kernels,memleak\n"
      "  curl -s 127.0.0.1:9400/api/health");
  add_command(cmd, [o] { return run_agent(*o); });
}

}  // namespace gpuscope

// gpuscope errors: GPU errors as they happen, one line each (a table, or JSON lines): the
// driver's Xids from the kernel log and the first sticky CUDA error of each process, joined.
#include <time.h>

#include <cstdio>

#include "core/cli.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "errors/errors_collector.h"
#include "errors/errors_nvml.h"
#include "errors/errors_json.h"
#include "kernels/stack_flags.h"

namespace gpuscope {

namespace {

struct ErrorsOptions {
  CommonFlags common;
  Scope scope;
  std::string kmsg = "/dev/kmsg";
  std::string kmsg_state;
  std::string nvml;  // "": libnvidia-ml.so.1 where it loads
  bool from_start = false;
  double window_s = 5;
  StackFlags sites;
};

std::string clock_cell(uint64_t realtime_ns) {
  time_t t = static_cast<time_t>(realtime_ns / 1'000'000'000);
  struct tm tm;
  localtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string device_cell(const GpuDevice& d) {
  if (d.index >= 0) return fmt::format("{}", d.index);
  return d.pci_bus_id.empty() ? "-" : d.pci_bus_id;
}

class ErrorsView {
 public:
  explicit ErrorsView(const ErrorsOptions& o)
      : o_(o),
        table_(where_.table({{"TIME", -8},
                             {"PID", 7},
                             {"COMM", -16},
                             {"KIND", -10},
                             {"ERROR", -34},
                             {"CLASS", -13},
                             {"ACTION", -11},
                             {"DEVICE", -12},
                             {"DETAIL", 0}},
                            3)) {}

  void header() {
    if (o_.common.json) return;
    table_.header(out_.buf());
    out_.flush();
  }

  void print(const std::vector<GpuError>& rs) {
    for (auto& r : rs) o_.common.json ? json(r) : text(r);
    out_.flush();
  }

  void summary(const ErrorsStats& s, size_t records) {
    const KmsgStats& k = s.kmsg;
    if (o_.common.json)
      JsonLine(out_.buf())
          .record("summary", realtime_ns())
          .num("records", records)
          .num("xids", k.xids)
          .num("sticky", s.sticky_events)
          .num("nvml_events", s.nvml_events)
          .num("kmsg_records", k.records)
          .num("kmsg_lost", k.lost)
          .num("kmsg_overruns", k.overruns)
          .num("lost_ringbuf_full", s.bpf_lost_events)
          .num("untracked_procs_full", s.bpf_procs_full)
          .num("uncounted_counts_full", s.bpf_counts_full)
          .num("records_dropped", s.records_dropped)
          .end();
    out_.flush();
    fprintf(stderr,
            "gpuscope: %zu errors (%llu Xids from the kernel log, %llu sticky CUDA errors); kernel log: %llu records, "
            "%llu lost, %llu overruns; sticky errors lost: %llu (ring buffer full), %llu (process map full), %llu "
            "later ones uncounted; %llu records dropped\n",
            records, (unsigned long long)k.xids, (unsigned long long)s.sticky_events, (unsigned long long)k.records,
            (unsigned long long)k.lost, (unsigned long long)k.overruns, (unsigned long long)s.bpf_lost_events,
            (unsigned long long)s.bpf_procs_full, (unsigned long long)s.bpf_counts_full,
            (unsigned long long)s.records_dropped);
  }

 private:
  void json(const GpuError& r) {
    JsonLine j(out_.buf());
    put_gpu_error(j, r);
    j.end();
  }

  void text(const GpuError& r) {
    std::string error, cls = "-", action = "-", detail;
    if (r.kind == ErrorKind::kSticky) {
      error = fmt::format("{} ({})", r.code_name, r.code);
      detail = "at " + r.api_name;
      if (!r.kernels_since.empty()) {
        detail += "; kernels since last sync:";
        for (size_t i = 0; i < r.kernels_since.size(); i++) {
          auto& k = r.kernels_since[i];
          detail += (i ? ", " : " ") + k.kernel;
          if (k.samples) detail += " (from " + k.site + ")";
        }
        if (r.kernels_truncated) detail += ", …";
      }
    } else {
      error = r.kind == ErrorKind::kXid ? fmt::format("Xid {}", r.xid) : r.nvml_event;
      cls = xid_class_name(r.info.cls);
      action = xid_action_name(r.info.action);
      detail = r.kind == ErrorKind::kXid ? r.info.meaning : "";
      if (r.injected) detail += " (injected)";
    }
    if (r.joined) detail += fmt::format(" [joined #{}]", *r.joined);
    std::vector<std::string> cells{clock_cell(r.realtime_ns),
                                   r.pid ? fmt::format("{}", *r.pid) : "-",
                                   r.pid && !r.comm.empty() ? r.comm : "-",
                                   fmt::format("{} #{}", r.kind == ErrorKind::kSticky ? "cuda" : "xid", r.id),
                                   error,
                                   cls,
                                   action,
                                   device_cell(r.device),
                                   detail};
    if (r.kind == ErrorKind::kNvmlEvent) cells[3] = fmt::format("nvml #{}", r.id);
    // The record's container, read when it was taken: the process may be gone by now.
    std::vector<std::string> where;
    where.push_back(r.pid ? (r.container.display().empty() ? "-" : r.container.display()) : "-");
    if (where_.kubernetes()) {
      where.push_back(r.container.pod.empty() ? "-" : r.container.pod);
      where.push_back(r.container.ns.empty() ? "-" : r.container.ns);
    }
    cells.insert(cells.begin() + 3, where.begin(), where.end());
    table_.row(out_.buf(), cells);
  }

  const ErrorsOptions& o_;
  WhereView where_{o_.scope};
  Table table_;
  Writer out_;
};

int run_errors(const ErrorsOptions& o) {
  o.sites.check();
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  ErrorsCollector::Config cfg;
  cfg.scope = o.scope;
  cfg.kmsg_path = o.kmsg;
  cfg.kmsg_state = o.kmsg_state;
  cfg.from_start = o.from_start;
  cfg.window_s = o.window_s;
  cfg.stacks = o.sites.stacks;
  cfg.stack_every = o.sites.stack_every;
  cfg.site_skip = o.sites.site_skip;
  ErrorsCollector errors(session, cfg);
  if (!errors.kmsg_error().empty())
    fprintf(stderr, "gpuscope: %s: no Xids from the kernel log; sticky CUDA errors are still watched\n",
            errors.kmsg_error().c_str());
  // NVML's Xid and other critical events beside the kernel log's. An --nvml named that cannot load
  // is bad input, refused before anything attaches; without one, a host without NVML has the
  // kernel log only, said once the probes are in place (a bad --lib is then the one line).
  std::unique_ptr<ErrorsNvml> nvml;
  if (!o.nvml.empty()) nvml = std::make_unique<ErrorsNvml>(o.nvml, errors, o.common.verbose);
  ErrorsView view(o);
  session.start();
  errors.start(session);
  if (!nvml) try {
      nvml = std::make_unique<ErrorsNvml>("libnvidia-ml.so.1", errors, o.common.verbose);
    } catch (const UsageError& e) {
      fprintf(stderr, "gpuscope: %s: no NVML events, Xids from the kernel log only\n", e.what());
    }
  EventLoop loop(o.common.duration_s);
  errors.watch(loop);
  session.watch(loop, false);
  loop.after_wakeup([&] { view.print(errors.take_ready()); });
  auto st = session.stats();
  fprintf(stderr, "gpuscope: watching %ssticky CUDA errors at %zu probes in %zu CUDA objects. Ctrl-C to end.\n",
          errors.kmsg_error().empty() && !o.kmsg.empty() ? ("the kernel log " + o.kmsg + " and ").c_str() : "",
          st.probes, st.objects);
  view.header();
  loop.run();
  errors.poll();
  session.detach();
  errors.detach();
  nvml.reset();
  errors.poll();
  view.print(errors.take_ready(true));
  view.summary(errors.stats(), errors.records().size());
  return 0;
}

}  // namespace

void register_errors(CLI::App& app) {
  auto [cmd, o] = new_command<ErrorsOptions>(
      app, "errors",
      "GPU errors as they happen: the driver's Xids (kernel log) and sticky CUDA errors, with their process, "
      "container and the kernels before them",
      run_errors);
  cmd->add_option("--kmsg", o->kmsg, "The kernel log: /dev/kmsg (default), or a saved log to replay");
  cmd->add_option("--kmsg-state", o->kmsg_state,
                  "Keep the last kernel-log sequence number read here, so that a restart reports no Xid twice");
  cmd->add_flag("--from-start", o->from_start, "Also the Xid lines already in the kernel log");
  cmd->add_option("--nvml", o->nvml,
                  "NVML, for its Xid and other critical events and the GPUs' UUIDs (default libnvidia-ml.so.1 where "
                  "it loads; without it, the kernel log only)");
  add_number(cmd, "--window", o->window_s,
             "Join a sticky error and an Xid of the same process this close (default 5); records wait this long "
             "for their partner",
             "seconds", 0, 3600);
  o->sites.add_to(cmd, "each kernel of a sticky error then names the call site most of its launches came from");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope errors                             # Xids and sticky CUDA errors, host-wide\n"
      "  gpuscope errors --json -p 1234 --stacks     # and the call sites of the kernels before a sticky error\n"
      "  gpuscope errors --kmsg saved-dmesg.txt -d 1 # replay a saved log");
}
GPUSCOPE_COMMAND(register_errors, 65);
GPUSCOPE_NEEDS(errors, 110, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {"tp_btf"});

}  // namespace gpuscope

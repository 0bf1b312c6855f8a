// gpuscope ioctl: ioctl, mmap and open calls on NVIDIA device nodes, per process and request.
#include <algorithm>

#include "core/cli.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/system.h"
#include "ioctl/ioctl_collector.h"
#include "ioctl/ioctl_view.h"

namespace gpuscope {

namespace {

struct IoctlOptions {
  CommonFlags common;
  Scope scope;
  bool events = false;        // one line per ioctl, as it returns
  bool raw_syscalls = false;  // raw_tp sys_enter/sys_exit even where tracefs works
  double interval_s = 0;
};

void report_losses(const IoctlStats& s) {
  if (s.state_full || s.map_full || s.ringbuf)
    fprintf(stderr, "gpuscope: not counted: %llu (state map full), %llu (counter map full); %llu events lost\n",
            (unsigned long long)s.state_full, (unsigned long long)s.map_full, (unsigned long long)s.ringbuf);
}

int run_ioctl(const IoctlOptions& o) {
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  IoctlCollector c({o.scope, o.events, o.raw_syscalls});
  IoctlView view({o.common.json, o.events, o.interval_s > 0, c.uvm_major()}, o.scope);
  std::unique_ptr<RingBuffer> rb;
  if (o.events) rb = std::make_unique<RingBuffer>(c.events_fd(), [&](const void* d, size_t n) { view.event(d, n); });
  fprintf(stderr, "gpuscope: counting ioctl/mmap on NVIDIA devices (major 195%s) via %s%s. Ctrl-C to end.\n",
          c.uvm_major() ? fmt::format(", nvidia-uvm {}", c.uvm_major()).c_str() : "; no nvidia-uvm in /proc/devices",
          c.raw() ? "raw_tp sys_enter/sys_exit" : "syscalls tracepoints",
          c.raw() ? (" (" + c.why_raw() + ")").c_str() : "");
  EventLoop loop(o.common.duration_s);
  if (rb) loop.watch(*rb);
  loop.after_wakeup([&] { view.flush(); });
  // No uprobe session admits the processes that start in the container scope: this does.
  if (o.scope.where.active())
    loop.every(2, [&] {
      o.scope.containers->sweep();
      o.scope.admit_all();
    });
  if (o.interval_s > 0) loop.every(o.interval_s, [&] { c.reset_max(view.interval(c.snapshot(), false)); });
  // -p ends with its processes.
  if (!o.scope.pids.empty())
    loop.every(0.1, [&] {
      if (std::none_of(o.scope.pids.begin(), o.scope.pids.end(), pid_exists)) loop.stop();
    });
  loop.run();
  c.detach();
  if (rb) rb->drain();
  view.interval(c.snapshot(), true);
  report_losses(c.stats());
  return 0;
}

}  // namespace

void register_ioctl(CLI::App& app) {
  auto [cmd, o] = new_command<IoctlOptions>(
      app, "ioctl", "Count ioctl and mmap calls on NVIDIA device nodes, per process and request", run_ioctl, false);
  cmd->add_flag("--events", o->events, "Also print one line per ioctl as it returns");
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default: once, at the end)", "seconds", 0.01,
             86400);
  cmd->add_flag("--raw-syscalls", o->raw_syscalls, "Use raw_tp sys_enter/sys_exit even where tracefs works");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope ioctl -d 10                 # which processes talk to the driver, and how\n"
      "  gpuscope ioctl -p 1234 --events --json\n"
      "  gpuscope ioctl -c python3");
}
GPUSCOPE_COMMAND(register_ioctl, 50);
GPUSCOPE_NEEDS(ioctl, 50, {{"privileges"}, {"tracefs", "raw_tp"}}, {});

}  // namespace gpuscope

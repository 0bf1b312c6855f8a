// gpuscope uvm: nvidia-uvm's fault servicing and thrashing addresses, every interval.
#include "core/cli.h"
#include "core/clock.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "uvm/uvm_collector.h"

namespace gpuscope {

namespace {

struct UvmOptions {
  CommonFlags common;
  double interval_s = 1;
  unsigned top = 10;
};

// Counts per interval (differences of the cumulative counters) and the most thrashed addresses.
class UvmView {
 public:
  explicit UvmView(const UvmOptions& o) : o_(o) {}
  void print(UvmSnapshot s);

 private:
  const UvmOptions& o_;
  Writer out_;
  uint64_t prev_[GS_UVM_COUNTERS] = {};
};

void UvmView::print(UvmSnapshot s) {
  uint64_t d[GS_UVM_COUNTERS];
  for (uint32_t i = 0; i < GS_UVM_COUNTERS; i++) {
    d[i] = s.counters[i] - prev_[i];
    prev_[i] = s.counters[i];
  }
  if (s.thrashing.size() > o_.top) s.thrashing.resize(o_.top);
  if (o_.common.json) {
    const uint64_t now = realtime_ns();
    JsonLine(out_.buf())
        .record("uvm", now)
        .num("replayable_fault_batches", d[GS_UVM_REPLAYABLE])
        .num("non_replayable_fault_batches", d[GS_UVM_NON_REPLAYABLE])
        .num("thrashing_events", d[GS_UVM_THRASHING])
        .end();
    for (auto& t : s.thrashing)
      JsonLine(out_.buf())
          .record("thrashing", now)
          .hex("address", t.address)
          .num("count", t.count)
          .num("last_pid", t.last_pid)
          .str("owner", UvmCollector::owner_of(t.address))
          .end();
  } else {
    auto it = std::back_inserter(out_.buf());
    fmt::format_to(it, "replayable fault servicing {}  non-replayable {}  thrashing {}\n", d[GS_UVM_REPLAYABLE],
                   d[GS_UVM_NON_REPLAYABLE], d[GS_UVM_THRASHING]);
    for (auto& t : s.thrashing)
      fmt::format_to(it, "  0x{:x}  {:>8}  owner {}\n", t.address, t.count, UvmCollector::owner_of(t.address));
  }
  out_.flush();
}

int run_uvm(const UvmOptions& o) {
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UvmCollector uvm;
  UvmView view(o);
  fprintf(stderr, "gpuscope: watching nvidia-uvm fault servicing through %s. Ctrl-C to end.\n", uvm.how().c_str());
  EventLoop loop(o.common.duration_s);
  loop.every(o.interval_s, [&] { view.print(uvm.snapshot()); });
  loop.run();
  uvm.detach();
  view.print(uvm.snapshot());
  return 0;
}

}  // namespace

void register_uvm(CLI::App& app) {
  auto [cmd, o] = new_command<UvmOptions>(
      app, "uvm", "Count nvidia-uvm fault servicing and catch thrashing addresses (kprobes or fentry)", run_uvm);
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default 1)", "seconds", 0.01, 86400);
  add_number(cmd, "--top", o->top, "Thrashing addresses to list per interval (default 10)", "rows", 0, 100000);
}
GPUSCOPE_COMMAND(register_uvm, 60);
GPUSCOPE_NEEDS(uvm, 60, {{"privileges"}, {"kprobes", "fentry"}, {"nvidia_uvm"}}, {});

}  // namespace gpuscope

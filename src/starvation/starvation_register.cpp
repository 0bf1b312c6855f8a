#include <memory>

#include "core/cli.h"
#include "core/host_needs.h"
#include "starvation/starvation_cmd.h"

namespace gpuscope {

void register_starvation(CLI::App& app) {
  auto [cmd, o] = new_command<StarvationOptions>(
      app, "starvation",
      "Threads burning CPU while their process's GPUs sit idle, with stacks (runs the bridge when none is running)",
      run_starvation);
  add_scope_flags(cmd, o->collector.scope, false);
  add_number(cmd, "--min-gpu-mem-bytes", o->collector.min_gpu_mem_bytes,
             "Only processes holding at least this much GPU memory on a device (default 1)", "bytes", 0,
             9007199254740992.0);
  add_number(cmd, "--min-idle-ms", o->collector.min_idle_ms,
             "GPU idle this long before CPU time counts (default 1000; at least 2x the bridge's poll)", "milliseconds",
             1, 86400000);
  add_number(cmd, "--stale-threshold-ms", o->collector.stale_threshold_ms,
             "No verdict on bridge data older than this (default 300)", "milliseconds", 1, 86400000);
  cmd->add_option("--pin-dir", o->collector.pin_dir, "bpffs directory of the bridge's pins (default /sys/fs/bpf)");
  cmd->add_option("--nvml", o->nvml,
                  "NVML library of the bridge starvation runs when none is publishing (default libnvidia-ml.so.1)");
  cmd->add_flag("--collect-ustack", o->collector.collect_ustack, "Add the symbolized user stack to each row");
  cmd->add_flag("--collect-kstack", o->collector.collect_kstack, "Add the kernel stack to each row");
  cmd->add_flag("--no-py-frames", o->collector.no_py_frames,
                "Do not read CPython frames from the interpreter's memory (perf maps still name -X perf frames)");
  add_number(cmd, "--sample-hz", o->collector.sample_hz, "cpu-clock samples per second per CPU (default 49)",
             "samples per second", 1, 1000);
  cmd->add_option("--folded", o->folded, "Write folded stacks weighted by sampled ns (flamegraph.pl input)");
  cmd->add_option("--svg", o->svg, "Write the flame graph as SVG");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope starvation                                # every GPU process, one row per thread per second\n"
      "  gpuscope bridge & gpuscope starvation              # the same, the bridge shared with other readers\n"
      "  gpuscope starvation -p 1234 --collect-ustack --json\n"
      "  gpuscope starvation -c python3 -d 30 --folded out.folded --svg out.svg");
}
GPUSCOPE_COMMAND(register_starvation, 70);
GPUSCOPE_NEEDS(starvation, 70, {{"privileges"}, {"nvml"}, {"bpffs"}, {"tp_btf"}, {"perf_events"}}, {});

}  // namespace gpuscope

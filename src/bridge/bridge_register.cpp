#include <memory>

#include "core/cli.h"
#include "core/host_needs.h"
#include "bridge/bridge.h"

namespace gpuscope {

void register_bridge(CLI::App& app) {
  auto o = std::make_shared<BridgeOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto* cmd = app.add_subcommand("bridge", "Publish NVML GPU state into pinned BPF maps (gpu-ebpf-bridge layout)");
  add_common_flags(cmd, *common);
  cmd->add_option("--nvml", o->nvml, "NVML library to load (default libnvidia-ml.so.1)");
  cmd->add_option("--pin-dir", o->pin_dir, "bpffs directory for the pins (default /sys/fs/bpf)");
  add_number(cmd, "--poll-interval-ms", o->poll_interval_ms, "Poll NVML every MS milliseconds (default 100)",
             "milliseconds", 1, 3600000);
  add_number(cmd, "--detail-interval-ms", o->detail_interval_ms,
             "Read device details (memory, temperature, power, clocks, ECC) and processes at most every MS "
             "milliseconds; utilization every poll (default 0: everything every poll)",
             "milliseconds", 0, 3600000);
  cmd->add_flag("--no-samples", o->no_samples, "Poll only; ignore NVML's utilization sample buffer");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope bridge                          # pins under /sys/fs/bpf, 100 ms polls\n"
      "  gpuscope bridge --json -d 5              # print what each tick published\n"
      "  gpuscope bridge --pin-dir /sys/fs/bpf/gpu --poll-interval-ms 50");
  add_command(cmd, [=] { return run_bridge(with_shared(*o, *common)); });
}
GPUSCOPE_COMMAND(register_bridge, 80);
GPUSCOPE_NEEDS(bridge, 80, {{"privileges"}, {"nvml"}, {"bpffs"}}, {});

}  // namespace gpuscope

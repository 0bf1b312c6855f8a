#include <memory>

#include "core/cli.h"
#include "latency/latency_cmd.h"

namespace gpuscope {

void register_latency(CLI::App& app) {
  auto o = std::make_shared<LatencyOptions>();  // held by the command registry until exit
  auto common = std::make_shared<CommonFlags>();
  auto scope = std::make_shared<Scope>();
  auto* cmd =
      app.add_subcommand("latency", "Histograms of CUDA API call latency and return-code counts, aggregated in BPF");
  add_common_flags(cmd, *common);
  add_scope_flags(cmd, *scope);
  cmd->add_option("--api", o->apis,
                  "APIs to time (comma-separated; default cudaMalloc,cudaFree,cudaMemcpy,"
                  "cudaStreamSynchronize,cudaDeviceSynchronize,cuLaunchKernel,cuMemAlloc_v2)")
      ->delimiter(',');
  cmd->add_flag("--per-process", o->per_process, "One histogram per process");
  add_number(cmd, "--interval", o->interval_s, "Print every SECONDS (default: once, at the end)", "seconds", 0.01,
             86400);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope latency -d 10                       # default APIs, host-wide, printed at the end\n"
      "  gpuscope latency --api cudaMalloc --interval 1 --per-process\n"
      "  gpuscope latency -p 1234 --json");
  add_command(cmd, [=] { return run_latency(with_shared(*o, *common, scope.get())); });
}

}  // namespace gpuscope

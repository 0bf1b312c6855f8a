#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/system.h"
#include "trace/trace.h"

namespace gpuscope {
int run_doctor(bool json);
}

using namespace gpuscope;

namespace {

// Flags every subcommand shares.
struct Common {
  double duration = 0;
  bool json = false;
  bool verbose = false;
};

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("-d,--duration", c.duration, "Stop after SECONDS (default: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", c.json, "Print JSON lines");
  cmd->add_flag("-v,--verbose", c.verbose, "Show libbpf's messages and attach details");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuscope: eBPF observability for CUDA workloads"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuscope 0.1.0");

  Common common;
  TraceOptions topt;
  auto* trace = app.add_subcommand("trace", "Trace CUDA runtime and driver API calls");
  add_common(trace, common);
  trace->add_option("-p,--pid", topt.pids, "Trace only these host pids (repeatable)");
  trace->add_option("-c,--comm", topt.comm, "Trace only processes with this name");
  trace->add_option("--lib", topt.libs, "Also probe this CUDA library or executable (repeatable)");
  trace->add_option("--api", topt.apis, "Trace only these APIs (comma-separated; variants included)")->delimiter(',');
  trace->add_option("--layer", topt.layer, "runtime, driver or all (default all)");
  trace->add_flag("-r", topt.hide_exits, "Entry only: no exit probes, no return codes");
  trace->add_flag("-t", topt.no_timestamps, "Drop timestamps");
  trace->add_option("--ringbuf-kb", topt.ringbuf_kb, "Ring buffer size in KiB, a power of two (default 4096)")
      ->check(CLI::Range(4u, 1u << 20));
  trace->footer(
      "EXAMPLES:\n"
      "  gpuscope trace                     # every CUDA call on the host\n"
      "  gpuscope trace -p 1234 --json      # one process, JSON lines\n"
      "  gpuscope trace --api cudaMalloc,cuMemAlloc_v2 -d 10\n"
      "  gpuscope trace --layer driver -c python3");

  bool doctor_json = false;
  auto* doctor = app.add_subcommand("doctor", "Check what this host supports and which subcommands will work");
  Common dcommon;
  add_common(doctor, dcommon);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fprintf(stderr, "gpuscope: %s\n", e.what());
    return 2;
  }

  StopControl::install_signal_handlers();
  try {
    if (trace->parsed()) {
      topt.duration_s = common.duration;
      topt.json = common.json;
      topt.verbose = common.verbose;
      unsigned kb = topt.ringbuf_kb;
      if (kb & (kb - 1)) throw UsageError("--ringbuf-kb must be a power of two");
      return run_trace(topt);
    }
    if (doctor->parsed()) return run_doctor(dcommon.json || doctor_json);
  } catch (const UsageError& e) {
    fprintf(stderr, "gpuscope: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuscope: %s\n", e.what());
    return 1;
  }
  return 0;
}

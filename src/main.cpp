#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/system.h"
#include "ioctl/ioctl_cmd.h"
#include "kernels/kernels_cmd.h"
#include "memleak/memleak_cmd.h"
#include "starvation/starvation_cmd.h"
#include "latency/latency_cmd.h"
#include "uvm/uvm_cmd.h"
#include "trace/trace.h"
#include "bridge/bridge.h"

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

// The shared flags, into a subcommand's options.
template <class Options>
Options& with_common(Options& o, const Common& c) {
  o.duration_s = c.duration;
  o.json = c.json;
  o.verbose = c.verbose;
  return o;
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

  LatencyOptions lopt;
  auto* latency = app.add_subcommand("latency", "Histograms of CUDA API call latency and return-code counts, aggregated in BPF");
  add_common(latency, common);
  latency->add_option("-p,--pid", lopt.pids, "Only these host pids (repeatable)");
  latency->add_option("-c,--comm", lopt.comm, "Only processes with this name");
  latency->add_option("--lib", lopt.libs, "Also probe this CUDA library or executable (repeatable)");
  latency->add_option("--api", lopt.apis, "APIs to time (comma-separated; default cudaMalloc,cudaFree,cudaMemcpy,"
                      "cudaStreamSynchronize,cudaDeviceSynchronize,cuLaunchKernel,cuMemAlloc_v2)")->delimiter(',');
  latency->add_flag("--per-process", lopt.per_process, "One histogram per process");
  latency->add_option("--interval", lopt.interval_s, "Print every SECONDS (default: once, at the end)")
      ->check(CLI::PositiveNumber);
  latency->footer(
      "EXAMPLES:\n"
      "  gpuscope latency -d 10                       # default APIs, host-wide, printed at the end\n"
      "  gpuscope latency --api cudaMalloc --interval 1 --per-process\n"
      "  gpuscope latency -p 1234 --json");

  KernelsOptions kopt;
  auto* kernels = app.add_subcommand("kernels", "Count kernel launches per process and kernel, named, counted in BPF");
  add_common(kernels, common);
  kernels->add_option("-p,--pid", kopt.pids, "Only these host pids (repeatable)");
  kernels->add_option("-c,--comm", kopt.comm, "Only processes with this name");
  kernels->add_option("--lib", kopt.libs, "Also probe this CUDA library or executable (repeatable)");
  kernels->add_option("--interval", kopt.interval_s, "Print every SECONDS (default 1)")->check(CLI::PositiveNumber);
  kernels->add_option("--top", kopt.top, "Show only the N busiest rows (default all)")->check(CLI::PositiveNumber);
  kernels->footer(
      "EXAMPLES:\n"
      "  gpuscope kernels                     # every process's launches, refreshed each second\n"
      "  gpuscope kernels -p 1234 --top 20\n"
      "  gpuscope kernels -c python3 --json --interval 5");

  MemleakOptions mopt;
  auto* memleak = app.add_subcommand("memleak", "Track live GPU allocations per process; leak report when a process exits");
  add_common(memleak, common);
  memleak->add_option("-p,--pid", mopt.pids, "Only these host pids (repeatable)");
  memleak->add_option("-c,--comm", mopt.comm, "Only processes with this name");
  memleak->add_option("--lib", mopt.libs, "Also probe this CUDA library or executable (repeatable)");
  memleak->add_option("--interval", mopt.interval_s, "Print the per-process summary every SECONDS (default 5)")
      ->check(CLI::PositiveNumber);
  memleak->add_option("--min-age", mopt.min_age_s, "List live allocations older than SECONDS as suspected leaks")
      ->check(CLI::PositiveNumber);
  memleak->add_flag("--stacks", mopt.stacks, "Record and symbolize the allocating user stack");
  memleak->footer(
      "EXAMPLES:\n"
      "  gpuscope memleak                        # every process, summary every 5 s, leak report at exit\n"
      "  gpuscope memleak -p 1234 --min-age 60   # also list allocations older than a minute\n"
      "  gpuscope memleak -c python3 --stacks --json");

  IoctlOptions iopt;
  auto* ioctl = app.add_subcommand("ioctl", "Count ioctl and mmap calls on NVIDIA device nodes, per process and request");
  add_common(ioctl, common);
  ioctl->add_option("-p,--pid", iopt.pids, "Only these host pids (repeatable)");
  ioctl->add_flag("--events", iopt.events, "Also print one line per ioctl as it returns");
  ioctl->add_option("--interval", iopt.interval_s, "Print every SECONDS (default: once, at the end)")
      ->check(CLI::PositiveNumber);
  ioctl->add_flag("--raw-syscalls", iopt.raw_syscalls, "Use raw_tp sys_enter/sys_exit even where tracefs works");
  ioctl->footer(
      "EXAMPLES:\n"
      "  gpuscope ioctl -d 10                 # which processes talk to the driver, and how\n"
      "  gpuscope ioctl -p 1234 --events --json");

  UvmOptions uopt;
  auto* uvm = app.add_subcommand("uvm", "Count nvidia-uvm fault servicing and catch thrashing addresses (kprobes or fentry)");
  add_common(uvm, common);
  uvm->add_option("--interval", uopt.interval_s, "Print every SECONDS (default 1)")->check(CLI::PositiveNumber);
  uvm->add_option("--top", uopt.top, "Thrashing addresses to list per interval (default 10)");

  StarvationOptions sopt;
  auto* starvation = app.add_subcommand(
      "starvation", "Threads burning CPU while their process's GPUs sit idle, with stacks (needs `gpuscope bridge`)");
  add_common(starvation, common);
  starvation->add_option("-p,--pid", sopt.pids, "Only these host pids (repeatable)");
  starvation->add_option("-c,--comm", sopt.comm, "Only processes with this name");
  starvation->add_option("--min-gpu-mem-bytes", sopt.min_gpu_mem_bytes,
                         "Only processes holding at least this much GPU memory on a device (default 1)");
  starvation->add_option("--min-idle-ms", sopt.min_idle_ms,
                         "GPU idle this long before CPU time counts (default 1000; at least 2x the bridge's poll)");
  starvation->add_option("--stale-threshold-ms", sopt.stale_threshold_ms,
                         "No verdict on bridge data older than this (default 300)");
  starvation->add_option("--pin-dir", sopt.pin_dir, "bpffs directory of the bridge's pins (default /sys/fs/bpf)");
  starvation->add_flag("--collect-ustack", sopt.collect_ustack, "Add the symbolized user stack to each row");
  starvation->add_flag("--collect-kstack", sopt.collect_kstack, "Add the kernel stack to each row");
  starvation->add_option("--sample-hz", sopt.sample_hz, "cpu-clock samples per second per CPU (default 49)")
      ->check(CLI::Range(1u, 1000u));
  starvation->add_option("--folded", sopt.folded, "Write folded stacks weighted by sampled ns (flamegraph.pl input)");
  starvation->add_option("--svg", sopt.svg, "Write the flame graph as SVG");
  starvation->footer(
      "EXAMPLES:\n"
      "  gpuscope bridge &                                  # publishes GPU state; starvation reads it\n"
      "  gpuscope starvation                                # every GPU process, one row per thread per second\n"
      "  gpuscope starvation -p 1234 --collect-ustack --json\n"
      "  gpuscope starvation -c python3 -d 30 --folded out.folded --svg out.svg");

  bool doctor_json = false;
  BridgeOptions bopt;
  auto* bridge = app.add_subcommand("bridge", "Publish NVML GPU state into pinned BPF maps (gpu-ebpf-bridge layout)");
  add_common(bridge, common);
  bridge->add_option("--nvml", bopt.nvml, "NVML library to load (default libnvidia-ml.so.1)");
  bridge->add_option("--pin-dir", bopt.pin_dir, "bpffs directory for the pins (default /sys/fs/bpf)");
  bridge->add_option("--poll-interval-ms", bopt.poll_interval_ms, "Poll NVML every MS milliseconds (default 100)");
  bridge->add_flag("--no-samples", bopt.no_samples, "Poll only; ignore NVML's utilization sample buffer");
  bridge->footer(
      "EXAMPLES:\n"
      "  gpuscope bridge                          # pins under /sys/fs/bpf, 100 ms polls\n"
      "  gpuscope bridge --json -d 5              # print what each tick published\n"
      "  gpuscope bridge --pin-dir /sys/fs/bpf/gpu --poll-interval-ms 50");

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
      unsigned kb = topt.ringbuf_kb;
      if (kb & (kb - 1)) throw UsageError("--ringbuf-kb must be a power of two");
      return run_trace(with_common(topt, common));
    }
    if (latency->parsed()) return run_latency(with_common(lopt, common));
    if (kernels->parsed()) return run_kernels(with_common(kopt, common));
    if (memleak->parsed()) return run_memleak(with_common(mopt, common));
    if (starvation->parsed()) return run_starvation(with_common(sopt, common));
    if (bridge->parsed()) return run_bridge(with_common(bopt, common));
    if (ioctl->parsed()) return run_ioctl(with_common(iopt, common));
    if (uvm->parsed()) return run_uvm(with_common(uopt, common));
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

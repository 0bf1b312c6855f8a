// What one hand-off of libgpuscope-cupti.so costs the process: GS_GT_BATCH_MAX records handed
// to gpuscope_cupti_buffer with nothing attached, under a bare counting uprobe, and under
// `gpuscope kernels` (its uprobe copies the records into the ring buffer). Modes interleave
// round by round; each figure is the median ns per hand-off. Also the idle library's CPU time.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "gputime/gputime.h"
#include "bare.skel.h"
#include "harness.h"

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"libgpuscope-cupti.so hand-off cost against a bare uprobe"};
  std::string gpuscope, lib, handoff, cupti_dir = "/usr/local/cuda/lib64";
  int rounds = 5, calls = 200;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--lib", lib, "libgpuscope-cupti.so (the one beside gpuscope)")->required();
  app.add_option("--handoff", handoff, "the gputime_handoff workload")->required();
  app.add_option("--cupti-dir", cupti_dir, "where libcupti is, for the idle measurement");
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_option("--calls", calls, "Hand-offs per round");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();
  auto* bare = bare_bpf__open_and_load();
  if (!bare) throw std::runtime_error("cannot load the bare programs");
  auto syms = ElfSymbols::read(lib);
  auto* site = syms.find("gpuscope_cupti_buffer");
  if (!site) throw std::runtime_error(lib + " has no gpuscope_cupti_buffer");
  auto attach_bare = [&] {
    std::vector<Link> links;
    std::string err;
    links.push_back(attach_uprobe(bare->progs.bare_enter, {lib, site->file_offset, -1, 0, false}, &err));
    if (!err.empty()) throw std::runtime_error("attach: " + err);
    return links;
  };
  std::string workload = handoff + " " + lib + " " + std::to_string(calls);
  auto c =
      compare_with_bare(rounds, workload, "bare", attach_bare, "gpuscope",
                        {gpuscope, "kernels", "-c", "gputime_handoff", "--interval", "3600"}, "gpuscope: counting");
  std::string idle = run_output("GPUSCOPE_CUPTI_PATH=" + cupti_dir + " " + handoff + " " + lib + " idle 3");
  double idle_ns = -1;
  if (auto p = idle.find("idle_cpu_ns_per_s="); p != std::string::npos) idle_ns = std::stod(idle.substr(p + 18));
  if (json_out) {
    nlohmann::json j = c.json(1, rounds);
    j["records_per_call"] = GS_GT_BATCH_MAX;
    j["idle_cpu_ns_per_s"] = idle_ns;
    printf("%s\n", j.dump().c_str());
  } else {
    printf("one hand-off of %d records, median of %d rounds, ns:\n", GS_GT_BATCH_MAX, rounds);
    c.print_modes();
    printf("added cost, gpuscope / bare uprobe:  %.1fx per hand-off, %.1f ns per record\n", c.added(),
           (c.ns.at("gpuscope") - c.ns.at("none")) / GS_GT_BATCH_MAX);
    printf("idle library (no gpuscope): %.0f ns of CPU per second (its thread's flag checks)\n", idle_ns);
  }
  bare_bpf__destroy(bare);
  return 0;
}

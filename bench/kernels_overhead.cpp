// Per-launch cost of `gpuscope kernels` against bare uprobes on the same sites: an entry
// probe on every launch symbol and an exit probe on the runtime ones, as kernels attaches
// them. Modes interleave round by round (none, bare, kernels); the workload prints
// "ns_per_call=X"; each figure is the median over rounds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "harness.h"
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "kernels_bare.skel.h"
#include "trace/trace.h"

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"gpuscope kernels overhead against bare uprobes on the same sites"};
  std::string gpuscope, workload;
  std::vector<std::string> libs;
  int rounds = 5;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--workload", workload, "Command that prints ns_per_call=X")->required();
  app.add_option("--lib", libs, "Libraries whose launch sites are probed")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  const std::vector<std::pair<const char*, bool>> launch = {
      {"cudaLaunchKernel", true}, {"cudaLaunchKernelExC", true}, {"cudaGraphLaunch", true},
      {"cuLaunchKernel", false},  {"cuLaunchKernelEx", false},   {"cuGraphLaunch", false}};
  auto* bare = kernels_bare_bpf__open_and_load();
  if (!bare) throw std::runtime_error("cannot load the bare programs");
  struct Site {
    std::string path;
    uint64_t off;
    bool exit;
  };
  std::vector<Site> sites;
  for (auto& lib : libs) {
    auto syms = ElfSymbols::read(lib);
    for (auto& [name, exit] : launch)
      for (const char* suf : kApiVariantSuffixes)
        if (auto* s = syms.find(std::string(name) + suf)) sites.push_back({lib, s->file_offset, exit});
  }
  std::vector<std::string> argv_kernels{gpuscope, "kernels", "--interval", "1"};
  for (auto& l : libs) argv_kernels.insert(argv_kernels.end(), {"--lib", l});
  auto attach_bare = [&] {
    std::vector<Link> links;
    std::string err;
    for (auto& s : sites) {
      links.push_back(attach_uprobe(bare->progs.bare_enter, {s.path, s.off, -1, 0, false}, &err));
      if (s.exit) links.push_back(attach_uprobe(bare->progs.bare_exit, {s.path, s.off, -1, 0, true}, &err));
    }
    if (!err.empty()) throw std::runtime_error("attach: " + err);
    return links;
  };
  auto c = compare_with_bare(rounds, workload, "bare", attach_bare, "kernels", argv_kernels, "gpuscope: counting");

  // One more run, outside the timed rounds, with the kernel's BPF statistics on: how often
  // each of gpuscope's programs ran per workload call, and for how long. A program that runs
  // on every call but is not a launch site shows up here.
  std::map<std::string, ProgStats> stats;
  uint64_t calls = 0;
  if (int sfd = bpf_enable_stats(BPF_STATS_RUN_TIME); sfd >= 0) {
    BgProc p(argv_kernels, "gpuscope: counting");
    std::string out = run_output(workload);
    std::smatch m;
    static const std::regex re(R"(calls=([0-9]+))");
    if (std::regex_search(out, m, re)) calls = std::stoull(m[1]);
    stats = bpf_prog_stats("gs_k_");
    close(sfd);
  }
  if (json_out) {
    nlohmann::json j = c.json(sites.size(), rounds);
    if (calls)
      for (auto& [name, st] : stats)
        j["programs_per_call"][name] = {{"runs", double(st.runs) / double(calls)},
                                        {"ns_per_run", st.runs ? double(st.run_time_ns) / double(st.runs) : 0.0}};
    printf("%s\n", j.dump().c_str());
  } else {
    printf("%zu launch sites, median of %d rounds, ns per workload iteration:\n", sites.size(), rounds);
    c.print_modes();
    printf("added cost, kernels / bare uprobes:  %.3fx (goal <= 1.1)\n", c.added());
    printf("per launch, kernels / bare uprobes:  %.3fx\n", c.total());
    if (calls) {
      printf("gpuscope's programs per workload call (separate run, BPF stats on; their clock reads included):\n");
      for (auto& [name, st] : stats)
        if (st.runs * 100 >= calls)  // at least once per 100 calls: not the odd process exit
          printf("  %-16s %6.3f runs  %7.1f ns/run\n", name.c_str(), double(st.runs) / double(calls),
                 double(st.run_time_ns) / double(st.runs));
    }
  }
  kernels_bare_bpf__destroy(bare);
  return 0;
}

// Per-call cost of gpuscope latency against bare uprobe+uretprobe pairs on the same sites,
// modes interleaved round by round: none, bare_pair, latency. The workload prints
// "ns_per_call=X"; each figure is the median over rounds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "bare.skel.h"
#include "harness.h"
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "trace/trace.h"

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"gpuscope latency overhead against bare uprobe+uretprobe pairs"};
  std::string gpuscope, workload;
  std::vector<std::string> libs, apis{"cudaLaunchKernel", "cuLaunchKernel"};
  int rounds = 5;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--workload", workload, "Command that prints ns_per_call=X")->required();
  app.add_option("--lib", libs, "Libraries whose API sites are probed")->required();
  app.add_option("--api", apis, "APIs timed (default cudaLaunchKernel,cuLaunchKernel)")->delimiter(',');
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  auto selected = select_apis(apis, "all");
  std::vector<std::pair<std::string, std::vector<uint64_t>>> sites;
  size_t nsites = 0;
  for (auto& lib : libs) {
    auto syms = ElfSymbols::read(lib);
    std::vector<uint64_t> offs;
    for (unsigned api = 0; api < GS_API_COUNT; api++)
      if (selected[api])
        for (const char* suf : kApiVariantSuffixes)
          if (auto* sym = syms.find(std::string(api_symbol(api)) + suf)) offs.push_back(sym->file_offset);
    std::sort(offs.begin(), offs.end());
    offs.erase(std::unique(offs.begin(), offs.end()), offs.end());
    nsites += offs.size();
    if (!offs.empty()) sites.push_back({lib, offs});
  }
  auto* bare = bare_bpf__open();
  prepare_uprobe_multi(bare->progs.bare_enter);
  prepare_uprobe_multi(bare->progs.bare_exit);
  if (bare_bpf__load(bare)) throw std::runtime_error("cannot load the bare programs");

  std::string api_list;
  for (auto& a : apis) api_list += (api_list.empty() ? "" : ",") + a;
  std::vector<std::string> argv_latency{gpuscope, "latency", "--api", api_list};
  for (auto& l : libs) argv_latency.insert(argv_latency.end(), {"--lib", l});
  auto attach_bare = [&] {
    std::vector<Link> links;
    for (auto& [path, offs] : sites)
      for (bool ret : {false, true}) {
        UprobeMultiTarget t{path, offs, std::vector<uint64_t>(offs.size(), 0), -1, ret};
        std::string err;
        links.push_back(attach_uprobe_multi(ret ? bare->progs.bare_exit : bare->progs.bare_enter, t, &err));
        if (!err.empty()) throw std::runtime_error("attach " + path + ": " + err);
      }
    return links;
  };
  auto c = compare_with_bare(rounds, workload, "bare_pair", attach_bare, "latency", argv_latency, "gpuscope: timing");
  if (json_out) {
    printf("%s\n", c.json(nsites, rounds).dump().c_str());
  } else {
    printf("%zu probe sites (%s), median of %d rounds, ns per workload iteration:\n", nsites, api_list.c_str(), rounds);
    c.print_modes();
    printf("added cost, latency / bare uprobe+uretprobe:  %.3fx (goal <= 1.5)\n", c.added());
    printf("per call,   latency / bare uprobe+uretprobe:  %.3fx\n", c.total());
  }
  bare_bpf__destroy(bare);
  return 0;
}

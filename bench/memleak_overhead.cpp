// Per-iteration cost of `gpuscope memleak` against bare uprobe+uretprobe pairs on the same
// sites: every allocation and free symbol memleak probes, entry and exit, attached the way
// memleak attaches them (uprobe_multi where the kernel has it). Modes interleave round by
// round (none, bare, memleak); the workload prints "ns_per_call=X" (one cudaMalloc and one
// cudaFree per iteration, each reaching the driver); each figure is the median over rounds.
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
#include "memleak/memleak.h"
#include "bare.skel.h"
#include "trace/trace.h"

using namespace gpuscope;

namespace {}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuscope memleak overhead against bare uprobe+uretprobe pairs on the same sites"};
  std::string gpuscope, workload;
  std::vector<std::string> libs;
  int rounds = 5;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--workload", workload, "Command that prints ns_per_call=X")->required();
  app.add_option("--lib", libs, "Libraries whose allocation sites are probed")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  bare_bpf* bare = nullptr;
  bool multi = false;
  for (bool m : {true, false}) {
    bare = bare_bpf__open();
    if (!bare) throw std::runtime_error("cannot open the bare programs");
    if (m) prepare_uprobe_multi(bare->progs.bare_enter), prepare_uprobe_multi(bare->progs.bare_exit);
    if (bare_bpf__load(bare) == 0) {
      multi = m;
      break;
    }
    bare_bpf__destroy(bare);
    bare = nullptr;
  }
  if (!bare) throw std::runtime_error("cannot load the bare programs");
  std::vector<UprobeMultiTarget> targets;
  size_t nsites = 0;
  for (auto& lib : libs) {
    auto syms = ElfSymbols::read(lib);
    UprobeMultiTarget t;
    t.path = lib;
    for (unsigned row = 0; row < GS_API_COUNT; row++)
      for (const char* suf : kApiVariantSuffixes)
        if (auto* s = api_has_role(row, GS_ROLE_MEM) ? syms.find(std::string(api_symbol(row)) + suf) : nullptr;
            s && std::find(t.offsets.begin(), t.offsets.end(), s->file_offset) == t.offsets.end())
          t.offsets.push_back(s->file_offset), t.cookies.push_back(0);
    nsites += t.offsets.size();
    targets.push_back(std::move(t));
  }
  std::vector<std::string> argv_memleak{gpuscope, "memleak", "--interval", "1"};
  for (auto& l : libs) argv_memleak.insert(argv_memleak.end(), {"--lib", l});
  auto attach_bare = [&] {
    std::vector<Link> links;
    std::string err;
    for (auto& t : targets)
      for (bool ret : {false, true}) {
        bpf_program* prog = ret ? bare->progs.bare_exit : bare->progs.bare_enter;
        t.retprobe = ret;
        if (multi)
          links.push_back(attach_uprobe_multi(prog, t, &err));
        else
          for (size_t i = 0; i < t.offsets.size(); i++)
            links.push_back(attach_uprobe(prog, {t.path, t.offsets[i], -1, 0, ret}, &err));
      }
    if (!err.empty()) throw std::runtime_error("attach: " + err);
    return links;
  };
  auto c = compare_with_bare(rounds, workload, "bare", attach_bare, "memleak", argv_memleak, "gpuscope: tracking");
  if (json_out) {
    nlohmann::json j = c.json(nsites, rounds);
    j["uprobe_multi"] = multi;
    printf("%s\n", j.dump().c_str());
  } else {
    printf("%zu allocation/free sites (entry+exit each, %s), median of %d rounds, ns per cudaMalloc+cudaFree:\n",
           nsites, multi ? "uprobe_multi" : "perf-event uprobes", rounds);
    c.print_modes();
    printf("added cost, memleak / bare uprobe+uretprobe pairs:  %.3fx (goal <= 1.5)\n", c.added());
    printf("per iteration, memleak / bare:                      %.3fx\n", c.total());
  }
  bare_bpf__destroy(bare);
  return 0;
}

// Per-call cost of gpuscope trace against the bare-uprobe floor, measured in one run.
// Modes, interleaved round by round so drift hits them all alike:
//   none        no probes
//   bare_entry  counting uprobes on every site gpuscope probes
//   trace_entry gpuscope trace -r (entry events only)
//   bare_pair   counting uprobe + uretprobe on those sites
//   trace_full  gpuscope trace (entry + exit events, JSON to /dev/null)
// The workload prints "ns_per_call=X"; each figure is the median over rounds.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bare.skel.h"
#include "harness.h"
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "trace/trace.h"

using namespace gpuscope;

namespace {

struct Sites {
  std::string path;
  std::vector<uint64_t> offsets;
};

std::vector<Sites> sites_of(const std::vector<std::string>& libs) {
  std::vector<Sites> out;
  for (auto& lib : libs) {
    auto syms = ElfSymbols::read(lib);
    Sites s{lib, {}};
    for (unsigned api = 0; api < GS_API_COUNT; api++)
      for (const char* suf : kApiVariantSuffixes)
        if (auto* sym = syms.find(std::string(api_symbol(api)) + suf)) s.offsets.push_back(sym->file_offset);
    std::sort(s.offsets.begin(), s.offsets.end());
    s.offsets.erase(std::unique(s.offsets.begin(), s.offsets.end()), s.offsets.end());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuscope trace overhead against bare uprobes"};
  std::string gpuscope, workload;
  std::vector<std::string> libs;
  int rounds = 5;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--workload", workload, "Command that prints ns_per_call=X")->required();
  app.add_option("--lib", libs, "Libraries whose API sites are probed")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  auto sites = sites_of(libs);
  size_t nsites = 0;
  for (auto& s : sites) nsites += s.offsets.size();
  auto* bare = bare_bpf__open();
  prepare_uprobe_multi(bare->progs.bare_enter);
  prepare_uprobe_multi(bare->progs.bare_exit);
  if (bare_bpf__load(bare)) throw std::runtime_error("cannot load the bare programs");
  auto attach_bare = [&](bool pair) {
    std::vector<Link> links;
    for (auto& s : sites) {
      UprobeMultiTarget t{s.path, s.offsets, std::vector<uint64_t>(s.offsets.size(), 0), -1, false};
      std::string err;
      links.push_back(attach_uprobe_multi(bare->progs.bare_enter, t, &err));
      if (pair) {
        t.retprobe = true;
        links.push_back(attach_uprobe_multi(bare->progs.bare_exit, t, &err));
      }
      if (!err.empty()) throw std::runtime_error("attach " + s.path + ": " + err);
    }
    return links;
  };

  const std::vector<std::string> modes{"none", "bare_entry", "trace_entry", "bare_pair", "trace_full"};
  auto med = interleaved_medians(rounds, modes, [&](const std::string& m) {
    double v;
    if (m == "none") {
      v = ns_per_call(workload);
    } else if (m.rfind("bare", 0) == 0) {
      auto links = attach_bare(m == "bare_pair");
      v = ns_per_call(workload);
      destroy_links(links);
    } else {
      std::vector<std::string> a{gpuscope, "trace", "--json"};
      if (m == "trace_entry") a.push_back("-r");
      for (auto& l : libs) a.insert(a.end(), {"--lib", l});
      BgProc t(a, "tracing");
      v = ns_per_call(workload);
    }
    return v;
  });
  auto added = [&](const std::string& m) { return med[m] - med["none"]; };
  double entry_ratio = added("trace_entry") / added("bare_entry");
  double full_ratio = added("trace_full") / added("bare_pair");
  if (json_out) {
    nlohmann::json j;
    j["sites"] = nsites;
    j["rounds"] = rounds;
    for (auto& [m, v] : med) j["ns_per_call"][m] = v;
    j["added_cost_ratio"]["entry_vs_bare_entry"] = entry_ratio;
    j["added_cost_ratio"]["full_vs_bare_pair"] = full_ratio;
    j["total_ratio"]["entry_vs_bare_entry"] = med["trace_entry"] / med["bare_entry"];
    j["total_ratio"]["full_vs_bare_pair"] = med["trace_full"] / med["bare_pair"];
    printf("%s\n", j.dump().c_str());
  } else {
    printf("%zu probe sites, median of %d rounds, ns per call:\n", nsites, rounds);
    for (auto& m : modes) printf("  %-12s %10.1f  (+%.1f)\n", m.c_str(), med[m], added(m));
    printf("added cost, trace -r / bare uprobe:            %.3fx (goal <= 1.1)\n", entry_ratio);
    printf("added cost, trace / bare uprobe+uretprobe:     %.3fx (goal <= 1.5)\n", full_ratio);
    printf("per call,   trace -r / bare uprobe:            %.3fx\n", med["trace_entry"] / med["bare_entry"]);
    printf("per call,   trace / bare uprobe+uretprobe:     %.3fx\n", med["trace_full"] / med["bare_pair"]);
  }
  bare_bpf__destroy(bare);
  return 0;
}

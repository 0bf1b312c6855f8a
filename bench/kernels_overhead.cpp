// Per-launch cost of `gpuscope kernels` against bare uprobes on the same sites. With
// --count-layer driver (the default, as on a host with the NVIDIA driver loaded) the floor is
// a bare counting entry probe on the driver's launch symbols alone, and today's runtime+driver
// counting (--count-layer both) runs in the same rounds for comparison; with both, the floor
// is an entry probe on every launch symbol and an exit probe on the runtime ones, as kernels
// attaches them then. Modes interleave round by round; the workload prints "ns_per_call=X";
// each figure is the median over rounds.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "harness.h"
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "bare.skel.h"
#include "trace/trace.h"

using namespace gpuscope;

int main(int argc, char** argv) {
  CLI::App app{"gpuscope kernels overhead against bare uprobes on the same sites"};
  std::string gpuscope, workload;
  std::vector<std::string> libs;
  int rounds = 5;
  bool json_out = false;
  bool hold = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary");
  app.add_option("--workload", workload, "Command that prints ns_per_call=X");
  // The floor as a third arm of a step-time comparison made elsewhere (tests/gpu check 97).
  app.add_flag("--hold", hold, "Only attach the bare probes, print 'floor attached', hold them until SIGINT/SIGTERM");
  app.add_option("--lib", libs, "Libraries whose launch sites are probed")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  std::string layer = "driver";
  app.add_option("--count-layer", layer, "gpuscope kernels --count-layer (driver or both)")
      ->check(CLI::IsMember({"driver", "both"}));
  app.add_flag("--json", json_out, "Print one JSON object");
  // What the kernel's way of attaching costs: gpuscope attaches uprobe_multi links, and the
  // agent's launch programs as uprobe sessions; the floor is one perf-event uprobe per site.
  std::string floor_attach = "perf";
  app.add_option("--floor-attach", floor_attach, "How the bare entry probes attach: perf, multi or session")
      ->check(CLI::IsMember({"perf", "multi", "session"}));
  CLI11_PARSE(app, argc, argv);
  if (floor_attach != "perf" && layer == "both") {
    fprintf(stderr, "kernels_overhead: --floor-attach %s takes entry probes only, not --count-layer both\n",
            floor_attach.c_str());
    return 2;
  }
  if (!hold && (gpuscope.empty() || workload.empty())) {
    fprintf(stderr, "kernels_overhead: --gpuscope and --workload are required (or --hold)\n");
    return 2;
  }
  set_libbpf_verbose(false);
  require_bpf_privileges();

  std::vector<std::pair<const char*, bool>> launch = {{"cuLaunchKernel", false},
                                                      {"cuLaunchKernelEx", false},
                                                      {"cuGraphLaunch", false},
                                                      {"cuLaunchCooperativeKernel", false},
                                                      {"cuLaunchHostFunc", false}};
  if (layer == "both")
    launch.insert(launch.end(), {{"cudaLaunchKernel", true},
                                 {"cudaLaunchKernelExC", true},
                                 {"cudaGraphLaunch", true},
                                 {"cudaLaunchCooperativeKernel", true},
                                 {"cudaLaunchHostFunc", true}});
  auto* bare = bare_bpf__open();
  if (!bare) throw std::runtime_error("cannot open the bare programs");
  if (floor_attach == "multi") prepare_uprobe_multi(bare->progs.bare_multi);
  if (floor_attach == "session") prepare_uprobe_session(bare->progs.bare_session);
  if (bare_bpf__load(bare)) {
    fprintf(stderr, "kernels_overhead: cannot load the bare programs for --floor-attach %s%s\n", floor_attach.c_str(),
            floor_attach == "perf" ? "" : " (uprobe_multi needs kernel 6.6+, sessions 6.12+)");
    bare_bpf__destroy(bare);
    return 2;
  }
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
  std::vector<std::string> argv_kernels{gpuscope, "kernels", "--interval", "1", "--count-layer", layer};
  for (auto& l : libs) argv_kernels.insert(argv_kernels.end(), {"--lib", l});
  std::vector<std::string> argv_both = argv_kernels;
  argv_both[5] = "both";
  auto attach_bare = [&] {
    std::vector<Link> links;
    std::string err;
    if (floor_attach != "perf") {
      std::map<std::string, UprobeMultiTarget> by_file;
      for (auto& s : sites) {
        auto& t = by_file[s.path];
        t.path = s.path;
        t.offsets.push_back(s.off);
        t.cookies.push_back(0);
        t.session = floor_attach == "session";
      }
      auto* prog = floor_attach == "session" ? bare->progs.bare_session : bare->progs.bare_multi;
      for (auto& [path, t] : by_file) {
        links.push_back(attach_uprobe_multi(prog, t, &err));
        if (!err.empty()) throw std::runtime_error("attach " + path + ": " + err);
      }
      return links;
    }
    for (auto& s : sites) {
      links.push_back(attach_uprobe(bare->progs.bare_enter, {s.path, s.off, -1, 0, false}, &err));
      if (s.exit) links.push_back(attach_uprobe(bare->progs.bare_exit, {s.path, s.off, -1, 0, true}, &err));
    }
    if (!err.empty()) throw std::runtime_error("attach: " + err);
    return links;
  };
  if (hold) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, nullptr);
    auto links = attach_bare();
    printf("floor attached: %zu %s links\n", links.size(), floor_attach.c_str());
    fflush(stdout);
    int sig;
    sigwait(&stop, &sig);
    destroy_links(links);
    return 0;
  }
  BareComparison c{"bare", "kernels", {}};
  std::vector<std::string> modes = c.modes();
  if (layer == "driver") modes.push_back("kernels_both");
  c.ns = interleaved_medians(rounds, modes, [&](const std::string& m) {
    if (m == "bare") {
      auto links = attach_bare();
      double v = ns_per_call(workload);
      destroy_links(links);
      return v;
    }
    if (m == "none") return ns_per_call(workload);
    BgProc p(m == "kernels" ? argv_kernels : argv_both, "gpuscope: counting");
    return ns_per_call(workload);
  });
  auto added = [&](const char* m) { return c.ns.at(m) - c.ns.at("none"); };

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
    j["count_layer"] = layer;
    if (layer == "driver") {
      j["ns_per_call"]["kernels_both"] = c.ns.at("kernels_both");
      j["added_cost_driver_vs_both"] = added("kernels") / added("kernels_both");
    }
    if (calls)
      for (auto& [name, st] : stats)
        j["programs_per_call"][name] = {{"runs", double(st.runs) / double(calls)},
                                        {"ns_per_run", st.runs ? double(st.run_time_ns) / double(st.runs) : 0.0}};
    printf("%s\n", j.dump().c_str());
  } else {
    printf("%zu launch sites (bare: %s), median of %d rounds, ns per workload iteration:\n", sites.size(),
           layer == "driver" ? "entry probes on the driver's launch symbols" : "as kernels --count-layer both", rounds);
    c.print_modes();
    if (layer == "driver")
      printf("  %-10s %10.1f  (+%.1f)  (--count-layer both)\n", "kernels_both", c.ns.at("kernels_both"),
             added("kernels_both"));
    printf("added cost, kernels / bare uprobes:  %.3fx (goal <= 1.1)\n", c.added());
    printf("per launch, kernels / bare uprobes:  %.3fx\n", c.total());
    if (layer == "driver")
      printf("added cost, driver layer / both layers:  %.3fx (goal about 0.5 per runtime launch)\n",
             added("kernels") / added("kernels_both"));
    if (calls) {
      printf("gpuscope's programs per workload call (separate run, BPF stats on; their clock reads included):\n");
      for (auto& [name, st] : stats)
        if (st.runs * 100 >= calls)  // at least once per 100 calls: not the odd process exit
          printf("  %-16s %6.3f runs  %7.1f ns/run\n", name.c_str(), double(st.runs) / double(calls),
                 double(st.run_time_ns) / double(st.runs));
    }
  }
  bare_bpf__destroy(bare);
  return 0;
}

// What each of the agent's collectors costs a launch-bound PyTorch-shaped workload (the stand-in
// `standin_app torch_steps`, whose call mix per step is the one measured on the H200), against
// the floor: bare counting entry uprobes on the driver's launch symbols, which every launch
// reaches. Arms interleave round by round; each figure is the median ns per step. Printed as
// the ratio to no probes and as the added cost in floors (1 = the floor's).
// A trap costs a different share of a step on each machine (about 0.1 us on the 6.18 build VM,
// 1.2 us on the H200), so with --floor-ratio R the host work per operation is first calibrated
// until the floor costs R of a step, as on the GPU host; every other arm is then read at the
// GPU host's proportions.
#include <CLI/CLI.hpp>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "core/bpf.h"
#include "core/cuda_api.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "bare.skel.h"

using namespace gpuscope;

namespace {

struct Arm {
  std::string name;
  std::vector<std::string> agent_args;  // empty: not an agent arm
  std::string env;                      // NAME=VALUE for the agent, or empty
};

std::string every_call_row() {
  std::string s;
  for (unsigned i = 0; i < GS_API_COUNT; i++)
    if (api_desc(i).roles & GS_ROLE_CALL) s += (s.empty() ? "" : ",") + std::string(api_symbol(i));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Each agent collector's cost on a PyTorch-shaped stand-in loop, against bare uprobes"};
  std::string gpuscope, workload, libcuda, libcudart, only;
  int rounds = 5;
  double floor_ratio = 0;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--workload", workload, "Command that prints ns_per_call=X (ns per step)")->required();
  app.add_option("--libcuda", libcuda, "The driver library the workload loads")->required();
  app.add_option("--libcudart", libcudart, "The runtime library the workload loads")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_option("--only", only, "Comma-separated arms to run (default all)");
  app.add_option("--floor-ratio", floor_ratio,
                 "Calibrate the workload's host work so that the floor costs this ratio (the H200's: 1.034); "
                 "the workload command then gets OP_NS appended")
      ->check(CLI::Range(1.0001, 2.0));
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  // Loaded as the collectors' programs are (uprobe_multi): a perf-event uprobe costs more.
  auto* bare = bare_bpf__open();
  if (!bare) throw std::runtime_error("cannot open the bare programs");
  prepare_uprobe_multi(bare->progs.bare_enter);
  bpf_program__set_autoload(bare->progs.bare_exit, false);
  if (bare_bpf__load(bare)) throw std::runtime_error("cannot load the bare programs");
  std::vector<uint64_t> floor_sites;
  auto syms = ElfSymbols::read(libcuda);
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernelEx"})
    for (const char* suf : kApiVariantSuffixes)
      if (auto* s = syms.find(std::string(name) + suf)) floor_sites.push_back(s->file_offset);

  // `copies` links of the bare program on the same sites: two consumers of one uprobe share
  // its breakpoint, so the second should cost a program run, not a trap.
  auto with_floor = [&](const std::function<double()>& run, int copies = 1) {
    UprobeMultiTarget t{libcuda, floor_sites, std::vector<uint64_t>(floor_sites.size(), 0), -1, false};
    std::string err;
    std::vector<Link> links;
    for (int i = 0; i < copies; i++) {
      links.push_back(attach_uprobe_multi(bare->progs.bare_enter, t, &err));
      if (!links.back()) throw std::runtime_error("floor attach: " + err);
    }
    return run();
  };
  double op_ns = -1;
  char pins[] = "/tmp/gs-cost-pins.XXXXXX";
  if (!mkdtemp(pins)) throw std::runtime_error("mkdtemp");
  std::vector<std::string> agent{gpuscope,
                                 "agent",
                                 "--listen",
                                 "127.0.0.1:0",
                                 "--lib",
                                 libcuda,
                                 "--lib",
                                 libcudart,
                                 "--nvml",
                                 "/nonexistent/libnvidia-ml.so.1",
                                 "--bridge-pin-dir",
                                 pins,
                                 "--max-cpu-percent",
                                 "0"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = agent;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::vector<Arm> arms = {
      {"none", {}, ""},
      {"floor", {}, ""},
      {"floor_twice", {}, ""},
      {"kernels", with({"--collectors", "kernels"}), ""},
      // Launch sites (off by default) at two samplings.
      {"kernels_sites_1024", with({"--collectors", "kernels", "--launch-site-every", "1024"}), ""},
      {"kernels_sites_64", with({"--collectors", "kernels", "--launch-site-every", "64"}), ""},
      // The kernels collector as it was: naming calls at entry and return probes, repeats too.
      {"kernels_no_session", with({"--collectors", "kernels"}), "GPUSCOPE_UPROBE_SESSION=0"},
      {"latency", with({"--collectors", "latency"}), ""},
      // The agent's latency collector as it was: every call row, entry and return probes.
      {"latency_all_rows_no_session",
       with({"--collectors", "latency", "--latency-apis", every_call_row(), "--latency-sample-launches", "1"}),
       "GPUSCOPE_UPROBE_SESSION=0"},
      {"memleak", with({"--collectors", "memleak"}), ""},
      {"ioctl", with({"--collectors", "ioctl"}), ""},
      {"gputime", with({"--collectors", "gputime"}), ""},
      {"agent_default", agent, ""},
  };
  if (!only.empty()) {
    std::vector<Arm> kept;
    for (auto& a : arms)
      if (a.name == "none" || a.name == "floor" || a.name == "floor_twice" ||
          ("," + only + ",").find("," + a.name + ",") != std::string::npos)
        kept.push_back(a);
    arms = kept;
  }
  if (floor_ratio > 0) {
    // The floor's added ns per step does not depend on the host work; the host work is then
    // what makes it floor_ratio - 1 of a step. Interleaved pairs, the medians.
    const std::string bare_work = workload + " 14 11 5 232 0";
    auto cal = interleaved_medians(7, {"base", "trapped"}, [&](const std::string& m) {
      return m == "base" ? ns_per_call(bare_work) : with_floor([&] { return ns_per_call(bare_work); });
    });
    const double base = cal.at("base"), trapped = cal.at("trapped");
    if (trapped <= base) throw std::runtime_error("calibration: the floor measured no cost; the machine is too busy");
    double target = (trapped - base) / (floor_ratio - 1);
    op_ns = std::max(0.0, (target - base) / 30);
    workload += " 14 11 5 232 " + std::to_string(static_cast<long>(op_ns));
    fprintf(stderr, "collector_cost: the floor adds %.0f ns a step; host work %.0f ns an operation for %.3fx\n",
            trapped - base, op_ns, floor_ratio);
  }
  std::vector<std::string> names;
  for (auto& a : arms) names.push_back(a.name);
  auto ns = interleaved_medians(rounds, names, [&](const std::string& m) {
    const Arm& a = *std::find_if(arms.begin(), arms.end(), [&](const Arm& x) { return x.name == m; });
    if (m == "floor") return with_floor([&] { return ns_per_call(workload); });
    if (m == "floor_twice") return with_floor([&] { return ns_per_call(workload); }, 2);
    if (a.agent_args.empty()) return ns_per_call(workload);
    std::string env_name = a.env.substr(0, a.env.find('='));
    if (!a.env.empty()) setenv(env_name.c_str(), a.env.substr(a.env.find('=') + 1).c_str(), 1);
    BgProc p(a.agent_args, "agent listening on");
    if (!a.env.empty()) unsetenv(env_name.c_str());
    return ns_per_call(workload);
  });
  rmdir(pins);
  const double none = ns.at("none"), floor = ns.at("floor") - none;
  if (json_out) {
    nlohmann::json j;
    j["rounds"] = rounds;
    j["floor_sites"] = floor_sites.size();
    if (op_ns >= 0) j["host_ns_per_op"] = op_ns;
    for (auto& a : arms) {
      j["ns_per_step"][a.name] = ns.at(a.name);
      j["ratio"][a.name] = ns.at(a.name) / none;
      if (floor > 0) j["added_cost_in_floors"][a.name] = (ns.at(a.name) - none) / floor;
    }
    printf("%s\n", j.dump().c_str());
    return 0;
  }
  printf("PyTorch-shaped stand-in steps, median of %d rounds; floor: bare entry uprobes on %zu driver launch sites\n",
         rounds, floor_sites.size());
  printf("  %-30s %12s %8s %16s\n", "arm", "ns/step", "ratio", "added (floors)");
  for (auto& a : arms)
    printf("  %-30s %12.0f %7.3fx %15.2fx\n", a.name.c_str(), ns.at(a.name), ns.at(a.name) / none,
           floor > 0 ? (ns.at(a.name) - none) / floor : 0.0);
  return 0;
}

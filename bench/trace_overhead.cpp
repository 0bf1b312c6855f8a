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
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "trace/trace.h"

using namespace gpuscope;

namespace {

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

double ns_per_call(const std::string& workload) {
  static const std::regex re(R"(ns_per_call=([0-9.]+))");
  std::string out = run_capture(workload);
  std::smatch m;
  if (!std::regex_search(out, m, re)) throw std::runtime_error("workload printed no ns_per_call: " + out);
  return std::stod(m[1]);
}

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

// gpuscope trace in the background, output discarded; stops on destruction.
class TraceProc {
 public:
  TraceProc(const std::string& bin, const std::vector<std::string>& libs, bool entry_only) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<std::string> a{bin, "trace", "--json"};
      if (entry_only) a.push_back("-r");
      for (auto& l : libs) a.insert(a.end(), {"--lib", l});
      std::vector<char*> argv;
      for (auto& s : a) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    std::string err;
    char c;
    while (err.find("tracing") == std::string::npos && read(fds[0], &c, 1) == 1) err += c;
    close(fds[0]);
    if (err.find("tracing") == std::string::npos) throw std::runtime_error("gpuscope did not start: " + err);
  }
  ~TraceProc() {
    kill(pid_, SIGINT);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_;
};

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
  std::map<std::string, std::vector<double>> samples;
  for (int r = 0; r < rounds; r++) {
    for (auto& m : modes) {
      double v;
      if (m == "none") {
        v = ns_per_call(workload);
      } else if (m.rfind("bare", 0) == 0) {
        auto links = attach_bare(m == "bare_pair");
        v = ns_per_call(workload);
        destroy_links(links);
      } else {
        TraceProc t(gpuscope, libs, m == "trace_entry");
        v = ns_per_call(workload);
      }
      samples[m].push_back(v);
    }
  }
  std::map<std::string, double> med;
  for (auto& [m, v] : samples) {
    std::sort(v.begin(), v.end());
    med[m] = v[v.size() / 2];
  }
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

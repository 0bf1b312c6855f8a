#pragma once
// What the overhead benchmarks share: gpuscope in the background, a workload's time per
// call, and modes interleaved round by round with the median of each reported.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include <nlohmann/json.hpp>

#include "core/bpf.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

// A gpuscope command in the background, stdout discarded; ready once `needle` shows on
// stderr; stopped with SIGINT on destruction.

class BgProc {
 public:
  BgProc(std::vector<std::string> argv, const std::string& needle) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(fds[1]);
    std::string err;
    char c;
    while (err.find(needle) == std::string::npos && read(fds[0], &c, 1) == 1) err += c;
    close(fds[0]);
    if (err.find(needle) == std::string::npos) throw std::runtime_error("gpuscope did not start: " + err);
  }
  ~BgProc() {
    kill(pid_, SIGINT);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_;
};

inline std::string run_output(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  return out;
}

// Runs the workload command; its output must hold "ns_per_call=X".
inline double ns_per_call(const std::string& workload) {
  static const std::regex re(R"(ns_per_call=([0-9.]+))");
  std::string out = run_output(workload);
  std::smatch m;
  if (!std::regex_search(out, m, re)) throw std::runtime_error("workload printed no ns_per_call: " + out);
  return std::stod(m[1]);
}

// measure(mode) for every mode, round after round (so that drift on a busy machine hits every
// mode alike); the median of each mode's rounds.
inline std::map<std::string, double> interleaved_medians(int rounds, const std::vector<std::string>& modes,
                                                         const std::function<double(const std::string&)>& measure) {
  std::map<std::string, std::vector<double>> samples;
  for (int r = 0; r < rounds; r++)
    for (auto& m : modes) samples[m].push_back(measure(m));
  std::map<std::string, double> med;
  for (auto& [m, v] : samples) {
    std::sort(v.begin(), v.end());
    med[m] = v[v.size() / 2];
  }
  return med;
}

// The comparison the uprobe benches make: the workload alone ("none"), under bare counting
// probes that the bench attaches itself, and under gpuscope in the background; modes
// interleave round by round, each figure the median ns per workload call.
struct BareComparison {
  std::string bare_mode, ours_mode;
  std::map<std::string, double> ns;
  std::vector<std::string> modes() const { return {"none", bare_mode, ours_mode}; }
  double added() const { return (ns.at(ours_mode) - ns.at("none")) / (ns.at(bare_mode) - ns.at("none")); }
  double total() const { return ns.at(ours_mode) / ns.at(bare_mode); }
  nlohmann::json json(size_t sites, int rounds) const {
    nlohmann::json j;
    j["sites"] = sites;
    j["rounds"] = rounds;
    for (auto& [m, v] : ns) j["ns_per_call"][m] = v;
    j["added_cost_ratio"] = added();
    j["total_ratio"] = total();
    return j;
  }
  void print_modes() const {
    for (auto& m : modes()) printf("  %-10s %10.1f  (+%.1f)\n", m.c_str(), ns.at(m), ns.at(m) - ns.at("none"));
  }
};

// attach_bare returns the bare probes' links (it throws when one fails to attach).
inline BareComparison compare_with_bare(int rounds, const std::string& workload, const std::string& bare_mode,
                                        const std::function<std::vector<gpuscope::Link>()>& attach_bare,
                                        const std::string& ours_mode, const std::vector<std::string>& gpuscope_argv,
                                        const std::string& ready) {
  BareComparison c{bare_mode, ours_mode, {}};
  c.ns = interleaved_medians(rounds, c.modes(), [&](const std::string& m) {
    if (m == bare_mode) {
      auto links = attach_bare();
      double v = ns_per_call(workload);
      gpuscope::destroy_links(links);
      return v;
    }
    if (m == ours_mode) {
      BgProc p(gpuscope_argv, ready);
      return ns_per_call(workload);
    }
    return ns_per_call(workload);
  });
  return c;
}

// Run counts and run time of every loaded BPF program whose name starts with `prefix`.
using ProgStats = gpuscope::ProgramStats;
inline std::map<std::string, ProgStats> bpf_prog_stats(const std::string& prefix) {
  return gpuscope::loaded_program_stats(prefix);
}

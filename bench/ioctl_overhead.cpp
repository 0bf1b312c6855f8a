// What gpuscope ioctl costs every other process: ns per ioctl on /dev/null (not an NVIDIA
// device) with no program, with an empty sys_enter_ioctl program, and under gpuscope ioctl
// (tracepoints, and the raw_tp fallback). Modes interleave round by round; medians reported.
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "core/bpf.h"
#include "core/system.h"
#include "ioctl_empty.skel.h"

using namespace gpuscope;

namespace {

double ns_per_ioctl(int fd, long calls, unsigned long request = FIONREAD) {
  int n = 0;
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < calls; i++) ioctl(fd, request, &n);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / static_cast<double>(calls);
}

// Any other syscall: what the probes cost processes that never call ioctl.
double ns_per_getppid(long calls) {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < calls; i++) syscall(SYS_getppid);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuscope ioctl overhead on a non-NVIDIA fd against an empty sys_enter_ioctl program"};
  std::string gpuscope;
  int rounds = 5;
  long calls = 200000;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--rounds", rounds, "Rounds (median reported)");
  app.add_option("--calls", calls, "ioctls per measurement");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();
  std::string why;
  if (!ensure_tracefs(&why)) throw std::runtime_error(why);
  int fd = open("/dev/null", O_RDONLY);
  auto* empty = ioctl_empty_bpf__open_and_load();
  if (!empty) throw std::runtime_error("cannot load the empty program");

  const std::vector<std::string> modes{"none", "empty_tp", "ioctl_tp", "ioctl_raw_tp"};
  std::map<std::string, std::vector<double>> samples, other, typef;
  ns_per_ioctl(fd, calls / 4);  // warm-up
  for (int r = 0; r < rounds; r++) {
    for (auto& m : modes) {
      auto measure = [&] {
        samples[m].push_back(ns_per_ioctl(fd, calls));
        // A request of NVIDIA's type 'F' on a non-NVIDIA fd: the case that pays the fd walk.
        typef[m].push_back(ns_per_ioctl(fd, calls, 0xC020462A));
        other[m].push_back(ns_per_getppid(calls));
      };
      if (m == "none") {
        measure();
      } else if (m == "empty_tp") {
        Link l(bpf_program__attach(empty->progs.empty_enter_ioctl));
        if (!l) throw std::runtime_error("cannot attach the empty program");
        measure();
      } else {
        std::vector<std::string> a{gpuscope, "ioctl"};
        if (m == "ioctl_raw_tp") a.push_back("--raw-syscalls");
        BgProc p(a, "gpuscope: counting");
        measure();
      }
    }
  }
  std::map<std::string, double> med, omed, fmed;
  for (auto& [m, v] : typef) {
    std::sort(v.begin(), v.end());
    fmed[m] = v[v.size() / 2];
  }
  for (auto& [m, v] : samples) {
    std::sort(v.begin(), v.end());
    med[m] = v[v.size() / 2];
  }
  for (auto& [m, v] : other) {
    std::sort(v.begin(), v.end());
    omed[m] = v[v.size() / 2];
  }
  if (json_out) {
    nlohmann::json j;
    j["rounds"] = rounds;
    j["calls"] = calls;
    for (auto& [m, v] : med) j["ns_per_ioctl"][m] = v;
    for (auto& [m, v] : omed) j["ns_per_getppid"][m] = v;
    for (auto& [m, v] : fmed) j["ns_per_ioctl_type_F"][m] = v;
    j["total_ratio"]["ioctl_tp_vs_empty_tp"] = med["ioctl_tp"] / med["empty_tp"];
    j["added_cost_ratio"]["ioctl_tp_vs_empty_tp"] = (med["ioctl_tp"] - med["none"]) / (med["empty_tp"] - med["none"]);
    printf("%s\n", j.dump().c_str());
  } else {
    printf(
        "on /dev/null: ioctl(FIONREAD), ioctl(0xc020462a: NVIDIA's type 'F'), and getppid(); %ld calls each,\n"
        "median of %d rounds, ns per call:\n",
        calls, rounds);
    printf("  %-13s %8s %8s   %8s %8s   %8s %8s\n", "", "FIONREAD", "added", "type 'F'", "added", "getppid", "added");
    for (auto& m : modes)
      printf("  %-13s %8.1f %+8.1f   %8.1f %+8.1f   %8.1f %+8.1f\n", m.c_str(), med[m], med[m] - med["none"], fmed[m],
             fmed[m] - fmed["none"], omed[m], omed[m] - omed["none"]);
    printf("per ioctl,  gpuscope ioctl / empty sys_enter_ioctl:   %.3fx (goal <= 1.2)\n",
           med["ioctl_tp"] / med["empty_tp"]);
    printf("added cost, gpuscope ioctl / empty sys_enter_ioctl:   %.3fx\n",
           (med["ioctl_tp"] - med["none"]) / (med["empty_tp"] - med["none"]));
    printf("per ioctl,  raw_tp fallback / empty sys_enter_ioctl:  %.3fx\n", med["ioctl_raw_tp"] / med["empty_tp"]);
    printf("type 'F',   gpuscope ioctl / empty sys_enter_ioctl:   %.3fx\n", fmed["ioctl_tp"] / fmed["empty_tp"]);
  }
  ioctl_empty_bpf__destroy(empty);
  close(fd);
  return 0;
}

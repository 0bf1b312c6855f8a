// Cost per sample of the CPython frame walk: a Python thread (tests/fixtures/python/burn.py)
// burns CPU at a chosen depth, and two cpu-clock samplers on that thread run side by side, one
// taking the user stack as starvation's sampler does, one the same plus the walk. The kernel's
// run-time statistics give each one's nanoseconds per sample; the ratio is the walk's price
// against the sampler alone, measured in the same run.
#include <CLI/CLI.hpp>
#include <bpf/bpf.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/bpf.h"
#include "core/fd.h"
#include "core/system.h"
#include "pyframes_bench.skel.h"
#include "python/pystacks.h"

using namespace gpuscope;

namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
  }
};

// Starts the script and reads "ready ... burner=TID".
Child start(const std::string& python, const std::string& script, int depth, pid_t* burner) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe");
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(python.c_str(), python.c_str(), script.c_str(), "600", std::to_string(depth).c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  c.out = fds[0];
  std::string line;
  char ch;
  while (read(c.out, &ch, 1) == 1 && ch != '\n') line += ch;
  auto at = line.find("burner=");
  if (at == std::string::npos) throw std::runtime_error("the script did not start: " + line);
  *burner = std::stoi(line.substr(at + 7));
  return c;
}

struct Stats {
  uint64_t runs = 0, ns = 0;
};

Stats stats_of(bpf_program* p) {
  bpf_prog_info info{};
  __u32 len = sizeof info;
  bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len);
  return {info.run_cnt, info.run_time_ns};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost per sample of the CPython frame walk against the same sampler without it"};
  std::string python = "/usr/bin/python3", script;
  double seconds = 5;
  unsigned hz = 997;
  std::vector<int> depths{0, 58};
  app.add_option("--python", python, "Interpreter (default /usr/bin/python3)");
  app.add_option("--script", script, "tests/fixtures/python/burn.py")->required();
  app.add_option("--seconds", seconds, "Seconds per depth (default 5)");
  app.add_option("--hz", hz, "Samples per second of each sampler (default 997)");
  app.add_option("--depths", depths, "Extra nest() calls above the burner's chain (default 0 58)");
  CLI11_PARSE(app, argc, argv);

  Fd stats(bpf_enable_stats(BPF_STATS_RUN_TIME));
  if (!stats) {
    fprintf(stderr, "pyframes_overhead: cannot enable BPF run-time statistics: %s\n", strerror(errno));
    return 2;
  }
  for (int depth : depths) {
    pid_t burner = 0;
    Child c = start(python, script, depth, &burner);
    std::unique_ptr<pyframes_bench_bpf, void (*)(pyframes_bench_bpf*)> skel(pyframes_bench_bpf__open_and_load(),
                                                                            pyframes_bench_bpf__destroy);
    if (!skel) {
      fprintf(stderr, "pyframes_overhead: cannot load: %s\n", strerror(errno));
      return 2;
    }
    auto& m = skel->maps;
    PyStacks py({bpf_map__fd(m.gs_py_procs), bpf_map__fd(m.gs_py_tstates), bpf_map__fd(m.gs_py_stacks),
                 bpf_map__fd(m.gs_py_counters), bpf_map__fd(m.gs_py_events)},
                [](const std::string& s) { fprintf(stderr, "%s\n", s.c_str()); });
    if (!py.track(c.pid)) {
      fprintf(stderr, "pyframes_overhead: no supported interpreter in %s\n", python.c_str());
      return 2;
    }
    std::vector<Link> links;
    for (bpf_program* p : {skel->progs.py_bench_native, skel->progs.py_bench_walk}) {
      perf_event_attr a{};
      a.size = sizeof a;
      a.type = PERF_TYPE_SOFTWARE;
      a.config = PERF_COUNT_SW_CPU_CLOCK;
      a.freq = 1;
      a.sample_freq = hz;
      int fd = static_cast<int>(syscall(__NR_perf_event_open, &a, burner, -1, -1, PERF_FLAG_FD_CLOEXEC));
      if (fd < 0) {
        fprintf(stderr, "pyframes_overhead: perf_event_open: %s\n", strerror(errno));
        return 2;
      }
      bpf_link* l = bpf_program__attach_perf_event(p, fd);
      if (!l) {
        close(fd);
        fprintf(stderr, "pyframes_overhead: attach: %s\n", strerror(errno));
        return 2;
      }
      links.emplace_back(l);
    }
    Stats n0 = stats_of(skel->progs.py_bench_native), w0 = stats_of(skel->progs.py_bench_walk);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    Stats n1 = stats_of(skel->progs.py_bench_native), w1 = stats_of(skel->progs.py_bench_walk);
    links.clear();
    double native_ns = double(n1.ns - n0.ns) / double(std::max<uint64_t>(n1.runs - n0.runs, 1));
    double walk_ns = double(w1.ns - w0.ns) / double(std::max<uint64_t>(w1.runs - w0.runs, 1));
    py.poll();
    size_t frames = 0;
    {
      gs_py_stack_key k{}, next{};
      int sfd = bpf_map__fd(m.gs_py_stacks);
      for (void* prev = nullptr; bpf_map_get_next_key(sfd, prev, &next) == 0; prev = &k) {
        k = next;
        gs_py_stack s{};
        if (bpf_map_lookup_elem(sfd, &k, &s) == 0) frames = std::max<size_t>(frames, s.depth);
      }
    }
    auto cnt = py.counters();
    nlohmann::ordered_json j{{"python", python},
                             {"depth_frames", frames},
                             {"samples_native", n1.runs - n0.runs},
                             {"samples_walk", w1.runs - w0.runs},
                             {"chains_found", skel->bss->bench_hashes},
                             {"truncated", cnt.truncated},
                             {"ns_per_sample_native", native_ns},
                             {"ns_per_sample_with_walk", walk_ns},
                             {"walk_ns", walk_ns - native_ns},
                             {"ratio", native_ns > 0 ? walk_ns / native_ns : 0.0}};
    printf("%s\n", j.dump().c_str());
  }
  return 0;
}

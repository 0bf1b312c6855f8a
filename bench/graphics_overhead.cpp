// Per-call cost of gpuscope frames on the Vulkan loader's vkQueueSubmit and vkQueuePresentKHR
// against bare counting uprobe+uretprobe pairs on the same two symbols of the same file, attached
// the same way (one link per site, for the workload's pid only), in one run. Modes interleave
// round by round: none, bare, frames (`gpuscope frames -p PID --no-cuda`). Every measurement is a
// fresh `vk_present_app --loop N` (the stand-in loader, tests/fixtures/graphics/): started,
// probed, let go with SIGUSR1; it prints "ns_per_pair=X" for N x (submit, present). Each figure
// is the median over rounds. One more run of each probed mode, outside the timed rounds, with
// the kernel's BPF statistics on, says what each program costs per run, and how often gpuscope
// woke and how much CPU it took per pair.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bare.skel.h"
#include "core/bpf.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "harness.h"

using namespace gpuscope;

namespace {

const std::vector<std::string> kSymbols{"vkQueueSubmit", "vkQueuePresentKHR"};

// `app --loop pairs`, stdout read through a pipe: constructed once it printed "ready pid=N"
// (blocked in sigwait), run() lets it go and returns its ns_per_pair.
class LoopApp {
 public:
  LoopApp(const std::string& app, long pairs) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      dup2(fds[1], 1);
      std::string n = std::to_string(pairs);
      execl(app.c_str(), app.c_str(), "--loop", n.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
    std::string line = read_line();
    if (line.rfind("ready pid=", 0) != 0) {
      stop();
      throw std::runtime_error(app + " did not get ready: '" + line + "'");
    }
  }
  ~LoopApp() { stop(); }
  LoopApp(const LoopApp&) = delete;
  LoopApp& operator=(const LoopApp&) = delete;

  pid_t pid() const { return pid_; }

  double run() {
    static const std::regex re(R"(ns_per_pair=([0-9.]+))");
    kill(pid_, SIGUSR1);
    std::string all, line;
    while (!(line = read_line()).empty()) all += line;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    std::smatch m;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !std::regex_search(all, m, re) ||
        all.find("done") == std::string::npos)
      throw std::runtime_error("the loop printed no ns_per_pair (status " + std::to_string(status) + "): " + all);
    return std::stod(m[1]);
  }

  // The file of the Vulkan loader it maps, as gpuscope finds it: a path named libvulkan.so*.
  std::string vulkan_library() const {
    std::ifstream maps("/proc/" + std::to_string(pid_) + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      auto slash = line.find('/');
      if (slash == std::string::npos) continue;
      std::string path = line.substr(slash);
      if (path.substr(path.rfind('/') + 1).rfind("libvulkan.so", 0) == 0) return path;
    }
    throw std::runtime_error("the loop maps no libvulkan.so*");
  }

 private:
  std::string read_line() {
    std::string s;
    char buf[512];
    while (fgets(buf, sizeof buf, out_)) {
      s += buf;
      if (!s.empty() && s.back() == '\n') break;
    }
    return s;
  }
  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (out_) fclose(out_);
    out_ = nullptr;
  }
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

// This bench's child processes; the number of gpuscope processes that are not (their probes,
// where they match vk_present_app, would count in every mode).
struct Processes {
  std::vector<pid_t> children;
  int other_gpuscopes = 0;
};
Processes processes() {
  Processes r;
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string comm;
    pid_t pid = 0, ppid = 0;
    char state;
    if (!(stat >> pid >> comm >> state >> ppid)) continue;
    if (ppid == getpid())
      r.children.push_back(pid);
    else if (comm == "(gpuscope)")
      r.other_gpuscopes++;
  }
  return r;
}

// Run counts and times of the programs a process holds (its program and link fds, by the
// program ids in their fdinfo), summed by name: another gpuscope's programs of the same name
// are left out.
std::map<std::string, ProgramStats> programs_of(pid_t pid) {
  std::set<uint32_t> ids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream info(e.path());
    std::string line;
    while (std::getline(info, line))
      if (line.rfind("prog_id:", 0) == 0) ids.insert(static_cast<uint32_t>(std::stoul(line.substr(8))));
  }
  std::map<std::string, ProgramStats> r;
  for (uint32_t id : ids) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      auto& st = r[info.name];
      st.runs += info.run_cnt;
      st.run_time_ns += info.run_time_ns;
    }
    close(fd);
  }
  return r;
}

// CPU time of a process, all threads (schedstat: ns on a CPU).
double cpu_ns(pid_t pid) {
  double ns = 0;
  std::error_code ec;
  for (auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream schedstat(t.path() / "schedstat");
    double v = 0;
    if (schedstat >> v) ns += v;
  }
  return ns;
}

// Times a process went to sleep of its own accord: for gpuscope, about once per wake-up.
uint64_t voluntary_switches(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stoull(line.substr(24));
  return 0;
}

ProgramStats minus(ProgramStats a, const ProgramStats& b) {
  a.runs -= b.runs;
  a.run_time_ns -= b.run_time_ns;
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"gpuscope frames against bare uprobe+uretprobe pairs on vkQueueSubmit and vkQueuePresentKHR"};
  std::string gpuscope, loop_app;
  std::vector<std::string> frames_args;
  long pairs = 200000;
  int rounds = 5;
  bool json_out = false;
  app.add_option("--gpuscope", gpuscope, "gpuscope binary")->required();
  app.add_option("--app", loop_app, "vk_present_app (tests/fixtures/graphics/), linked to the stand-in loader")
      ->required();
  app.add_option("--pairs", pairs, "vkQueueSubmit + vkQueuePresentKHR pairs per measurement")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Rounds (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--frames-arg", frames_args, "One more argument for gpuscope frames (--frames-arg=--interval=10)");
  app.add_flag("--json", json_out, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  set_libbpf_verbose(false);
  require_bpf_privileges();

  auto* bare = bare_bpf__open_and_load();
  if (!bare) throw std::runtime_error("cannot load the bare programs");
  std::string library;
  std::vector<uint64_t> offsets;
  {
    LoopApp probe(loop_app, 1);
    library = probe.vulkan_library();
    auto syms = ElfSymbols::read(library);
    for (auto& s : kSymbols) {
      const ElfSymbol* sym = syms.find(s);
      if (!sym) throw std::runtime_error(library + " has no " + s);
      offsets.push_back(sym->file_offset);
    }
    probe.run();
  }
  // As gpuscope attaches a library site: return probes first, one link per site, this pid only.
  auto attach_bare = [&](pid_t pid) {
    std::vector<Link> links;
    for (bool ret : {true, false})
      for (size_t i = 0; i < offsets.size(); i++) {
        std::string err;
        Link l = attach_uprobe(ret ? bare->progs.bare_exit : bare->progs.bare_enter,
                               {library, offsets[i], pid, i + 1, ret}, &err);
        if (!l) throw std::runtime_error("attach " + library + ":" + kSymbols[i] + ": " + err);
        links.push_back(std::move(l));
      }
    return links;
  };
  auto frames_argv = [&](pid_t pid) {
    std::vector<std::string> a{gpuscope, "frames", "-p", std::to_string(pid), "--no-cuda"};
    a.insert(a.end(), frames_args.begin(), frames_args.end());
    return a;
  };
  const char* ready = "gpuscope: watching frames";

  const int others = processes().other_gpuscopes;
  if (others)
    fprintf(stderr, "graphics_overhead: warning: %d other gpuscope process(es) running; figures may include theirs\n",
            others);
  uint64_t bare_hits_before = bare->bss->enter_hits;
  const std::vector<std::string> modes{"none", "bare", "frames"};
  auto ns = interleaved_medians(rounds, modes, [&](const std::string& m) {
    LoopApp w(loop_app, pairs);
    if (m == "bare") {
      auto links = attach_bare(w.pid());
      double v = w.run();
      destroy_links(links);
      return v;
    }
    if (m == "frames") {
      BgProc p(frames_argv(w.pid()), ready);
      return w.run();
    }
    return w.run();
  });
  const uint64_t bare_hits = bare->bss->enter_hits - bare_hits_before;
  if (bare_hits < uint64_t(2 * pairs) * uint64_t(rounds))
    throw std::runtime_error("the bare probes ran " + std::to_string(bare_hits) + " times, not 2 x pairs x rounds");

  // One more run of each probed mode, outside the timed rounds, with the kernel's BPF
  // statistics on: runs per pair and ns per run of each program (their clock reads included),
  // and how often gpuscope went back to sleep (about once per wake-up from its ring buffer).
  std::map<std::string, ProgramStats> prog;
  double wakeups_per_pair = -1, consumer_ns_per_pair = -1;
  if (int sfd = bpf_enable_stats(BPF_STATS_RUN_TIME); sfd >= 0) {
    {
      LoopApp w(loop_app, pairs);
      auto links = attach_bare(w.pid());
      auto before = own_program_stats();
      w.run();
      auto after = own_program_stats();
      destroy_links(links);
      for (auto& [name, st] : after)
        if (name.rfind("bare_", 0) == 0) prog[name] = minus(st, before[name]);
    }
    {
      LoopApp w(loop_app, pairs);
      BgProc p(frames_argv(w.pid()), ready);
      std::vector<pid_t> ours;
      for (pid_t c : processes().children)
        if (c != w.pid()) ours.push_back(c);
      if (ours.size() != 1) throw std::runtime_error("cannot tell this bench's gpuscope process");
      auto before = programs_of(ours[0]);
      uint64_t sw = voluntary_switches(ours[0]);
      double cpu = cpu_ns(ours[0]);
      w.run();
      wakeups_per_pair = double(voluntary_switches(ours[0]) - sw) / double(pairs);
      consumer_ns_per_pair = (cpu_ns(ours[0]) - cpu) / double(pairs);
      for (auto& [name, st] : programs_of(ours[0]))
        if (name.rfind("gs_gfx_", 0) == 0) prog[name] = minus(st, before[name]);
    }
    close(sfd);
  }

  for (auto& m : modes)
    if (!ns.count(m) || !(ns[m] > 0)) throw std::runtime_error("mode " + m + " produced no figure");
  auto added = [&](const std::string& m) { return ns.at(m) - ns.at("none"); };
  const double ratio = added("frames") / added("bare");
  const double total = ns.at("frames") / ns.at("bare");
  if (json_out) {
    nlohmann::json j;
    j["library"] = library;
    j["pairs"] = pairs;
    j["rounds"] = rounds;
    for (auto& m : modes) {
      j["ns_per_pair"][m] = ns.at(m);
      j["added_ns_per_call"][m] = added(m) / 2;
    }
    j["added_cost_ratio"] = ratio;
    j["total_ratio"] = total;
    j["goal"] = 1.2;
    j["other_gpuscopes"] = others;
    if (wakeups_per_pair >= 0) {
      j["gpuscope_wakeups_per_pair"] = wakeups_per_pair;
      j["gpuscope_cpu_ns_per_pair"] = consumer_ns_per_pair;
    }
    for (auto& [name, st] : prog)
      j["programs_per_pair"][name] = {{"runs", double(st.runs) / double(pairs)},
                                      {"ns_per_run", st.runs ? double(st.run_time_ns) / double(st.runs) : 0.0}};
    printf("%s\n", j.dump().c_str());
  } else {
    printf("%s: vkQueueSubmit + vkQueuePresentKHR, %ld pairs a run, median of %d rounds:\n", library.c_str(), pairs,
           rounds);
    printf("  %-8s %10s %12s %12s\n", "", "ns/pair", "added/pair", "added/call");
    for (auto& m : modes) printf("  %-8s %10.1f %+12.1f %+12.1f\n", m.c_str(), ns.at(m), added(m), added(m) / 2);
    printf("added cost per call, frames / bare uprobe+uretprobe:  %.3fx (goal <= 1.2)\n", ratio);
    printf("per call,            frames / bare uprobe+uretprobe:  %.3fx\n", total);
    if (!prog.empty()) {
      printf("programs per pair (separate runs, BPF stats on; their clock reads included):\n");
      for (auto& [name, st] : prog)
        printf("  %-14s %5.2f runs  %7.1f ns/run\n", name.c_str(), double(st.runs) / double(pairs),
               st.runs ? double(st.run_time_ns) / double(st.runs) : 0.0);
      printf("gpuscope itself (same run): %.3f wake-ups and %.0f ns of CPU per pair\n", wakeups_per_pair,
             consumer_ns_per_pair);
    }
  }
  bare_bpf__destroy(bare);
  return 0;
} catch (const std::exception& e) {
  fprintf(stderr, "graphics_overhead: %s\n", e.what());
  return 1;
}

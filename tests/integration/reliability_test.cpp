// Reliability of gpuscope against real processes and real BPF: libraries whose first
// processes exit before the attach (defect 1), churn of 1000 short-lived processes under
// three tools at once (nothing missed, nothing left in the BPF maps, bounded RSS), every
// numeric flag fed nonsense, a --lib whose program headers are corrupt, prompt exit of
// kernels, kill -9 while attached, unknown subcommands. Figures the tests measure are
// printed as "[reliability] ..." lines and recorded as gtest properties (docs/reliability.md).
#include <bpf/bpf.h>
#include <dirent.h>
#include <elf.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "harness.h"

using namespace gstest;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string standin_rt() { return fs::canonical(standin_lib_dir() + "/libcudart.so.13").string(); }
std::string standin_drv() { return fs::canonical(standin_lib_dir() + "/libcuda.so.1").string(); }
std::vector<std::string> standin_libs() { return {"--lib", standin_rt(), "--lib", standin_drv()}; }

// The machine is shared: other tests run standin_app against their own builds, and a tracer
// without -c sees every CUDA process on it. The workloads here run as a private copy of
// standin_app with its own name (its RUNPATH still finds the stand-in libraries), and the
// tools watch only that name: BPF drops everything else before the ring buffer.
const char* const kComm = "relstandin";
std::string app_dir() { return "/tmp/gstest-reliab-" + std::to_string(getpid()); }
std::string app() {
  static const std::string path = [] {
    fs::create_directories(app_dir());
    std::string p = app_dir() + "/" + kComm;
    fs::copy_file(standin_app(), p, fs::copy_options::overwrite_existing);
    return p;
  }();
  return path;
}
class RemoveAppDir : public testing::Environment {
 public:
  void TearDown() override { fs::remove_all(app_dir()); }
};
[[maybe_unused]] testing::Environment* const kRemoveAppDir = testing::AddGlobalTestEnvironment(new RemoveAppDir);

void note(const std::string& key, const std::string& value) {
  printf("[reliability] %s = %s\n", key.c_str(), value.c_str());
  fflush(stdout);
  testing::Test::RecordProperty(key, value);
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// gpuscope SUB ARGS in the background, started once `ready` is on its stderr.
class Tool {
 public:
  Tool(const std::string& sub, std::vector<std::string> args, const std::string& ready) {
    std::vector<std::string> argv{gpuscope_bin(), sub};
    argv.insert(argv.end(), args.begin(), args.end());
    p_ = std::make_unique<Process>(argv);
    started_ = p_->wait_for(ready, 60, true);
    if (!started_) ADD_FAILURE() << sub << " did not start: " << p_->err();
  }
  bool started() const { return started_; }
  std::vector<json> lines() const { return parse_lines(p_->out()); }
  std::vector<json> stop() {
    p_->signal(SIGINT);
    EXPECT_EQ(p_->wait(60), 0) << p_->err();
    return parse_lines(p_->out());
  }
  Process& proc() { return *p_; }

 private:
  std::unique_ptr<Process> p_;
  bool started_ = false;
};

std::unique_ptr<Tool> memleak(std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  return std::make_unique<Tool>("memleak", args, "gpuscope: tracking");
}
std::unique_ptr<Tool> trace(std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  return std::make_unique<Tool>("trace", args, "gpuscope: tracing");
}
std::unique_ptr<Tool> kernels(std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  return std::make_unique<Tool>("kernels", args, "gpuscope: counting");
}

std::vector<json> of_type(const std::vector<json>& lines, pid_t pid, const std::string& type) {
  std::vector<json> r;
  for (auto& l : lines)
    if (l.value("type", "") == type && (pid <= 0 || l.value("pid", -1) == pid)) r.push_back(l);
  return r;
}

// memleak: the summary printed when the process exited, per pid.
std::map<pid_t, json> final_summaries(const std::vector<json>& lines) {
  std::map<pid_t, json> r;
  for (auto& l : lines)
    if (l.value("type", "") == "summary" && l.value("state", "") == "exited") r[l["pid"].get<pid_t>()] = l;
  return r;
}

// kernels: the rows printed when the process exited, pid -> kernel -> launches.
std::map<pid_t, std::map<std::string, uint64_t>> exited_rows(const std::vector<json>& lines) {
  std::map<pid_t, std::map<std::string, uint64_t>> r;
  for (auto& l : lines)
    if (l.value("type", "") == "kernel" && l.value("exited", false))
      r[l["pid"].get<pid_t>()][l["kernel"].get<std::string>()] += l["launches"].get<uint64_t>();
  return r;
}

// trace: pid -> "api phase" -> events.
std::map<pid_t, std::map<std::string, int>> trace_counts(const std::vector<json>& lines) {
  std::map<pid_t, std::map<std::string, int>> r;
  for (auto& e : lines)
    if (e.contains("api"))
      r[e["pid"].get<pid_t>()][e["api"].get<std::string>() + " " + e["phase"].get<std::string>()]++;
  return r;
}

void expect_counts(const json& s, const std::map<std::string, uint64_t>& want) {
  for (auto& [k, v] : want) EXPECT_EQ(s.at(k).get<uint64_t>(), v) << k << " in " << s.dump();
}

// BPF object ids a process holds through its fds: "prog_id", "map_id", "link_id".
std::map<std::string, std::set<uint32_t>> bpf_ids_held(pid_t holder) {
  std::map<std::string, std::set<uint32_t>> out;
  std::string dir = "/proc/" + std::to_string(holder) + "/fdinfo";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::ifstream f(dir + "/" + e->d_name);
    for (std::string line; std::getline(f, line);)
      for (const char* k : {"prog_id", "map_id", "link_id"})
        if (line.rfind(std::string(k) + ":", 0) == 0)
          out[k].insert(static_cast<uint32_t>(std::stoul(line.substr(strlen(k) + 1))));
  }
  closedir(d);
  return out;
}

// Which of these ids still name a live BPF object.
std::map<std::string, std::set<uint32_t>> still_alive(const std::map<std::string, std::set<uint32_t>>& ids) {
  std::map<std::string, std::set<uint32_t>> out;
  for (auto& [kind, set] : ids)
    for (uint32_t id : set) {
      int fd = kind == "prog_id"  ? bpf_prog_get_fd_by_id(id)
               : kind == "map_id" ? bpf_map_get_fd_by_id(id)
                                  : bpf_link_get_fd_by_id(id);
      if (fd >= 0) {
        out[kind].insert(id);
        close(fd);
      }
    }
  return out;
}

// The kernel frees programs and links of a dead process after an RCU grace period: poll.
std::map<std::string, std::set<uint32_t>> wait_gone(const std::map<std::string, std::set<uint32_t>>& ids,
                                                    double timeout_s, double* took) {
  auto t0 = Clock::now();
  std::map<std::string, std::set<uint32_t>> alive;
  do {
    alive = still_alive(ids);
    if (alive.empty()) break;
    sleep_s(0.05);
  } while (since(t0) < timeout_s);
  *took = since(t0);
  return alive;
}

// bpf_link_info as kernels 6.8+ fill it for uprobe_multi and perf-event uprobe links (the
// system's libbpf 1.1 headers predate those members).
struct LinkInfo {
  uint32_t type, id, prog_id, pad;
  union {
    struct {
      uint64_t path, offsets, ref_ctr_offsets, cookies;
      uint32_t path_size, count, flags, pid;
      uint64_t missed;
    } uprobe_multi;
    struct {
      uint32_t type, pad;
      uint64_t file_name;
      uint32_t name_len, offset;
      uint64_t cookie;
    } perf_event;
    uint8_t raw[128];
  };
};
constexpr uint32_t kLinkUprobeMulti = 12, kLinkPerfEvent = 7;
constexpr uint32_t kPerfUprobe = 1, kPerfUretprobe = 2;  // enum bpf_perf_event_type

// Links, system-wide, that hold a uprobe on `path` (uprobe_multi or one perf-event uprobe).
size_t uprobe_links_on(const std::string& path) {
  size_t n = 0;
  uint32_t id = 0;
  while (bpf_link_get_next_id(id, &id) == 0) {
    int fd = bpf_link_get_fd_by_id(id);
    if (fd < 0) continue;
    char buf[4096] = {};
    LinkInfo info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      if (info.type == kLinkUprobeMulti) {
        LinkInfo again{};
        again.type = info.type;
        again.uprobe_multi.path = reinterpret_cast<uint64_t>(buf);
        again.uprobe_multi.path_size = sizeof buf;
        len = sizeof again;
        if (bpf_obj_get_info_by_fd(fd, &again, &len) == 0 && path == buf) n++;
      } else if (info.type == kLinkPerfEvent) {
        LinkInfo again{};
        again.perf_event.file_name = reinterpret_cast<uint64_t>(buf);
        again.perf_event.name_len = sizeof buf;
        len = sizeof again;
        if (bpf_obj_get_info_by_fd(fd, &again, &len) == 0 &&
            (again.perf_event.type == kPerfUprobe || again.perf_event.type == kPerfUretprobe) && path == buf)
          n++;
      }
    }
    close(fd);
  }
  return n;
}

long vm_hwm_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Runs `n` processes of `argv_of(i)`, `parallel` at a time; returns their pids in order.
std::vector<pid_t> run_batches(int n, int parallel, const std::function<std::vector<std::string>(int)>& argv_of) {
  std::vector<pid_t> pids;
  for (int start = 0; start < n; start += parallel) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int i = start; i < std::min(n, start + parallel); i++) ps.push_back(std::make_unique<Process>(argv_of(i)));
    for (auto& p : ps) {
      pids.push_back(ready_pid(*p));
      EXPECT_EQ(p->wait(60), 0) << p->err();
    }
  }
  return pids;
}

// Waits until pred() holds (re-evaluated every 100 ms); false after timeout_s.
bool eventually(const std::function<bool()>& pred, double timeout_s) {
  auto t0 = Clock::now();
  while (since(t0) < timeout_s) {
    if (pred()) return true;
    sleep_s(0.1);
  }
  return pred();
}

std::string regex_quote(const std::string& s) {
  return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

// stderr of gpuscope -v shows "PATH (pid N): K probe sites" once PATH is attached.
bool attached_line(const std::string& err, const std::string& path) {
  return std::regex_search(err, std::regex(regex_quote(path) + R"( \(pid -?\d+\): [1-9]\d* probe sites)"));
}

// ... and "PATH (pid N): 0 probe sites, attach failed: ..." for each attempt that failed
// (its process had exited): the case defect 1 lost the library for good.
size_t failed_attempts(const std::string& err, const std::string& path) {
  std::regex re(regex_quote(path) + R"( \(pid -?\d+\): 0 probe sites, attach failed)");
  return std::distance(std::sregex_iterator(err.begin(), err.end(), re), std::sregex_iterator());
}

// A summary's objects/probes/attach_failures against the attach lines -v printed: every
// attach is one line "PATH (pid N): K probe sites[, attach failed: ERR]".
void expect_attach_consistent(const std::string& err, const json& sum, const std::string& tool) {
  static const std::regex re(R"(gpuscope: \S+ \(pid -?\d+\): (\d+) probe sites(, attach failed)?)");
  uint64_t objects = 0, probes = 0, failed_lines = 0;
  for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it) {
    uint64_t k = std::stoull((*it)[1]);
    bool failed = (*it)[2].matched;
    probes += k;
    objects += k > 0 || !failed;
    failed_lines += failed;
  }
  EXPECT_EQ(sum["objects"].get<uint64_t>(), objects) << tool << ": " << sum.dump();
  EXPECT_EQ(sum["probes"].get<uint64_t>(), probes) << tool << ": " << sum.dump();
  EXPECT_EQ(sum["attach_failures"].get<uint64_t>() > 0, failed_lines > 0) << tool << ": " << sum.dump();
  note(tool + "_objects_probes_failures_retries", sum["objects"].dump() + " " + sum["probes"].dump() + " " +
                                                      sum["attach_failures"].dump() + " " +
                                                      sum["attach_retries"].dump());
}

// The leaks scenario's exact report (see memleak_test LeakReport).
void expect_leaks_summary(const json& s) {
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["comm"], kComm);
  expect_counts(s, {{"allocs_ok", 9},
                    {"allocs_failed", 0},
                    {"frees_ok", 4},
                    {"frees_failed", 0},
                    {"bad_frees", 1},
                    {"double_frees", 1},
                    {"frees_untracked", 0},
                    {"outstanding_allocs", 6},
                    {"outstanding_bytes", 1000 + 3000 + 5000 + 600 + 800 + 2097152},
                    {"pinned_bytes", 0}});
}

// What trace prints for one `standin_app leaks` (5 cudaMalloc, 3 cuMemAlloc, the VMM calls,
// 3 cudaFree of which one double, 1 cuMemFree), each call once per layer.
// The stand-in runtime's calls reach the driver, which is its own layer: 3 + 5 cuMemAlloc_v2,
// 1 + 3 cuMemFree_v2. cuMemAddressReserve is not in the site table.
const std::map<std::string, int> kLeaksTrace = {
    {"cudaMalloc enter", 5},   {"cudaMalloc exit", 5},   {"cuMemAlloc_v2 enter", 8}, {"cuMemAlloc_v2 exit", 8},
    {"cuMemCreate enter", 1},  {"cuMemCreate exit", 1},  {"cuMemMap enter", 1},      {"cuMemMap exit", 1},
    {"cuMemRelease enter", 1}, {"cuMemRelease exit", 1}, {"cudaFree enter", 3},      {"cudaFree exit", 3},
    {"cuMemFree_v2 enter", 4}, {"cuMemFree_v2 exit", 4}};

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. Defect 1: discovery marked a library seen before attaching it, so when the first
// process mapping it exited before the attach, the library was never probed. 200 rounds of 4
// parallel short-lived processes, no --lib: 95 % of them reported and no failed attach (the
// libraries are held open from first sight: before that, memleak saw 489 of 800 with 1481
// failed attaches); then a long-lived process must be reported exactly.

namespace {

struct ChurnRounds {
  std::set<pid_t> pids;
  double seconds = 0;
};

ChurnRounds churn_rounds(int rounds, int parallel) {
  ChurnRounds r;
  auto t0 = Clock::now();
  auto pids = run_batches(rounds * parallel, parallel, [](int) { return std::vector<std::string>{app(), "churn"}; });
  r.pids.insert(pids.begin(), pids.end());
  r.seconds = since(t0);
  return r;
}

// A `leaks` process that starts its calls on SIGUSR1, once `tool` says both stand-in
// libraries are attached.
pid_t run_leaks_after_attach(Tool& tool, std::unique_ptr<Process>& w) {
  w = std::make_unique<Process>(std::vector<std::string>{app(), "--wait-usr1", "1", "leaks"});
  pid_t pid = ready_pid(*w);
  bool both = eventually(
      [&] {
        std::string err = tool.proc().err();
        return attached_line(err, standin_rt()) && attached_line(err, standin_drv());
      },
      30);
  EXPECT_TRUE(both) << "the stand-in libraries were never attached (defect 1):\n" << tool.proc().err();
  w->signal(SIGUSR1);
  EXPECT_EQ(w->wait(30), 0) << w->err();
  return pid;
}

// Under a started `tool`: 200 rounds of 4 churning processes, then a `leaks` process started once
// the libraries are attached, run to its end.
struct LateAttach {
  ChurnRounds churn;
  std::unique_ptr<Process> w;
  pid_t pid = -1;
};
void late_attach(Tool& tool, LateAttach* r) {
  ASSERT_TRUE(tool.started());
  r->churn = churn_rounds(200, 4);
  ASSERT_EQ(r->churn.pids.size(), 800u);
  r->pid = run_leaks_after_attach(tool, r->w);
}

// The churn's processes that `tool` reported (the keys of `by_pid`): 95 % at least, and no
// failed attach in `counters` (its drops or summary line); the figures are recorded.
template <typename ByPid>
void expect_churn_seen(const std::string& tool, const ChurnRounds& churn, const ByPid& by_pid, const json& counters,
                       const std::string& err) {
  size_t churn_seen = 0;
  for (pid_t p : churn.pids) churn_seen += by_pid.count(p);
  // Once one process is caught mapping the libraries, they are held open until attached, and
  // every later process is seen from its first call (the first ones may come before that).
  EXPECT_GE(churn_seen, churn.pids.size() * 95 / 100);
  EXPECT_EQ(counters["attach_failures"], 0);
  std::string key = "defect1_" + tool + "_";
  note(key + "churn_processes", std::to_string(churn.pids.size()));
  note(key + "churn_seconds", std::to_string(churn.seconds));
  note(key + "churn_reported", std::to_string(churn_seen));
  note(key + "failed_attach_attempts",
       std::to_string(failed_attempts(err, standin_rt()) + failed_attempts(err, standin_drv())));
  note(key + "attach_retries", counters["attach_retries"].dump());
  note(key + "attach_failures", counters["attach_failures"].dump());
}

}  // namespace

TEST(Reliability, Defect1LateAttachMemleak) {
  auto g = memleak({"-v", "-c", kComm});
  LateAttach la;
  ASSERT_NO_FATAL_FAILURE(late_attach(*g, &la));
  ASSERT_TRUE(eventually([&] { return final_summaries(g->lines()).count(la.pid) > 0; }, 20)) << g->proc().out();
  auto lines = g->stop();
  auto sums = final_summaries(lines);
  expect_leaks_summary(sums[la.pid]);
  size_t leaks = 0;
  for (auto& l : of_type(lines, la.pid, "leak")) leaks += l["state"] == "exited";
  EXPECT_EQ(leaks, 6u);
  auto drops = of_type(lines, 0, "drops");
  ASSERT_EQ(drops.size(), 1u);
  expect_churn_seen("memleak", la.churn, sums, drops[0], g->proc().err());
}

TEST(Reliability, Defect1LateAttachTrace) {
  auto t = trace({"-v", "-c", kComm});
  LateAttach la;
  ASSERT_NO_FATAL_FAILURE(late_attach(*t, &la));
  ASSERT_TRUE(eventually([&] { return trace_counts(t->lines())[la.pid]["cuMemFree_v2 exit"] >= 1; }, 20))
      << t->proc().out().substr(0, 4000);
  auto lines = t->stop();
  auto counts = trace_counts(lines);
  EXPECT_EQ(counts[la.pid], kLeaksTrace);
  auto sum = of_type(lines, 0, "summary");
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_EQ(sum[0]["lost"], 0);
  expect_churn_seen("trace", la.churn, counts, sum[0], t->proc().err());
}

// ---------------------------------------------------------------------------------------
// 2. Churn and soak: 1000 short-lived processes under memleak, kernels and trace at once.

namespace {
// standin_app driver 2, as trace reports it: 2 cuMemAlloc, 5 + 3 launches, 2 frees (cuInit and
// the module calls are not in the site table).
const std::map<std::string, int> kDriverTrace = {{"cuMemAlloc_v2 enter", 2},  {"cuMemAlloc_v2 exit", 2},
                                                 {"cuLaunchKernel enter", 8}, {"cuLaunchKernel exit", 8},
                                                 {"cuMemFree_v2 enter", 2},   {"cuMemFree_v2 exit", 2}};
// standin_app churn: 2 cudaMalloc (one failed), each reaching cuMemAlloc, 1 direct cuMemAlloc,
// 2 cuMemFree (one a double free).
const std::map<std::string, int> kChurnTrace = {{"cudaMalloc enter", 2},    {"cudaMalloc exit", 2},
                                                {"cuMemAlloc_v2 enter", 3}, {"cuMemAlloc_v2 exit", 3},
                                                {"cuMemFree_v2 enter", 2},  {"cuMemFree_v2 exit", 2}};
// The same two as memleak counts them at exit.
const std::map<std::string, uint64_t> kDriverCounts = {{"allocs_ok", 2},          {"allocs_failed", 0},
                                                       {"frees_ok", 2},           {"bad_frees", 0},
                                                       {"outstanding_allocs", 0}, {"outstanding_bytes", 0}};
const std::map<std::string, uint64_t> kChurnCounts = {
    {"allocs_ok", 2},          {"allocs_failed", 1},       {"frees_ok", 1}, {"bad_frees", 1}, {"double_frees", 1},
    {"outstanding_allocs", 1}, {"outstanding_bytes", 4096}};

// Whether `by_pid` has a key for each of `pids`.
template <typename ByPid, typename Pids>
bool has_every(const ByPid& by_pid, const Pids& pids) {
  return std::all_of(pids.begin(), pids.end(), [&](pid_t p) { return by_pid.count(p) > 0; });
}

// memleak's final summary of each of `pids`, with the counts `want`.
void expect_each_counts(std::map<pid_t, json>& sums, const std::set<pid_t>& pids,
                        const std::map<std::string, uint64_t>& want) {
  for (pid_t p : pids) {
    ASSERT_TRUE(sums.count(p)) << p;
    expect_counts(sums[p], want);
  }
}
}  // namespace

TEST(Reliability, ChurnSoakThreeTools) {
  const int kProcs = 1000, kParallel = 8;
  auto scope = standin_libs();
  scope.insert(scope.end(), {"-c", kComm, "-v"});
  auto m = memleak(scope);
  auto k = kernels(scope);
  auto t = trace(scope);
  ASSERT_TRUE(m->started() && k->started() && t->started());

  auto t0 = Clock::now();
  // Even: `driver 2` (launches, allocations freed); odd: `churn` (a leak, a double free).
  auto pids = run_batches(kProcs, kParallel, [](int i) {
    return i % 2 ? std::vector<std::string>{app(), "churn"} : std::vector<std::string>{app(), "driver", "2"};
  });
  double churn_s = since(t0);
  ASSERT_EQ(pids.size(), size_t(kProcs));
  ASSERT_EQ(std::set<pid_t>(pids.begin(), pids.end()).size(), size_t(kProcs));
  std::set<pid_t> drivers, churners;
  for (int i = 0; i < kProcs; i++) (i % 2 ? churners : drivers).insert(pids[i]);

  // Every process's final report: memleak's summary, kernels' exited rows.
  EXPECT_TRUE(eventually([&] { return has_every(final_summaries(m->lines()), pids); }, 60));
  EXPECT_TRUE(eventually([&] { return has_every(exited_rows(k->lines()), drivers); }, 60));
  double settle_s = since(t0) - churn_s;

  // Nothing of any of them is left in any tool's BPF hash maps.
  size_t maps_checked = 0;
  for (Tool* tool : {m.get(), k.get(), t.get()})
    for (auto& [name, keys] : pids_in_maps(tool->proc().pid())) {
      maps_checked++;
      for (uint32_t key : keys)
        EXPECT_FALSE(drivers.count(key) || churners.count(key)) << name << " still holds pid " << key;
    }
  EXPECT_GE(maps_checked, 8u) << "ml_allocs, ml_procs, ml_freed, ml_errors, ml_stacks, counts, aliases, launched...";

  long rss_m = vm_hwm_kb(m->proc().pid()), rss_k = vm_hwm_kb(k->proc().pid()), rss_t = vm_hwm_kb(t->proc().pid());
#if defined(__SANITIZE_ADDRESS__)
  // Under the ASAN step gpuscope carries shadow memory and a free quarantine.
  const long kBoundKb = 1024 * 1024;
#else
  const long kBoundKb = 200 * 1024;
#endif
  for (long kb : {rss_m, rss_k, rss_t}) {
    EXPECT_GT(kb, 0);
    EXPECT_LT(kb, kBoundKb) << "peak RSS over the bound";
  }

  auto ml = m->stop();
  auto kl = k->stop();
  std::string kerr = k->proc().err();
  auto tl = t->stop();

  // memleak: exact per-process counts.
  auto sums = final_summaries(ml);
  size_t leak_rows = 0;
  for (auto& l : of_type(ml, 0, "leak")) leak_rows += l["state"] == "exited" && churners.count(l["pid"].get<pid_t>());
  EXPECT_EQ(leak_rows, churners.size());
  ASSERT_NO_FATAL_FAILURE(expect_each_counts(sums, drivers, kDriverCounts));
  ASSERT_NO_FATAL_FAILURE(expect_each_counts(sums, churners, kChurnCounts));
  auto drops = of_type(ml, 0, "drops");
  ASSERT_EQ(drops.size(), 1u);
  for (const char* f : {"allocs_not_recorded_map_full", "calls_untracked_process_map_full", "events_lost_ringbuf_full",
                        "calls_without_thread_state", "error_codes_not_recorded"})
    EXPECT_EQ(drops[0][f], 0) << f << " in " << drops[0].dump();
  // The stand-ins through --lib, and whatever else the host maps (the tools see every process).
  EXPECT_GE(drops[0]["objects"].get<int>(), 2);
  expect_attach_consistent(m->proc().err(), drops[0], "soak_memleak");

  // kernels: exact launches per process and kernel, nothing for processes without launches.
  auto rows = exited_rows(kl);
  // Exact launches per process. Rows named from cuModuleGetFunction carry their exact counts;
  // kernels' naming of processes this short-lived is best effort, and a row it could not name
  // ("[unknown ...]") is counted, not asserted (recorded below).
  size_t unnamed = 0;
  for (pid_t p : drivers) {
    uint64_t total = 0;
    bool any_unknown = false;
    for (auto& [name, n] : rows[p]) {
      total += n;
      if (name.starts_with("[unknown"))
        any_unknown = true;
      else
        EXPECT_EQ(n, name == "kern_a" ? 5u : name == "kern_b" ? 3u : 0u) << p << " " << name;
    }
    EXPECT_EQ(total, 8u) << p;
    unnamed += any_unknown;
  }
  note("soak_kernels_processes_unnamed", std::to_string(unnamed) + " of " + std::to_string(drivers.size()));
  for (pid_t p : churners) EXPECT_FALSE(rows.count(p)) << p;
  EXPECT_EQ(kerr.find("not counted"), std::string::npos) << kerr;

  // trace: exact events per process; the summary accounts for every line.
  auto counts = trace_counts(tl);
  for (pid_t p : drivers) EXPECT_EQ(counts[p], kDriverTrace) << p;
  for (pid_t p : churners) EXPECT_EQ(counts[p], kChurnTrace) << p;
  auto ts = of_type(tl, 0, "summary");
  ASSERT_EQ(ts.size(), 1u);
  size_t events = 0;
  for (auto& e : tl) events += e.contains("api");
  EXPECT_EQ(ts[0]["events"].get<size_t>(), events);
  EXPECT_EQ(ts[0]["lost"], 0);
  EXPECT_EQ(ts[0]["untracked_calls_state_full"], 0);
  EXPECT_GE(ts[0]["objects"].get<int>(), 2);
  expect_attach_consistent(t->proc().err(), ts[0], "soak_trace");

  note("soak_processes", std::to_string(kProcs));
  note("soak_parallel", std::to_string(kParallel));
  note("soak_run_seconds", std::to_string(churn_s));
  note("soak_settle_seconds", std::to_string(settle_s));
  note("soak_trace_events", std::to_string(events));
  note("soak_vmhwm_kb_memleak", std::to_string(rss_m));
  note("soak_vmhwm_kb_kernels", std::to_string(rss_k));
  note("soak_vmhwm_kb_trace", std::to_string(rss_t));
  note("soak_hash_maps_checked", std::to_string(maps_checked));
}

// ---------------------------------------------------------------------------------------
// 3. Every numeric flag of every subcommand, fed nonsense.

namespace {

std::vector<std::string> subcommands() {
  auto r = run({gpuscope_bin(), "--help"});
  std::vector<std::string> out;
  std::istringstream in(r.out);
  bool in_subs = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_subs = true;
      continue;
    }
    if (in_subs) {
      std::smatch m;
      if (std::regex_search(line, m, std::regex(R"(^  ([a-z]+)\b)")))
        out.push_back(m[1]);
      else if (!line.empty())
        in_subs = false;
    }
  }
  return out;
}

// Options of `gpuscope SUB --help` that take a value, by their longest name.
std::vector<std::string> value_options(const std::string& sub) {
  auto r = run({gpuscope_bin(), sub, "--help"});
  std::vector<std::string> out;
  std::istringstream in(r.out);
  // "  --interval SECONDS=1   Print ...": the flags, one space, the value's label.
  std::regex re(R"(^\s+((?:-[A-Za-z0-9],)?--[a-z0-9-]+) [A-Z][A-Z0-9_:/|]*(?:[=\s]|$))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) {
      std::string flags = m[1];
      out.push_back(flags.substr(flags.find("--")));
    }
  }
  return out;
}

// Options whose value is text, not a number.
const std::set<std::string> kTextOptions = {
    "--comm",         "--lib",       "--api",        "--layer",          "--pin-dir",
    "--folded",       "--svg",       "--nvml",       "--cupti-lib",      "--output",
    "--count-layer",  "--listen",    "--collectors", "--bridge-pin-dir", "--pods-dir",
    "--latency-apis", "--container", "--pod",        "--namespace",      "--runtime-root",
    "--site-skip",    "--kmsg",      "--kmsg-state", "--communicator",   "--nccl-lib",
    "--weight"};

}  // namespace

TEST(Reliability, NumericFlagsRejectNonsense) {
  auto subs = subcommands();
  ASSERT_GE(subs.size(), 9u) << run({gpuscope_bin(), "--help"}).out;
  size_t tried = 0, flags = 0;
  std::string listed;
  for (auto& sub : subs) {
    for (auto& opt : value_options(sub)) {
      if (kTextOptions.count(opt)) continue;
      flags++;
      listed += sub + " " + opt + "; ";
      for (std::string bad : {"nan", "inf", "1e30", "-1", "abc", ""}) {
        auto r = run({gpuscope_bin(), sub, opt, bad}, {}, 20);
        tried++;
        EXPECT_EQ(r.exit_code, 2) << sub << " " << opt << " '" << bad << "': " << r.err;
        EXPECT_EQ(count_lines(r.err), 1u) << sub << " " << opt << " '" << bad << "': " << r.err;
        EXPECT_NE(r.err.find(opt + " must be a"), std::string::npos)
            << sub << " " << opt << " '" << bad << "': " << r.err;
        EXPECT_NE(r.err.find(" between "), std::string::npos) << sub << " " << opt << " '" << bad << "': " << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
      }
    }
  }
  // -d, --pid everywhere they exist, and the subcommands' own flags.
  EXPECT_GE(flags, 20u) << listed;
  note("numeric_flags", std::to_string(flags));
  note("numeric_flag_runs", std::to_string(tried));
  note("numeric_flag_list", listed);
  EXPECT_NE(listed.find("trace --duration"), std::string::npos) << listed;
  EXPECT_NE(listed.find("kernels --top"), std::string::npos) << listed;
  EXPECT_NE(listed.find("trace --ringbuf-kb"), std::string::npos) << listed;
}

// -d 0.2 (or 200ms) still ends the probing subcommands that run on this host, promptly and with 0.
TEST(Reliability, ShortDurationStillWorks) {
  std::string figures;
  for (auto [sub, d] : std::vector<std::pair<std::string, std::string>>{
           {"trace", "0.2"}, {"latency", "0.2"}, {"kernels", "0.2"}, {"memleak", "0.2"}, {"kernels", "200ms"}}) {
    auto t0 = Clock::now();
    auto r = run({gpuscope_bin(), sub, "-d", d, "--lib", standin_rt()}, {}, 30);
    double took = since(t0);
    EXPECT_EQ(r.exit_code, 0) << sub << " -d " << d << ": " << r.err;
    EXPECT_LT(took, 5.0) << sub << " -d " << d;
    figures += sub + " -d " + d + " " + std::to_string(took).substr(0, 5) + " s; ";
  }
  note("duration_0.2_wall", figures);
}

// ---------------------------------------------------------------------------------------
// 4. A --lib whose symbols parse but whose executable segment points past the end of the
// file: the kernel refuses every probe. Exit 2, one line, nothing left attached.

namespace {

// A copy of the stand-in runtime; with `corrupt`, its executable PT_LOAD's p_offset moved
// 1 GiB past the file, so that every symbol's file offset lies outside it.
std::string copy_runtime(const std::string& dir, bool corrupt) {
  fs::create_directories(dir);
  std::string path = dir + "/libcudart.so.13";
  fs::copy_file(standin_rt(), path, fs::copy_options::overwrite_existing);
  if (!corrupt) return path;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  Elf64_Ehdr eh;
  f.read(reinterpret_cast<char*>(&eh), sizeof eh);
  int patched = 0;
  for (int i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    f.seekg(eh.e_phoff + i * sizeof ph);
    f.read(reinterpret_cast<char*>(&ph), sizeof ph);
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    ph.p_offset += 1ull << 30;
    f.seekp(eh.e_phoff + i * sizeof ph);
    f.write(reinterpret_cast<const char*>(&ph), sizeof ph);
    patched++;
  }
  EXPECT_EQ(patched, 1);
  return path;
}

}  // namespace

TEST(Reliability, CorruptProgramHeadersLib) {
  std::string dir = "/tmp/gstest-reliab-" + std::to_string(getpid());
  std::string good = copy_runtime(dir + "/good", false);
  std::string bad = copy_runtime(dir + "/bad", true);
  ASSERT_EQ(uprobe_links_on(bad), 0u);

  // The link walk sees a good copy's probes while they are attached (so that 0 below means
  // something), and none once gpuscope has exited.
  {
    auto g = trace({"--lib", good});
    ASSERT_TRUE(g->started());
    size_t n = uprobe_links_on(good);
    EXPECT_GT(n, 0u);
    note("corrupt_lib_control_links", std::to_string(n));
    g->stop();
    double took = 0;
    EXPECT_TRUE(eventually([&] { return uprobe_links_on(good) == 0; }, 10)) << took;
  }

  for (std::string sub : {"trace", "latency", "kernels", "memleak", "agent"}) {
    std::vector<std::string> argv{gpuscope_bin(), sub, "--lib", bad, "-d", "5"};
    if (sub == "agent") argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    auto r = run(argv, {}, 30);
    EXPECT_EQ(r.exit_code, 2) << sub << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << sub << ": " << r.err;
    EXPECT_NE(r.err.find("--lib " + bad + ": no probe could be attached"), std::string::npos) << sub << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << sub << ": " << r.out;
    EXPECT_EQ(uprobe_links_on(bad), 0u) << sub;
  }
  // The same file named twice, and next to a good one: still refused as a whole.
  for (std::string sub : {"memleak", "agent"}) {
    std::vector<std::string> argv{gpuscope_bin(), sub, "--lib", good, "--lib", bad, "-d", "5"};
    if (sub == "agent") argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    auto r = run(argv, {}, 30);
    EXPECT_EQ(r.exit_code, 2) << sub << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << sub << ": " << r.err;
    EXPECT_NE(r.err.find("--lib " + bad + ": no probe could be attached"), std::string::npos) << sub << ": " << r.err;
    EXPECT_EQ(uprobe_links_on(bad), 0u) << sub;
    EXPECT_TRUE(eventually([&] { return uprobe_links_on(good) == 0; }, 10)) << sub;
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// 5. kernels exits within 0.5 s of SIGTERM, and of the end of -d, with probes attached and
// launches being counted.

namespace {

// Seconds from SIGTERM to exit, with a launching process under probes.
double kernels_sigterm_exit() {
  Process w({standin_app(), "launch_loop", "20000"});
  ready_pid(w);
  auto k = kernels({"--lib", standin_rt(), "--lib", standin_drv(), "--interval", "0.2"});
  if (!k->started()) return 99;
  // Rows are being printed: the probes fire.
  if (!eventually([&] { return !of_type(k->lines(), 0, "kernel").empty(); }, 10)) ADD_FAILURE() << k->proc().out();
  auto t0 = Clock::now();
  k->proc().signal(SIGTERM);
  int rc = k->proc().wait(10);
  double took = since(t0);
  EXPECT_EQ(rc, 0) << k->proc().err();
  w.signal(SIGKILL);
  return took;
}

// Seconds from the end of -d (counted from when "counting" was seen, which is after the
// timer started) to exit.
double kernels_duration_exit(double d) {
  Process w({standin_app(), "launch_loop", "20000"});
  ready_pid(w);
  Process k(
      {gpuscope_bin(), "kernels", "--json", "-d", std::to_string(d), "--lib", standin_rt(), "--lib", standin_drv()});
  if (!k.wait_for("gpuscope: counting", 60, true)) {
    ADD_FAILURE() << k.err();
    return 99;
  }
  auto t0 = Clock::now();
  int rc = k.wait(30);
  double took = since(t0) - d;
  EXPECT_EQ(rc, 0) << k.err();
  EXPECT_FALSE(of_type(parse_lines(k.out()), 0, "kernel").empty()) << k.out();
  w.signal(SIGKILL);
  return took;
}

}  // namespace

// The floor is the exit hook's detach: a tp_btf trampoline waits for an RCU-tasks grace period,
// measured at 0.21-0.28 s on the build VM (strace -T on its close), even with every other link
// detached alongside it.
constexpr double kExitBound = 0.5;

TEST(Reliability, KernelsExitsPromptly) {
  double term = kernels_sigterm_exit();
  std::string term_s = std::to_string(term);
  if (term >= kExitBound) {  // one retry: the machine is shared
    term = kernels_sigterm_exit();
    term_s += ", retry " + std::to_string(term);
  }
  EXPECT_LT(term, kExitBound);
  note("kernels_sigterm_to_exit_s", term_s);

  double dur = kernels_duration_exit(1.0);
  std::string dur_s = std::to_string(dur);
  if (dur >= kExitBound) {
    dur = kernels_duration_exit(1.0);
    dur_s += ", retry " + std::to_string(dur);
  }
  EXPECT_LT(dur, kExitBound);
  note("kernels_duration_end_to_exit_s_at_most", dur_s);
}

// ---------------------------------------------------------------------------------------
// 6. Unknown subcommands list the subcommands.

TEST(Reliability, UnknownSubcommandListsThem) {
  auto subs = subcommands();
  ASSERT_GE(subs.size(), 9u);
  for (std::string bogus : {"trcae", "memlek", "kernel"}) {
    auto r = run({gpuscope_bin(), bogus});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("unknown subcommand '" + bogus + "'"), std::string::npos) << r.err;
    for (auto& s : subs) EXPECT_NE(r.err.find(s), std::string::npos) << s << " not listed: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  auto r = run({gpuscope_bin()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  for (auto& s : subs) EXPECT_NE(r.err.find(s), std::string::npos) << s << " not listed: " << r.err;
}

// ---------------------------------------------------------------------------------------
// kill -9 while attached: the kernel drops every program, map and link with the process, and
// the probed process runs on undisturbed.

TEST(Reliability, Kill9LeavesNothing) {
  std::string figures;
  for (std::string sub : {"memleak", "kernels", "trace", "latency"}) {
    Process w({standin_app(), "launch_loop", "4000"});
    ready_pid(w);
    std::string ready = sub == "memleak"   ? "gpuscope: tracking"
                        : sub == "kernels" ? "gpuscope: counting"
                        : sub == "trace"   ? "gpuscope: tracing"
                                           : "gpuscope: timing";
    Tool g(sub, {"--lib", standin_rt(), "--lib", standin_drv()}, ready);
    ASSERT_TRUE(g.started());
    auto held = bpf_ids_held(g.proc().pid());
    EXPECT_FALSE(held["prog_id"].empty()) << sub;
    EXPECT_FALSE(held["map_id"].empty()) << sub;
    EXPECT_FALSE(held["link_id"].empty()) << sub;
    EXPECT_GT(uprobe_links_on(standin_rt()), 0u) << sub;
    g.proc().signal(SIGKILL);
    EXPECT_EQ(g.proc().wait(10), 128 + SIGKILL);
    double took = 0;
    auto alive = wait_gone(held, 10, &took);
    for (auto& [kind, ids] : alive)
      for (uint32_t id : ids) ADD_FAILURE() << sub << ": " << kind << " " << id << " outlived kill -9";
    // (Not "no link on the stand-in files at all": other tests on a shared host run tracers
    // without --lib that find these files through the workload's maps.)
    // The workload, whose probes vanished under it, ends normally.
    EXPECT_EQ(w.wait(30), 0) << sub << ": " << w.err();
    EXPECT_NE(w.out().find("done"), std::string::npos);
    figures += sub + ": " + std::to_string(held["prog_id"].size()) + " progs, " +
               std::to_string(held["map_id"].size()) + " maps, " + std::to_string(held["link_id"].size()) +
               " links gone in " + std::to_string(took).substr(0, 5) + " s; ";
  }
  note("kill9", figures);
}

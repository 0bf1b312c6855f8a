// gpuscope memleak against real processes: the stand-in runtime and driver (leaks, every
// API, attach after start, churn of short-lived processes, stacks), the real libcudart
// without a GPU, and bad input.
#include <bpf/bpf.h>
#include <dirent.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::string standin_lib(const char* name) { return standin_lib_dir() + "/" + name; }

// gpuscope memleak --json in the background, probing the stand-in libraries.
class Memleak {
 public:
  explicit Memleak(std::vector<std::string> extra = {}, bool standin = true) {
    std::vector<std::string> argv{gpuscope_bin(), "memleak", "--json"};
    if (standin)
      argv.insert(argv.end(), {"--lib", standin_lib("libcudart.so.13"), "--lib", standin_lib("libcuda.so.1")});
    argv.insert(argv.end(), extra.begin(), extra.end());
    p_ = std::make_unique<Process>(argv);
    if (!p_->wait_for("gpuscope: tracking", 30, true)) ADD_FAILURE() << "did not start: " << p_->err();
  }
  // Waits until `n` lines of `type` for pid have been printed.
  bool wait_lines(pid_t pid, const std::string& type, size_t n, double timeout_s = 10) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (of(parse_lines(p_->out()), pid, type).size() >= n) return true;
      sleep_s(0.05);
    }
    return false;
  }
  std::vector<json> stop() {
    p_->signal(SIGINT);
    EXPECT_EQ(p_->wait(30), 0) << p_->err();
    return parse_lines(p_->out());
  }
  Process& proc() { return *p_; }

  // A workload run to its end under gpuscope, which was stopped once its summaries were out.
  struct Ended {
    pid_t pid = -1;
    std::string err;  // the workload's
    std::vector<json> lines;
  };
  // Runs `argv` to its end, waits for `summaries` summaries of it, and stops.
  void run_to_end(const std::vector<std::string>& argv, Ended* e, size_t summaries = 1) {
    Process w(argv);
    e->pid = ready_pid(w);
    ASSERT_EQ(w.wait(20), 0) << w.err();
    e->err = w.err();
    ASSERT_TRUE(wait_lines(e->pid, "summary", summaries)) << p_->out();
    e->lines = stop();
  }

  static std::vector<json> of(const std::vector<json>& lines, pid_t pid, const std::string& type) {
    std::vector<json> r;
    for (auto& l : lines)
      if (l["type"] == type && (pid <= 0 || l.value("pid", -1) == pid)) r.push_back(l);
    return r;
  }

 private:
  std::unique_ptr<Process> p_;
};

json final_summary(const std::vector<json>& lines, pid_t pid) {
  for (auto& l : Memleak::of(lines, pid, "summary"))
    if (l["state"] == "exited") return l;
  return json();
}

// size -> leak row, of a process's report at exit.
std::multimap<uint64_t, json> final_leaks(const std::vector<json>& lines, pid_t pid) {
  std::multimap<uint64_t, json> r;
  for (auto& l : Memleak::of(lines, pid, "leak"))
    if (l["state"] == "exited") r.emplace(l["size"].get<uint64_t>(), l);
  return r;
}

// "leaks: cudaMalloc 1000 -> 0x7e..." lines the stand-in program prints.
std::map<std::string, std::string> printed_addresses(const std::string& err) {
  std::map<std::string, std::string> r;
  static const std::regex re(R"(leaks: (\w+) (\d+) -> (0x[0-9a-f]+))");
  for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it)
    r[(*it)[1].str() + " " + (*it)[2].str()] = (*it)[3].str();
  static const std::regex vmm(R"(mapped at (0x[0-9a-f]+))");
  std::smatch m;
  if (std::regex_search(err, m, vmm)) r["vmm"] = m[1];
  return r;
}

void expect_counts(const json& s, const std::map<std::string, uint64_t>& want) {
  for (auto& [k, v] : want) EXPECT_EQ(s.at(k).get<uint64_t>(), v) << k << " in " << s.dump();
}

}  // namespace

// 5 runtime and 3 driver allocations, a VMM handle released but still mapped, frees, one
// double free. The report lists exactly the unfreed blocks; runtime calls count once.
TEST(Memleak, LeakReport) {
  Memleak g;
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({standin_app(), "leaks"}, &e));
  auto& [pid, err, lines] = e;
  auto addr = printed_addresses(err);
  ASSERT_EQ(addr.size(), 9u) << err;

  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  EXPECT_EQ(s["comm"], "standin_app");
  // 9 allocating calls: a runtime call that reaches the driver is one allocation.
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

  auto leaks = final_leaks(lines, pid);
  ASSERT_EQ(leaks.size(), 6u) << g.proc().out();
  auto expect_leak = [&](uint64_t size, const std::string& api, const std::string& layer, const std::string& at) {
    ASSERT_EQ(leaks.count(size), 1u) << size;
    const json& l = leaks.find(size)->second;
    EXPECT_EQ(l["api"], api) << l.dump();
    EXPECT_EQ(l["layer"], layer) << l.dump();
    EXPECT_EQ(l["addr"], at) << l.dump();
    EXPECT_EQ(l["comm"], "standin_app");
    EXPECT_GT(l["age_ns"].get<uint64_t>(), 0u);
    EXPECT_LT(l["age_ns"].get<uint64_t>(), 10000000000ull);
    EXPECT_TRUE(l["stack"].is_array() && l["stack"].empty()) << "no --stacks";
  };
  for (uint64_t sz : {1000, 3000, 5000}) {
    expect_leak(sz, "cudaMalloc", "runtime", addr["cudaMalloc " + std::to_string(sz)]);
    EXPECT_EQ(leaks.find(sz)->second["device"], 0) << "the runtime's default device";
    EXPECT_EQ(leaks.find(sz)->second["category"], "device");
  }
  for (uint64_t sz : {600, 800}) {
    expect_leak(sz, "cuMemAlloc_v2", "driver", addr["cuMemAlloc " + std::to_string(sz)]);
    EXPECT_EQ(leaks.find(sz)->second["device"], 0) << "the context the runtime made current";
  }
  EXPECT_EQ(s["devices"], json::parse(R"([{"device":0,"outstanding_bytes":2107552,"outstanding_allocs":6}])"))
      << s.dump();
  expect_leak(2097152, "cuMemCreate", "driver", addr["vmm"]);
  const json& vmm = leaks.find(2097152)->second;
  EXPECT_EQ(vmm["category"], "vmm");
  EXPECT_EQ(vmm["device"], 0) << "prop->location.id";
  EXPECT_EQ(vmm["released"], true);
  EXPECT_EQ(vmm["mappings"], 1);

  auto bad = Memleak::of(lines, pid, "bad_free");
  ASSERT_EQ(bad.size(), 1u) << g.proc().out();
  EXPECT_EQ(bad[0]["reason"], "double_free");
  EXPECT_EQ(bad[0]["api"], "cudaFree");
  EXPECT_EQ(bad[0]["addr"], addr["cudaMalloc 2000"]);
  EXPECT_EQ(bad[0]["comm"], "standin_app");
  EXPECT_FALSE(bad[0].contains("error"));
  EXPECT_TRUE(Memleak::of(lines, pid, "untracked_free").empty());
}

// Every allocation API, pinned memory apart from device memory, VMM handles freed in
// either order, an allocation and a free that fail.
TEST(Memleak, EveryApi) {
  Memleak g;
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({standin_app(), "memkinds"}, &e));
  auto& [pid, err, lines] = e;
  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  expect_counts(s, {{"allocs_ok", 11},
                    {"allocs_failed", 1},
                    {"frees_ok", 7},
                    {"frees_failed", 1},
                    {"bad_frees", 0},
                    {"outstanding_allocs", 2},
                    {"outstanding_bytes", 1111 + 5120},
                    {"pinned_allocs", 2},
                    {"pinned_bytes", 3333 + 7777}});
  EXPECT_EQ(s["alloc_errors"], json({{"cudaErrorMemoryAllocation", 1}})) << s.dump();
  EXPECT_EQ(s["free_errors"], json({{"cudaErrorInvalidValue", 1}})) << s.dump();

  auto leaks = final_leaks(lines, pid);
  ASSERT_EQ(leaks.size(), 4u) << g.proc().out();
  std::map<uint64_t, std::pair<std::string, std::string>> want = {{1111, {"cudaMallocManaged", "managed"}},
                                                                  {3333, {"cudaMallocHost", "pinned"}},
                                                                  {5120, {"cuMemAllocPitch_v2", "device"}},
                                                                  {7777, {"cuMemAllocHost_v2", "pinned"}}};
  for (auto& [size, w2] : want) {
    ASSERT_EQ(leaks.count(size), 1u) << size << "\n" << g.proc().out();
    EXPECT_EQ(leaks.find(size)->second["api"], w2.first);
    EXPECT_EQ(leaks.find(size)->second["category"], w2.second);
  }
  auto bad = Memleak::of(lines, pid, "bad_free");
  ASSERT_EQ(bad.size(), 1u) << g.proc().out();
  EXPECT_EQ(bad[0]["reason"], "error");
  EXPECT_EQ(bad[0]["api"], "cudaFree");
  EXPECT_EQ(bad[0]["error"], "cudaErrorInvalidValue");
}

// With --stacks each leak carries its allocating user stack, symbolized and demangled.
TEST(Memleak, Stacks) {
  Memleak g({"--stacks"});
  // The delay keeps the process alive while gpuscope reads its mappings.
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({standin_app(), "--delay-ms", "400", "leaks"}, &e));
  auto& [pid, err, lines] = e;
  auto leaks = final_leaks(lines, pid);
  ASSERT_EQ(leaks.size(), 6u) << g.proc().out();
  for (auto& [size, l] : leaks) {
    ASSERT_GE(l["stack"].size(), 2u) << l.dump();
    EXPECT_EQ(l["stack"][0].get<std::string>().rfind("scenario_leaks()+0x", 0), 0u) << l.dump();
    EXPECT_NE(l["stack"][0].get<std::string>().find("(standin_app)"), std::string::npos) << l.dump();
    EXPECT_EQ(l["stack"][1].get<std::string>().rfind("main+0x", 0), 0u) << l.dump();
  }
}

// Debian's python3 (no -X perf) allocating through the stand-in runtime from a known Python
// function: the leak's stack names it, with its caller, file and line, read from the interpreter.
TEST(Memleak, StacksNamePythonFunctions) {
  Memleak g({"--stacks"});
  std::string script = std::string(PY_FIXTURE_DIR) + "/alloc.py";
  Process w({"/usr/bin/python3", script, standin_lib("libcudart.so.13"), "1.0"},
            {"LD_LIBRARY_PATH=" + standin_lib_dir()});
  pid_t pid = ready_pid(w);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  ASSERT_TRUE(w.out().find("allocated rc=0") != std::string::npos) << w.out() << w.err();
  ASSERT_TRUE(g.wait_lines(pid, "summary", 1)) << g.proc().out();
  sleep_s(0.3);
  // Reported, then gone from the walk's maps: its interpreter entry, chains and thread states.
  auto maps = pids_in_maps(g.proc().pid());
  for (const char* name : {"gs_py_procs", "gs_py_stacks", "gs_py_tstates"}) {
    ASSERT_TRUE(maps.count(name)) << name << " not found among gpuscope's maps";
    auto& keys = maps[name];
    EXPECT_EQ(std::count(keys.begin(), keys.end(), static_cast<uint32_t>(pid)), 0) << name;
  }
  auto lines = g.stop();
  auto leaks = final_leaks(lines, pid);
  ASSERT_EQ(leaks.count(123457), 1u) << g.proc().out();
  std::vector<std::string> st = leaks.find(123457)->second["stack"];
  auto line_of = [&](const std::string& tag) {
    std::ifstream f(script);
    int n = 0;
    for (std::string l; std::getline(f, l);)
      if (++n, l.find("# mark:" + tag) != std::string::npos) return n;
    return -1;
  };
  auto alloc = std::find(st.begin(), st.end(), fmt::format("py::allocate_weights ({}:{})", script, line_of("alloc")));
  ASSERT_NE(alloc, st.end()) << leaks.find(123457)->second.dump();
  ASSERT_NE(alloc + 1, st.end());
  EXPECT_EQ(alloc[1], fmt::format("py::build_model ({}:{})", script, line_of("build")));
  EXPECT_FALSE(st[0].starts_with("py::")) << "the native caller of cudaMalloc (ctypes' libffi) comes first";
  EXPECT_TRUE(std::find_if(alloc, st.end(), [](auto& f) { return f.starts_with("py::<module> ("); }) != st.end());
}

// Blocks allocated before gpuscope started and freed after: untracked, not bad frees.
// -p limits the report to one of two such processes.
TEST(Memleak, AttachAfterStart) {
  Process a({standin_app(), "prestart", "3"}), b({standin_app(), "prestart", "2"});
  pid_t pa = ready_pid(a), pb = ready_pid(b);
  ASSERT_TRUE(a.wait_for("allocated")) << a.err();
  ASSERT_TRUE(b.wait_for("allocated")) << b.err();
  Memleak g({"-p", std::to_string(pa)});
  a.signal(SIGUSR1);
  b.signal(SIGUSR1);
  ASSERT_EQ(a.wait(20), 0) << a.err();
  ASSERT_EQ(b.wait(20), 0) << b.err();
  ASSERT_TRUE(g.wait_lines(pa, "summary", 1)) << g.proc().out();
  auto lines = g.stop();
  auto untracked = Memleak::of(lines, pa, "untracked_free");
  ASSERT_EQ(untracked.size(), 4u) << g.proc().out();
  std::set<std::string> apis;
  for (auto& u : untracked) {
    apis.insert(u["api"].get<std::string>());
    EXPECT_NE(u["addr"], "0x0");
    EXPECT_FALSE(u.contains("reason"));
  }
  EXPECT_EQ(apis, (std::set<std::string>{"cudaFree", "cuMemFree_v2"}));
  EXPECT_TRUE(Memleak::of(lines, 0, "bad_free").empty()) << g.proc().out();
  json s = final_summary(lines, pa);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  expect_counts(s, {{"frees_untracked", 4},
                    {"bad_frees", 0},
                    {"allocs_ok", 1},
                    {"frees_ok", 1},
                    {"outstanding_allocs", 0},
                    {"outstanding_bytes", 0}});
  EXPECT_TRUE(final_leaks(lines, pa).empty());
  for (auto& l : lines) EXPECT_NE(l.value("pid", -1), pb) << "-p " << pa << ": " << l.dump();
}

// --min-age lists live allocations older than the age while the process runs, each once.
TEST(Memleak, MinAge) {
  Memleak g({"--interval", "0.3", "--min-age", "0.5"});
  Process w({standin_app(), "prestart", "2"});
  pid_t pid = ready_pid(w);
  ASSERT_TRUE(w.wait_for("allocated")) << w.err();
  ASSERT_TRUE(g.wait_lines(pid, "leak", 3, 10)) << g.proc().out();
  // While it runs, its allocations are in the map the churn test reads.
  auto keys = pids_in_maps(g.proc().pid())["ml_allocs"];
  EXPECT_EQ(std::count(keys.begin(), keys.end(), static_cast<uint32_t>(pid)), 3);
  sleep_s(0.7);  // more intervals: nothing is listed twice
  w.signal(SIGUSR1);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  ASSERT_TRUE(g.wait_lines(pid, "summary", 2)) << g.proc().out();
  auto lines = g.stop();
  auto leaks = Memleak::of(lines, pid, "leak");
  ASSERT_EQ(leaks.size(), 3u) << g.proc().out();
  std::multiset<uint64_t> sizes;
  for (auto& l : leaks) {
    EXPECT_EQ(l["state"], "running");
    EXPECT_GE(l["age_ns"].get<uint64_t>(), 500000000u);
    sizes.insert(l["size"].get<uint64_t>());
  }
  EXPECT_EQ(sizes, (std::multiset<uint64_t>{777, 1000, 2000}));
  bool running = false;
  for (auto& s : Memleak::of(lines, pid, "summary"))
    if (s["state"] == "running" && s["outstanding_allocs"] == 3 && s["outstanding_bytes"] == 3777) running = true;
  EXPECT_TRUE(running) << g.proc().out();
  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null());
  expect_counts(s, {{"allocs_ok", 4}, {"frees_ok", 4}, {"outstanding_allocs", 0}, {"bad_frees", 0}});
}

// 200 short-lived processes allocate and exit. Each gets its final rows, and the BPF maps
// then hold nothing of any of them.
TEST(Memleak, Churn) {
  Memleak g;
  std::set<pid_t> pids;
  for (int batch = 0; batch < 10; batch++) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int i = 0; i < 20; i++)
      ps.push_back(std::make_unique<Process>(std::vector<std::string>{standin_app(), "churn"}));
    for (auto& p : ps) {
      pids.insert(ready_pid(*p));
      ASSERT_EQ(p->wait(20), 0) << p->err();
    }
  }
  ASSERT_EQ(pids.size(), 200u);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::vector<json> lines;
  size_t done = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    lines = parse_lines(g.proc().out());
    done = 0;
    for (pid_t p : pids) done += !final_summary(lines, p).is_null();
    if (done == pids.size()) break;
    sleep_s(0.1);
  }
  ASSERT_EQ(done, pids.size());

  auto maps = pids_in_maps(g.proc().pid());
  for (const char* name : {"ml_allocs", "ml_procs", "ml_freed", "ml_errors"})
    EXPECT_TRUE(maps.count(name)) << name << " not found among gpuscope's maps";
  for (auto& [name, keys] : maps)
    for (uint32_t k : keys) EXPECT_FALSE(pids.count(static_cast<pid_t>(k))) << name << " still holds pid " << k;

  lines = g.stop();
  for (pid_t p : pids) {
    json s = final_summary(lines, p);
    expect_counts(s, {{"allocs_ok", 2},
                      {"allocs_failed", 1},
                      {"frees_ok", 1},
                      {"bad_frees", 1},
                      {"double_frees", 1},
                      {"outstanding_allocs", 1},
                      {"outstanding_bytes", 4096}});
    EXPECT_EQ(s["alloc_errors"], json({{"cudaErrorMemoryAllocation", 1}}));
    auto leaks = final_leaks(lines, p);
    ASSERT_EQ(leaks.size(), 1u) << p;
    EXPECT_EQ(leaks.begin()->first, 4096u);
    EXPECT_EQ(leaks.begin()->second["api"], "cudaMalloc");
    auto bad = Memleak::of(lines, p, "bad_free");
    ASSERT_EQ(bad.size(), 1u) << p;
    EXPECT_EQ(bad[0]["reason"], "double_free");
    EXPECT_EQ(bad[0]["api"], "cuMemFree_v2");
  }
  auto drops = Memleak::of(lines, 0, "drops");
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0]["events_lost_ringbuf_full"], 0);
  EXPECT_EQ(drops[0]["allocs_not_recorded_map_full"], 0);
}

// An exec ends the old image's memory: its leaks are reported then, and the new image
// starts from nothing under the same pid.
TEST(Memleak, ExecResets) {
  Memleak g;
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({standin_app(), "exec"}, &e, 2));
  auto& [pid, err, lines] = e;
  auto sums = Memleak::of(lines, pid, "summary");
  ASSERT_EQ(sums.size(), 2u) << g.proc().out();
  EXPECT_EQ(sums[0]["state"], "exec");
  expect_counts(sums[0], {{"allocs_ok", 1}, {"outstanding_allocs", 1}, {"outstanding_bytes", 1234}});
  EXPECT_EQ(sums[1]["state"], "exited");
  expect_counts(sums[1],
                {{"allocs_ok", 2}, {"allocs_failed", 1}, {"outstanding_allocs", 1}, {"outstanding_bytes", 4096}});
  std::map<std::string, std::vector<uint64_t>> leaks;
  for (auto& l : Memleak::of(lines, pid, "leak")) leaks[l["state"]].push_back(l["size"].get<uint64_t>());
  EXPECT_EQ(leaks["exec"], std::vector<uint64_t>{1234});
  EXPECT_EQ(leaks["exited"], std::vector<uint64_t>{4096});
}

// -c: other processes are not tracked.
TEST(Memleak, CommFilter) {
  Memleak g({"-c", "no_such_comm"});
  Process w({standin_app(), "leaks"});
  pid_t pid = ready_pid(w);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.5);
  auto lines = g.stop();
  for (auto& l : lines) EXPECT_NE(l.value("pid", -1), pid) << l.dump();
}

// The real libcudart without a GPU: every call fails with cudaErrorInsufficientDriver.
TEST(Memleak, RealRuntimeFailures) {
  Memleak g({"--lib", cuda_runtime_lib()}, false);
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({calls_shared(), "3", "0"}, &e));
  auto& [pid, err, lines] = e;
  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  EXPECT_EQ(s["comm"], "calls_shared");
  expect_counts(
      s, {{"allocs_ok", 0}, {"allocs_failed", 3}, {"frees_ok", 0}, {"frees_failed", 3}, {"outstanding_allocs", 0}});
  EXPECT_EQ(s["alloc_errors"], json({{"cudaErrorInsufficientDriver", 3}})) << s.dump();
  EXPECT_EQ(s["free_errors"], json({{"cudaErrorInsufficientDriver", 3}})) << s.dump();
  auto bad = Memleak::of(lines, pid, "bad_free");
  ASSERT_EQ(bad.size(), 3u) << g.proc().out();
  for (auto& b : bad) {
    EXPECT_EQ(b["reason"], "error");
    EXPECT_EQ(b["error"], "cudaErrorInsufficientDriver");
    EXPECT_EQ(b["api"], "cudaFree");
  }
  EXPECT_TRUE(final_leaks(lines, pid).empty());
}

// Two contexts on two devices and a retained primary context. While the program holds them,
// the summary splits device memory by device. Destroying one context ends exactly its blocks
// (device and pinned), a primary-context reset ends that context's, each reported once; what
// is left at exit is what was really held, each block with its device.
TEST(Memleak, ContextsEndTheirAllocations) {
  Memleak g({"--interval", "0.2"});
  Process w({standin_app(), "contexts"});
  pid_t pid = ready_pid(w);
  ASSERT_TRUE(w.wait_for("holding")) << w.err();
  bool split = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!split && std::chrono::steady_clock::now() < deadline) {
    for (auto& l : Memleak::of(parse_lines(g.proc().out()), pid, "summary"))
      split |= l["outstanding_allocs"] == 5 &&
               l["devices"] == json::parse(R"([{"device":0,"outstanding_bytes":8000,"outstanding_allocs":3},
                                                {"device":1,"outstanding_bytes":9000,"outstanding_allocs":2}])");
    sleep_s(0.05);
  }
  EXPECT_TRUE(split) << "no running summary with memory per device\n" << g.proc().out();
  w.signal(SIGUSR1);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  ASSERT_TRUE(g.wait_lines(pid, "leak", 4)) << g.proc().out();
  // Its final rows are out: none of its state is left, contexts included.
  auto keys = pids_in_maps(g.proc().pid());
  EXPECT_TRUE(keys.count("ml_ctxs")) << "ml_ctxs not found among gpuscope's maps";
  for (auto& [name, ks] : keys) EXPECT_EQ(std::count(ks.begin(), ks.end(), static_cast<uint32_t>(pid)), 0) << name;
  auto lines = g.stop();
  std::smatch m;
  std::string err = w.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(c0 (0x[0-9a-f]+) c1 (0x[0-9a-f]+))"))) << err;
  std::string c1 = m[2];

  auto rel = Memleak::of(lines, pid, "context_released");
  ASSERT_EQ(rel.size(), 2u) << g.proc().out();
  EXPECT_EQ(rel[0]["ctx"], c1);
  EXPECT_EQ(rel[0]["primary"], false);
  EXPECT_EQ(rel[0]["device"], 1);
  EXPECT_EQ(rel[0]["api"], "cuCtxDestroy_v2");
  EXPECT_EQ(rel[0]["layer"], "driver");
  expect_counts(rel[0], {{"allocs", 1}, {"bytes", 3000}, {"pinned_allocs", 1}, {"pinned_bytes", 4000}});
  EXPECT_EQ(rel[1]["ctx"], "primary");
  EXPECT_EQ(rel[1]["primary"], true);
  EXPECT_EQ(rel[1]["device"], 1);
  EXPECT_EQ(rel[1]["api"], "cuDevicePrimaryCtxReset_v2");
  expect_counts(rel[1], {{"allocs", 1}, {"bytes", 6000}, {"pinned_allocs", 0}, {"pinned_bytes", 0}});

  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  expect_counts(s, {{"allocs_ok", 8},
                    {"frees_ok", 1},
                    {"bad_frees", 0},
                    {"outstanding_allocs", 4},
                    {"outstanding_bytes", 1000 + 5000 + 7000 + 8000},
                    {"pinned_allocs", 0},
                    {"pinned_bytes", 0}});
  EXPECT_EQ(s["devices"], json::parse(R"([{"device":0,"outstanding_bytes":13000,"outstanding_allocs":3},
                                          {"device":1,"outstanding_bytes":8000,"outstanding_allocs":1}])"))
      << s.dump();
  auto leaks = final_leaks(lines, pid);
  ASSERT_EQ(leaks.size(), 4u) << g.proc().out();
  static const std::regex re(R"(contexts: (\w+) (\d+) -> (0x[0-9a-f]+))");
  std::map<uint64_t, std::pair<std::string, std::string>> printed;
  for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it)
    printed[std::stoull((*it)[2].str())] = {(*it)[1].str(), (*it)[3].str()};
  for (auto [size, dev] : std::vector<std::pair<uint64_t, int>>{{1000, 0}, {5000, 0}, {7000, 0}, {8000, 1}}) {
    ASSERT_EQ(leaks.count(size), 1u) << size << "\n" << g.proc().out();
    const json& l = leaks.find(size)->second;
    EXPECT_EQ(l["device"], dev) << l.dump();
    EXPECT_EQ(l["addr"], printed[size].second) << l.dump();
    EXPECT_EQ(l["api"], size == 8000 ? "cudaMalloc" : "cuMemAlloc_v2") << l.dump();
  }
}

// cudaDeviceReset() and exit: what the reset freed is one context_released row, and no leak
// is left; the pool block (stream-ordered memory outlives the reset) is freed normally after.
TEST(Memleak, DeviceResetIsNotALeak) {
  Memleak g;
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({standin_app(), "device_reset"}, &e));
  auto& [pid, err, lines] = e;
  auto rel = Memleak::of(lines, pid, "context_released");
  ASSERT_EQ(rel.size(), 1u) << g.proc().out();
  EXPECT_EQ(rel[0]["api"], "cudaDeviceReset");
  EXPECT_EQ(rel[0]["layer"], "runtime");
  EXPECT_EQ(rel[0]["primary"], true);
  EXPECT_EQ(rel[0]["device"], 0);
  expect_counts(rel[0], {{"allocs", 1}, {"bytes", 1000}, {"pinned_allocs", 1}, {"pinned_bytes", 500}});
  EXPECT_TRUE(final_leaks(lines, pid).empty()) << g.proc().out();
  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  expect_counts(s, {{"allocs_ok", 4},
                    {"frees_ok", 2},
                    {"bad_frees", 0},
                    {"frees_untracked", 0},
                    {"outstanding_allocs", 0},
                    {"outstanding_bytes", 0},
                    {"pinned_allocs", 0}});
  EXPECT_EQ(s["devices"], json::array());
}

// The real libcudart without a GPU: the allocations and the reset fail, so no context
// ended holding memory and nothing is reported as released.
TEST(Memleak, RealRuntimeDeviceReset) {
  Memleak g({"--lib", cuda_runtime_lib()}, false);
  Memleak::Ended e;
  ASSERT_NO_FATAL_FAILURE(g.run_to_end({CUDA_FIXTURE_DIR "/ctx_reset"}, &e));
  auto& [pid, err, lines] = e;
  json s = final_summary(lines, pid);
  ASSERT_FALSE(s.is_null()) << g.proc().out();
  expect_counts(s, {{"allocs_ok", 0}, {"allocs_failed", 2}, {"outstanding_allocs", 0}});
  EXPECT_TRUE(Memleak::of(lines, pid, "context_released").empty()) << g.proc().out();
  EXPECT_TRUE(final_leaks(lines, pid).empty());
}

TEST(Memleak, BadInput) {
  BpfLeftovers left;
  for (std::vector<std::string> args : {std::vector<std::string>{"--interval", "0"},
                                        {"--min-age", "-1"},
                                        {"-p", "999999999"},
                                        {"--lib", "/etc/passwd"},
                                        {"--lib", "/nonexistent/libcudart.so"},
                                        {"--lib", "/bin/true"},
                                        {"--bogus"}}) {
    expect_usage_error("memleak", args);
  }
  EXPECT_EQ(left.list(), "");
}

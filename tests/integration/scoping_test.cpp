// Containers and pods on a real cgroup v2 tree: the kubelet's systemd-driver paths for two pods
// of two containers each (containerd), a Docker container, and a host session, each running the
// stand-in CUDA workload with its own launch count; a fake kubelet log tree (--pods-dir) and
// Docker state (--runtime-root) name them. Every filter must select exactly its processes, with
// their launch counts, and every line must carry their names.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "core/containers.h"
#include "harness.h"
#include "usage_error.h"

using namespace gstest;
namespace fs = std::filesystem;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

struct Ctr {
  std::string name, pod, ns, id;  // pod and ns empty outside Kubernetes; id empty on the host
  std::string cgroup;             // absolute directory
  int launches;
  pid_t pid = 0;
};

// 64 hex digits: this test process's pid, so that runs never share ids, then `head` (16).
std::string make_id(const std::string& head) {
  char pid[9];
  snprintf(pid, sizeof pid, "%08x", static_cast<unsigned>(getpid()));
  return pid + head + std::string(40, '0');
}

class Scoping : public testing::Test {
 protected:
  void SetUp() override {
    gpuscope::ContainerResolver r;
    v2_ = r.cgroup2_root();
    if (access((v2_ + "/cgroup.procs").c_str(), W_OK) != 0)
      GTEST_SKIP() << "no writable cgroup v2 at " << v2_ << ": the container filters cannot be exercised";
    root_ = v2_ + "/gstest-scoping-" + std::to_string(getpid());
    if (!make_dir(root_)) GTEST_SKIP() << "cannot make cgroups under " << v2_;
    tmp_ = "/tmp/gs-scoping-tree-" + std::to_string(getpid());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_ + "/log/pods");
    fs::create_directories(tmp_ + "/log/containers");
    uid_web_ = "aaaaaaaa-1111-2222-3333-0000" + make_id("").substr(0, 8);
    uid_batch_ = "bbbbbbbb-1111-2222-3333-0000" + make_id("").substr(0, 8);
    // train's and log's ids share their first 23 digits: 20 of them are an ambiguous prefix.
    ctrs_ = {{"app", "web", "prod", make_id("a100000000000000"), "", 3},
             {"sidecar", "web", "prod", make_id("a200000000000000"), "", 5},
             {"train", "batch", "dev", make_id("b000000000000001"), "", 7},
             {"log", "batch", "dev", make_id("b000000000000002"), "", 11},
             {"redis-cache", "", "", make_id("d000000000000000"), "", 13},
             {"host", "", "", "", "", 17}};
    for (auto& c : ctrs_) c.cgroup = make_container(c);
  }

  void TearDown() override {
    procs_.clear();  // killed and reaped: their cgroups can go
    for (auto& d : made_)
      if (rmdir(d.c_str()) != 0) std::fprintf(stderr, "cannot remove %s\n", d.c_str());
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  bool make_dir(const std::string& d) {
    if (mkdir(d.c_str(), 0755) != 0) return errno == EEXIST;
    made_.insert(made_.begin(), d);  // deepest first when removed
    return true;
  }
  std::string make_cgroup(const std::string& rel) {
    std::string d = root_;
    for (auto& part : fs::path(rel)) {
      d += "/" + part.string();
      EXPECT_TRUE(make_dir(d)) << d;
    }
    return d;
  }

  // The container's cgroup as its runtime makes it, and the files that name it.
  std::string make_container(const Ctr& c) {
    if (c.id.empty()) return make_cgroup("user.slice/user-0.slice/session-1.scope");
    if (c.pod.empty()) {
      std::string state = tmp_ + "/runtime/var/lib/docker/containers/" + c.id;
      fs::create_directories(state);
      std::ofstream(state + "/config.v2.json") << R"({"ID":")" << c.id << R"(","Name":"/)" << c.name << R"("})";
      return make_cgroup("system.slice/docker-" + c.id + ".scope");
    }
    const std::string& uid = c.pod == "web" ? uid_web_ : uid_batch_;
    std::string pod_dir = tmp_ + "/log/pods/" + c.ns + "_" + c.pod + "_" + uid + "/" + c.name;
    fs::create_directories(pod_dir);
    std::ofstream(pod_dir + "/0.log").flush();
    fs::create_symlink(pod_dir + "/0.log",
                       tmp_ + "/log/containers/" + c.pod + "_" + c.ns + "_" + c.name + "-" + c.id + ".log");
    std::string slice_uid = uid;
    std::replace(slice_uid.begin(), slice_uid.end(), '-', '_');
    return make_cgroup("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + slice_uid +
                       ".slice/cri-containerd-" + c.id + ".scope");
  }

  // The workload in the container's cgroup: it moves itself there, then execs (same pid).
  void start(Ctr& c, bool wait = true) {
    std::string cmd = "echo $$ > " + c.cgroup + "/cgroup.procs && exec " + w_.path() +
                      (wait ? " --wait-usr1 1" : " --delay-ms 300") + " calls 1 " + std::to_string(c.launches);
    procs_.push_back(std::make_unique<Process>(std::vector<std::string>{"/bin/sh", "-c", cmd}));
    c.pid = ready_pid(*procs_.back());
  }
  void release_all() {
    for (auto& p : procs_) p->signal(SIGUSR1);
    for (auto& p : procs_) EXPECT_EQ(p->wait(30), 0) << p->err();
  }

  std::vector<std::string> gpuscope(const std::string& sub, std::vector<std::string> args) {
    std::vector<std::string> v{
        gpuscope_bin(), sub, "-c", w_.comm(), "--pods-dir", tmp_ + "/log/pods", "--runtime-root", tmp_ + "/runtime"};
    v.insert(v.end(), args.begin(), args.end());
    return v;
  }
  const Ctr& by_pid(pid_t pid) const {
    for (auto& c : ctrs_)
      if (c.pid == pid) return c;
    throw std::runtime_error("pid " + std::to_string(pid) + " is not a workload");
  }
  // The container fields of a JSON line are those of its process.
  void expect_names(const json& l) const {
    const Ctr& c = by_pid(l["pid"].get<pid_t>());
    EXPECT_EQ(l["container"], c.name) << l.dump();
    EXPECT_EQ(l["container_id"], c.id) << l.dump();
    EXPECT_EQ(l["pod"], c.pod) << l.dump();
    EXPECT_EQ(l["namespace"], c.ns) << l.dump();
  }

  Workload w_{"scoping", "gsscope"};
  std::string v2_, root_, tmp_, uid_web_, uid_batch_;
  std::vector<std::string> made_;
  std::vector<Ctr> ctrs_;
  std::vector<std::unique_ptr<Process>> procs_;
};

TEST_F(Scoping, EachFilterSelectsExactlyItsProcesses) {
  for (auto& c : ctrs_) start(c);
  const Ctr &app = ctrs_[0], &sidecar = ctrs_[1], &train = ctrs_[2];
  struct Case {
    std::vector<std::string> args;
    std::set<std::string> want;
  };
  std::vector<Case> cases{
      {{"--pod", "web"}, {"app", "sidecar"}},
      {{"-n", "dev"}, {"train", "log"}},
      {{"--container", "sidecar", "--container", train.id.substr(0, 24)}, {"sidecar", "train"}},
      {{"--container", "redis-cache"}, {"redis-cache"}},
      {{"--host"}, {"host"}},
      {{"-n", "prod", "--container", "app"}, {"app"}},
      {{"--pod", "web", "-p", std::to_string(sidecar.pid)}, {"sidecar"}},
      {{"--container", app.id}, {"app"}},
      {{}, {"app", "sidecar", "train", "log", "redis-cache", "host"}},
  };
  std::vector<std::unique_ptr<Process>> g;
  for (auto& c : cases) {
    std::vector<std::string> a{"--json", "--interval", "0.5"};
    a.insert(a.end(), c.args.begin(), c.args.end());
    g.push_back(std::make_unique<Process>(gpuscope("kernels", a)));
  }
  for (size_t i = 0; i < g.size(); i++)
    ASSERT_TRUE(g[i]->wait_for("gpuscope: counting", 60, true)) << testing::PrintToString(cases[i].args) << g[i]->err();
  release_all();
  sleep_s(1.0);
  for (size_t i = 0; i < g.size(); i++) {
    const std::string what = testing::PrintToString(cases[i].args);
    g[i]->signal(SIGINT);
    ASSERT_EQ(g[i]->wait(30), 0) << what << g[i]->err();
    std::map<std::string, uint64_t> launches;
    for (auto& l : parse_lines(g[i]->out())) {
      if (l["type"] != "kernel") continue;
      expect_names(l);
      auto& n = launches[by_pid(l["pid"].get<pid_t>()).name];
      n = std::max(n, l["launches"].get<uint64_t>());
    }
    std::set<std::string> seen;
    for (auto& [name, n] : launches) seen.insert(name);
    EXPECT_EQ(seen, cases[i].want) << what;
    for (auto& c : ctrs_) {
      if (cases[i].want.count(c.name)) {
        EXPECT_EQ(launches[c.name], static_cast<uint64_t>(c.launches)) << what;
      }
    }
  }
}

TEST_F(Scoping, TablesAndJsonLinesNameEveryProcess) {
  for (auto& c : ctrs_) start(c);
  Process trace(gpuscope("trace", {"--json", "--api", "cudaLaunchKernel", "-r"}));
  Process table(gpuscope("trace", {"--api", "cudaLaunchKernel", "-r", "-t"}));
  Process memleak(gpuscope("memleak", {"--interval", "3600"}));
  for (auto* p : {&trace, &table, &memleak}) ASSERT_TRUE(p->wait_for("gpuscope: ", 60, true)) << p->err();
  sleep_s(0.5);
  release_all();
  sleep_s(1.0);
  for (auto* p : {&trace, &table, &memleak}) {
    p->signal(SIGINT);
    ASSERT_EQ(p->wait(30), 0) << p->err();
  }
  // JSON: one enter line per launch, each with its process's names.
  std::map<pid_t, int> calls;
  for (auto& l : parse_lines(trace.out())) {
    if (l.value("type", "") == "summary") continue;
    expect_names(l);
    calls[l["pid"].get<pid_t>()]++;
  }
  for (auto& c : ctrs_) EXPECT_EQ(calls[c.pid], c.launches) << c.name;
  // Tables: the header has CONTAINER, POD and NAMESPACE (the kubelet's directory is readable),
  // and each process's rows its names in them.
  for (auto* p : {&table, &memleak}) {
    const std::string out = p->out();
    EXPECT_NE(out.find("CONTAINER"), std::string::npos) << out;
    EXPECT_NE(out.find("POD"), std::string::npos) << out;
    EXPECT_NE(out.find("NAMESPACE"), std::string::npos) << out;
    for (auto& c : ctrs_) {
      std::regex row("\\b" + std::to_string(c.pid) + "\\b.*\\b" + c.name + "\\s+" + (c.pod.empty() ? "-" : c.pod) +
                     "\\s+" + (c.ns.empty() ? "-" : c.ns) + "\\s");
      EXPECT_TRUE(std::regex_search(out, row)) << c.name << " in\n" << out;
    }
  }
}

TEST_F(Scoping, AProcessStartedLaterInANewMatchingContainerIsTraced) {
  Process g(gpuscope("kernels", {"--json", "--interval", "0.5", "--pod", "web"}));
  ASSERT_TRUE(g.wait_for("gpuscope: counting", 60, true)) << g.err();
  // A container made after gpuscope started, in the pod it watches, and one in another pod.
  Ctr late{"late", "web", "prod", make_id("a300000000000000"), "", 19};
  late.cgroup = make_container(late);
  Ctr other{"other", "batch", "dev", make_id("b300000000000000"), "", 23};
  other.cgroup = make_container(other);
  ctrs_.push_back(late);
  ctrs_.push_back(other);
  for (size_t i = ctrs_.size() - 2; i < ctrs_.size(); i++) start(ctrs_[i], false);
  for (auto& p : procs_) EXPECT_EQ(p->wait(30), 0) << p->err();
  sleep_s(1.0);
  g.signal(SIGINT);
  ASSERT_EQ(g.wait(30), 0) << g.err();
  std::map<std::string, uint64_t> launches;
  for (auto& l : parse_lines(g.out()))
    if (l["type"] == "kernel") {
      expect_names(l);
      auto& n = launches[l["container"].get<std::string>()];
      n = std::max(n, l["launches"].get<uint64_t>());
    }
  EXPECT_EQ(launches, (std::map<std::string, uint64_t>{{"late", 19}})) << g.out();
}

TEST_F(Scoping, AContainerThatGoesLeavesNothingCached) {
  gpuscope::ProcessContainers pc(gpuscope::ContainerPaths::with_pods_dir(tmp_ + "/log/pods"), 0);
  Ctr& app = ctrs_[0];
  start(app);
  gpuscope::ContainerInfo c = pc.of(app.pid);
  EXPECT_EQ(c.name, "app");
  EXPECT_EQ(c.pod, "web");
  EXPECT_EQ(c.container_id, app.id);
  EXPECT_EQ(pc.processes(), 1u);
  EXPECT_EQ(pc.cgroups(), 1u);
  release_all();
  procs_.clear();
  ASSERT_EQ(rmdir(app.cgroup.c_str()), 0) << app.cgroup;
  made_.erase(std::find(made_.begin(), made_.end(), app.cgroup));
  pc.sweep();  // finds the process gone
  pc.sweep();  // and, kept for no time, drops it
  EXPECT_EQ(pc.processes(), 0u);
  EXPECT_EQ(pc.cgroups(), 0u);
}

// A container may start after gpuscope: a name that matches none is no error, but is said once.
TEST_F(Scoping, AContainerThatMatchesNothingIsSaidOnce) {
  const std::string nosuch = "nosuch-" + std::to_string(getpid());
  auto r = run(gpuscope("kernels", {"-d", "1", "--container", nosuch, "--container", "redis-cache"}), {}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string said =
      "gpuscope: --container " + nosuch + " matches no running container; waiting for one to start\n";
  EXPECT_EQ(r.err.rfind(said, 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("matches no", said.size()), std::string::npos) << r.err;  // not for redis-cache
}

TEST_F(Scoping, BadFiltersAreRefusedInOneLine) {
  const std::string pods = tmp_ + "/log/pods";
  auto r = expect_usage_error("kernels", {"--pod", "web", "--pods-dir", tmp_ + "/nowhere"});
  EXPECT_NE(r.err.find("--pod needs the kubelet's pod directory"), std::string::npos) << r.err;
  expect_usage_error("trace", {"-n", "dev", "--pods-dir", tmp_ + "/nowhere"});
  expect_usage_error("kernels", {"--container", ""});
  expect_usage_error("memleak", {"--pod", "", "--pods-dir", pods});
  expect_usage_error("latency", {"--namespace", "", "--pods-dir", pods});
  expect_usage_error("trace", {"--host", "--pod", "web", "--pods-dir", pods});
  r = expect_usage_error("kernels", {"--container", ctrs_[2].id.substr(0, 20)});
  EXPECT_NE(r.err.find("more than one container"), std::string::npos) << r.err;
}

}  // namespace

// Runs the built `gpuscope doctor` and checks its report against facts of this host.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../integration/harness.h"

#ifndef GPUSCOPE_BIN
#error "GPUSCOPE_BIN must name the gpuscope binary"
#endif

namespace {

using nlohmann::json;

bool exists(const char* p) { return access(p, F_OK) == 0; }

struct Result {
  int status = -1;
  std::string out;
};

Result run(const std::string& cmd) {
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

struct Report {
  int status = -1;
  std::map<std::string, json> checks, subcommands;
  std::vector<json> libraries;
};

Report doctor(const std::string& prefix = "") {
  Result r = run(prefix + GPUSCOPE_BIN " doctor --json");
  Report rep;
  rep.status = r.status;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);  // throws, failing the test, on a line that is not JSON
    auto type = j.at("type").get<std::string>();
    if (type == "check")
      rep.checks[j.at("name")] = j;
    else if (type == "subcommand")
      rep.subcommands[j.at("name")] = j;
    else if (type == "library")
      rep.libraries.push_back(j);
    else
      ADD_FAILURE() << "unknown line type: " << line;
  }
  return rep;
}

const Report& report() {
  static Report r = doctor();
  return r;
}

bool root() { return geteuid() == 0; }

TEST(Doctor, ExitsZeroWithEveryCheckAndSubcommand) {
  ASSERT_EQ(report().status, 0);
  for (const char* c :
       {"kernel", "btf", "uprobes", "kprobes", "fentry", "raw_tp", "tp_btf", "ringbuf", "perf_events", "tracefs",
        "bpffs", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "privileges", "nvml", "nvidia", "nvidia_uvm"}) {
    ASSERT_TRUE(report().checks.count(c)) << c;
    EXPECT_TRUE(report().checks.at(c).at("ok").is_boolean()) << c;
  }
  // Exactly the subcommands this binary has: those its --help lists, doctor aside.
  std::set<std::string> listed;
  {
    std::istringstream help(run(GPUSCOPE_BIN " --help").out);
    bool in_subs = false;
    for (std::string line; std::getline(help, line);) {
      if (line.rfind("Subcommands:", 0) == 0 || line.rfind("SUBCOMMANDS:", 0) == 0)
        in_subs = true;
      else if (in_subs && line.size() > 2 && line[0] == ' ')
        listed.insert(line.substr(2, line.find(' ', 2) - 2));
      else if (in_subs)
        in_subs = false;
    }
  }
  listed.erase("doctor");
  ASSERT_GE(listed.size(), 7u) << "gpuscope --help lists the subcommands";
  std::set<std::string> reported;
  for (auto& [name, _] : report().subcommands) reported.insert(name);
  EXPECT_EQ(reported, listed);
  for (const char* s : {"trace", "bridge", "latency", "ioctl", "uvm", "kernels", "memleak", "starvation"}) {
    ASSERT_TRUE(report().subcommands.count(s)) << s;
    auto st = report().subcommands.at(s).at("status").get<std::string>();
    EXPECT_TRUE(st == "ok" || st == "partial" || st == "unavailable") << s << ": " << st;
    EXPECT_EQ(st == "ok", report().subcommands.at(s).at("reason").get<std::string>().empty()) << s;
  }
}

TEST(Doctor, KernelAndBtf) {
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  EXPECT_EQ(report().checks.at("kernel").at("detail"), u.release);
  EXPECT_EQ(report().checks.at("btf").at("ok"), exists("/sys/kernel/btf/vmlinux"));
}

TEST(Doctor, ProbeSupport) {
  if (root()) {
    EXPECT_EQ(report().checks.at("uprobes").at("ok"), exists("/sys/bus/event_source/devices/uprobe/type"));
  }
  bool kprobe_pmu = exists("/sys/bus/event_source/devices/kprobe");
  if (!kprobe_pmu || root()) {
    EXPECT_EQ(report().checks.at("kprobes").at("ok"), kprobe_pmu);
  }
}

TEST(Doctor, Subcommands) {
  if (root() && exists("/sys/kernel/btf/vmlinux")) {
    EXPECT_EQ(report().subcommands.at("trace").at("status"), "ok");
  }
  if (root() && exists("/sys/kernel/btf/vmlinux")) {
    EXPECT_EQ(report().subcommands.at("latency").at("status"), "ok");
    EXPECT_EQ(report().subcommands.at("ioctl").at("status"), "ok") << "tracefs mountable, or raw_tp";
  }
  if (!exists("/sys/bus/event_source/devices/kprobe")) {
    EXPECT_EQ(report().subcommands.at("uvm").at("status"), "unavailable");
    EXPECT_NE(report().subcommands.at("uvm").at("reason").get<std::string>().find("kprobes"), std::string::npos);
  }
  if (root() && exists("/sys/kernel/btf/vmlinux")) {
    auto st = report().subcommands.at("memleak").at("status").get<std::string>();
    EXPECT_TRUE(st == "ok" || st == "partial") << st;  // partial: no tp_btf
  }
  if (report().checks.at("nvml").at("ok") == false) {
    // No NVML, so no bridge on this host to read from.
    EXPECT_EQ(report().subcommands.at("starvation").at("status"), "unavailable");
    EXPECT_NE(report().subcommands.at("starvation").at("reason").get<std::string>().find("nvml"), std::string::npos);
  }
}

TEST(Doctor, Nvml) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto& nvml = report().checks.at("nvml");
  if (!h) {
    EXPECT_FALSE(nvml.at("ok"));
    EXPECT_EQ(nvml.at("detail"), "libnvidia-ml.so.1 not found");
  } else {
    EXPECT_NE(nvml.at("detail"), "libnvidia-ml.so.1 not found");
    dlclose(h);
  }
}

// An NVML cut short where the loader would find it: named as damaged, not loaded (the loader
// would fault mapping it).
TEST(Doctor, TruncatedNvmlIsNamedNotLoaded) {
  std::string dir = "/tmp/gs-doctor-nvml-" + std::to_string(getpid()), lib = dir + "/libnvidia-ml.so.1";
  mkdir(dir.c_str(), 0700);
  ASSERT_TRUE(gstest::truncated_copy(NVML_STANDIN, lib, 8192));
  Report r = doctor("LD_LIBRARY_PATH=" + dir + " ");
  unlink(lib.c_str());
  rmdir(dir.c_str());
  EXPECT_EQ(r.status, 0);
  ASSERT_EQ(r.checks.count("nvml"), 1u);
  EXPECT_FALSE(r.checks.at("nvml").at("ok"));
  auto detail = r.checks.at("nvml").at("detail").get<std::string>();
  EXPECT_EQ(detail.rfind(lib + " is truncated: segment ", 0), 0u) << detail;
  EXPECT_NE(detail.find(", the file has 8192"), std::string::npos) << detail;
}

// The agent is judged by its own collectors, each by the subcommand whose programs it shares:
// uvm, which it does not run, is no lack of it. With the NVML stand-in where the loader finds
// it, the bridge and starvation can work too.
TEST(Doctor, AgentJudgedByItsOwnCollectors) {
  std::string dir = "/tmp/gs-doctor-agent-" + std::to_string(getpid()), lib = dir + "/libnvidia-ml.so.1";
  mkdir(dir.c_str(), 0700);
  ASSERT_EQ(symlink(NVML_STANDIN, lib.c_str()), 0);
  Report r = doctor("LD_LIBRARY_PATH=" + dir + " ");
  unlink(lib.c_str());
  rmdir(dir.c_str());
  ASSERT_EQ(r.status, 0);
  ASSERT_TRUE(r.checks.at("nvml").at("ok")) << r.checks.at("nvml");
  const std::vector<std::pair<std::string, std::string>> collectors = {
      {"kernels", "kernels"}, {"memleak", "memleak"}, {"latency", "latency"},       {"ioctl", "ioctl"},
      {"gputime", "kernels"}, {"bridge", "bridge"},   {"starvation", "starvation"}, {"graphics", "frames"}};
  std::vector<std::string> off, partial;
  for (auto& [c, sub] : collectors) {
    auto st = r.subcommands.at(sub).at("status").get<std::string>();
    if (st == "unavailable") off.push_back(c);
    if (st == "partial") partial.push_back(c);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string o;
    for (auto& x : v) o += (o.empty() ? "" : ", ") + x;
    return o;
  };
  std::string want = off.empty() ? "" : "without " + join(off);
  if (!partial.empty()) want += (want.empty() ? "" : "; ") + join(partial) + " partial";
  auto& agent = r.subcommands.at("agent");
  if (off.size() == collectors.size()) {
    EXPECT_EQ(agent.at("status"), "unavailable");
    EXPECT_EQ(agent.at("reason"), root() ? "none of its collectors works here"
                                         : std::string("needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)"));
  } else {
    EXPECT_EQ(agent.at("reason"), want);
    EXPECT_EQ(agent.at("status"), want.empty() ? "ok" : "partial");
  }
  EXPECT_EQ(agent.at("reason").get<std::string>().find("uvm"), std::string::npos);
  if (root() && exists("/sys/kernel/btf/vmlinux") && r.checks.at("tp_btf").at("ok") && r.checks.at("bpffs").at("ok") &&
      r.checks.at("perf_events").at("ok")) {
    EXPECT_EQ(agent.at("status"), "ok") << "every collector's needs are met here, whatever uvm's";
    EXPECT_EQ(agent.at("reason"), "");
  }
}

TEST(Doctor, FindsTheToolkitCudart) {
  const char* lib = "/usr/local/cuda/lib64/libcudart.so.13";
  struct stat want;
  if (stat(lib, &want) != 0) GTEST_SKIP() << lib << " not installed";
  bool found = false;
  for (auto& l : report().libraries) {
    struct stat st;
    if (stat(l.at("path").get<std::string>().c_str(), &st) == 0 && st.st_dev == want.st_dev &&
        st.st_ino == want.st_ino) {
      found = true;
      EXPECT_GT(l.at("api_symbols").get<int>(), 0);
      EXPECT_FALSE(l.at("static_cudart"));
    }
  }
  EXPECT_TRUE(found) << lib << " is not among the libraries listed";
}

TEST(Doctor, ChangesNothing) {
  auto mounts = [] {
    std::ifstream m("/proc/self/mounts");
    return std::string((std::istreambuf_iterator<char>(m)), {});
  };
  auto before = gstest::settled(mounts);
  gstest::BpfLeftovers left;
  EXPECT_EQ(run(GPUSCOPE_BIN " doctor >/dev/null").status, 0);
  EXPECT_EQ(run(GPUSCOPE_BIN " doctor --json >/dev/null").status, 0);
  EXPECT_EQ(left.list(), "") << "its probes' programs and maps, gone with it";
  EXPECT_EQ(gstest::settled(mounts), before);
}

TEST(Doctor, TextReport) {
  Result r = run(GPUSCOPE_BIN " doctor");
  EXPECT_EQ(r.status, 0);
  for (const char* s :
       {"System\n", "Probes\n", "Mounts\n", "Privileges\n", "NVIDIA\n", "CUDA libraries (", "Subcommands\n"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(Doctor, WithoutPrivileges) {
  if (!root() || run("command -v setpriv >/dev/null").status != 0) GTEST_SKIP() << "needs root and setpriv";
  Report r = doctor("setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all ");
  ASSERT_EQ(r.status, 0);
  if (r.checks.empty()) GTEST_SKIP() << "gpuscope is not executable by uid 65534";
  EXPECT_FALSE(r.checks.at("privileges").at("ok"));
  EXPECT_FALSE(r.checks.at("CAP_SYS_ADMIN").at("ok"));
  auto& trace = r.subcommands.at("trace");
  EXPECT_EQ(trace.at("status"), "unavailable");
  EXPECT_NE(trace.at("reason").get<std::string>().find("needs root"), std::string::npos);
  // None of its collectors can load: unavailable, though `run`, which needs nothing, is ok.
  EXPECT_EQ(r.subcommands.at("run").at("status"), "ok");
  EXPECT_EQ(r.subcommands.at("agent").at("status"), "unavailable");
  EXPECT_EQ(r.subcommands.at("agent").at("reason"), "needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)");
}

}  // namespace

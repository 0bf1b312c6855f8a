// gpuscope ioctl against this test's own calls. No NVIDIA driver here: a major-195 node in a
// temporary directory opened with O_PATH gives an fd whose ioctls fail with EBADF, after
// sys_enter_ioctl has seen them (a plain open would fail with ENXIO).
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include <libdrm/drm.h>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;
namespace fs = std::filesystem;

namespace {

constexpr unsigned long kRmControl = 0xC020462A;  // _IOWR('F', 0x2A, 32 bytes): NV_ESC_RM_CONTROL

struct Node {
  fs::path dir = fs::temp_directory_path() / ("gstest-ioctl-" + std::to_string(getpid()));
  fs::path path = dir / "nvidia7";
  Node() {
    fs::create_directories(dir);
    if (mknod(path.c_str(), S_IFCHR | 0600, makedev(195, 7)) != 0) ADD_FAILURE() << "mknod: " << strerror(errno);
  }
  ~Node() { fs::remove_all(dir); }
};

// Runs `gpuscope ioctl ARGS -p <this test> --json` around `work`; returns its lines.
template <typename F>
std::vector<json> around(std::vector<std::string> args, F work, std::string* err = nullptr) {
  args.insert(args.begin(), {gpuscope_bin(), "ioctl", "--json", "-p", std::to_string(getpid())});
  Process g(args);
  EXPECT_TRUE(g.wait_for("gpuscope: counting", 30, true)) << g.err();
  work();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  if (err) *err = g.err();
  return parse_lines(g.out());
}

void nv_calls(const Node& n, int ioctls) {
  int fd = open(n.path.c_str(), O_PATH);
  ASSERT_GE(fd, 0) << strerror(errno);
  for (int i = 0; i < ioctls; i++) {
    errno = 0;
    EXPECT_EQ(ioctl(fd, kRmControl, nullptr), -1);
    EXPECT_EQ(errno, EBADF);
  }
  EXPECT_EQ(mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0), MAP_FAILED);
  close(fd);
}

void other_calls() {
  int null = open("/dev/null", O_RDWR);
  ioctl(null, kRmControl, nullptr);
  ioctl(null, FIONREAD, nullptr);
  close(null);
  char tmpl[] = "/tmp/gstest-ioctl-file-XXXXXX";
  int f = mkstemp(tmpl);
  int n = 0;
  ioctl(f, FIONREAD, &n);
  ioctl(f, kRmControl, nullptr);
  close(f);
  unlink(tmpl);
}

void check(const std::vector<json>& lines, int ioctls) {
  std::vector<json> io, mm, op;
  for (auto& l : lines) {
    if (l["pid"] != getpid()) continue;
    if (l["type"] == "ioctl") io.push_back(l);
    if (l["type"] == "mmap") mm.push_back(l);
    if (l["type"] == "open") op.push_back(l);
  }
  // The node was opened once; /dev/null and the regular file are not NVIDIA nodes.
  ASSERT_EQ(op.size(), 1u) << "opens of the NVIDIA node only";
  EXPECT_EQ(op[0]["dev"], "195:7");
  EXPECT_EQ(op[0]["device"], "nvidia7");
  EXPECT_EQ(op[0]["count"], 1);
  EXPECT_FALSE(op[0]["comm"].get<std::string>().empty());
  EXPECT_GT(op[0]["first_ts_ns"].get<int64_t>(), 0);
  ASSERT_EQ(io.size(), 1u) << "only the NVIDIA node counts, not /dev/null or a regular file";
  auto& l = io[0];
  EXPECT_EQ(l["dev"], "195:7");
  EXPECT_EQ(l["device"], "nvidia7");
  EXPECT_EQ(l["request"], "0xc020462a");
  EXPECT_EQ(l["name"], "NV_ESC_RM_CONTROL");
  EXPECT_EQ(l["dir"], "rw");
  EXPECT_EQ(l["ioc_type"], 'F');
  EXPECT_EQ(l["nr"], 0x2A);
  EXPECT_EQ(l["size"], 32);
  EXPECT_EQ(l["count"], ioctls);
  EXPECT_EQ(l["errors"], ioctls);
  EXPECT_GT(l["total_ns"].get<uint64_t>(), 0u);
  EXPECT_GE(l["total_ns"].get<uint64_t>(), l["max_ns"].get<uint64_t>());
  EXPECT_GT(l["max_ns"].get<uint64_t>(), 0u);
  EXPECT_FALSE(l["comm"].get<std::string>().empty());
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(mm[0]["dev"], "195:7");
  EXPECT_EQ(mm[0]["count"], 1);
  EXPECT_EQ(mm[0]["bytes"], 8192);
}

}  // namespace

TEST(Ioctl, CountsNvidiaNodeOnly) {
  Node n;
  auto lines = around({}, [&] {
    other_calls();
    nv_calls(n, 5);
    other_calls();
  });
  check(lines, 5);
}

TEST(Ioctl, RawTracepointFallback) {
  Node n;
  std::string err;
  auto lines = around(
      {"--raw-syscalls"}, [&] { nv_calls(n, 3), other_calls(); }, &err);
  EXPECT_NE(err.find("via raw_tp sys_enter/sys_exit"), std::string::npos) << err;
  check(lines, 3);
}

TEST(Ioctl, EventsStreamOnePerCall) {
  Node n;
  auto lines = around({"--events"}, [&] { nv_calls(n, 4), other_calls(); });
  std::vector<json> ev;
  for (auto& l : lines)
    if (l["type"] == "ioctl_event") ev.push_back(l);
  ASSERT_EQ(ev.size(), 4u);
  for (auto& e : ev) {
    EXPECT_EQ(e["pid"], getpid());
    EXPECT_EQ(e["tid"], gettid());
    EXPECT_EQ(e["ret"], -EBADF);
    EXPECT_EQ(e["request"], "0xc020462a");
    EXPECT_EQ(e["name"], "NV_ESC_RM_CONTROL");
    EXPECT_EQ(e["dev"], "195:7");
    EXPECT_GT(e["dur_ns"].get<uint64_t>(), 0u);
  }
  check(lines, 4);
}

// A DRM node (major 226) of the same kind: DRM_IOCTL_VERSION is counted by name, both syscall
// paths, and a failed answer names no driver.
TEST(Ioctl, DrmVersionFailedNamesNoDriver) {
  for (bool raw : {false, true}) {
    fs::path dir = fs::temp_directory_path() / ("gstest-drm-" + std::to_string(getpid()));
    fs::create_directories(dir);
    fs::path node = dir / "renderD128";
    ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0600, makedev(226, 128)), 0) << strerror(errno);
    std::vector<std::string> flags;
    if (raw) flags.push_back("--raw-syscalls");
    auto lines = around(flags, [&] {
      int fd = open(node.c_str(), O_PATH);
      ASSERT_GE(fd, 0) << strerror(errno);
      char name[32] = {};
      drm_version v{};
      v.name_len = sizeof name;
      v.name = name;
      for (int i = 0; i < 3; i++) EXPECT_EQ(ioctl(fd, DRM_IOCTL_VERSION, &v), -1);
      close(fd);
    });
    fs::remove_all(dir);
    std::vector<json> io;
    for (auto& l : lines)
      if (l["type"] == "ioctl" && l["pid"] == getpid()) io.push_back(l);
    ASSERT_EQ(io.size(), 1u) << (raw ? "raw_tp" : "tracepoints");
    EXPECT_EQ(io[0]["dev"], "226:128");
    EXPECT_EQ(io[0]["device"], "dri/renderD128");
    EXPECT_EQ(io[0]["name"], "DRM_IOCTL_VERSION");
    EXPECT_EQ(io[0]["count"], 3);
    EXPECT_EQ(io[0]["errors"], 3);
    EXPECT_FALSE(io[0].contains("driver")) << io[0].dump();
  }
}

// Where the kernel has DRM devices, each one's driver is named as its DRM_IOCTL_VERSION answered
// (asked as libdrm's drmGetVersion does: the lengths first, then the strings).
TEST(Ioctl, DrmVersionNamesTheDriverOnARealNode) {
  std::vector<fs::path> nodes;
  if (fs::exists("/dev/dri"))
    for (auto& e : fs::directory_iterator("/dev/dri"))
      if (e.is_character_file()) nodes.push_back(e.path());
  if (nodes.empty())
    GTEST_SKIP() << "no DRM device node under /dev/dri on this machine (`gpuscope doctor` says so too); the "
                    "failed path is checked above";
  std::map<std::string, std::string> answered;  // dev "226:N" -> driver
  auto lines = around({}, [&] {
    for (auto& n : nodes) {
      int fd = open(n.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) continue;
      drm_version v{};
      if (ioctl(fd, DRM_IOCTL_VERSION, &v) == 0 && v.name_len > 0) {
        std::string name(v.name_len, '\0');
        v.name = name.data();
        v.date_len = v.desc_len = 0;
        if (ioctl(fd, DRM_IOCTL_VERSION, &v) == 0) {
          struct stat st {};
          fstat(fd, &st);
          answered[std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev))] = name.substr(0, 31);
        }
      }
      close(fd);
    }
  });
  ASSERT_FALSE(answered.empty()) << "no node under /dev/dri answered DRM_IOCTL_VERSION";
  std::map<std::string, std::string> seen;
  for (auto& l : lines)
    if (l["type"] == "ioctl" && l["pid"] == getpid() && l["name"] == "DRM_IOCTL_VERSION" && l.contains("driver"))
      seen[l["dev"]] = l["driver"];
  EXPECT_EQ(seen, answered);
}

// A process that opens GPU nodes and makes no ioctl is still listed, once per node.
TEST(Ioctl, OpensWithoutIoctls) {
  Node n;
  fs::path ctl = n.dir / "nvidiactl";
  ASSERT_EQ(mknod(ctl.c_str(), S_IFCHR | 0600, makedev(195, 255)), 0) << strerror(errno);
  auto lines = around({}, [&] {
    for (int i = 0; i < 3; i++) close(open(n.path.c_str(), O_PATH));
    close(openat(AT_FDCWD, ctl.c_str(), O_PATH));
    EXPECT_LT(open((n.dir / "missing").c_str(), O_RDONLY), 0);
    other_calls();
  });
  std::map<std::string, json> op;
  for (auto& l : lines)
    if (l["type"] == "open" && l["pid"] == getpid()) op[l["dev"]] = l;
  ASSERT_EQ(op.size(), 2u);
  EXPECT_EQ(op["195:7"]["count"], 3);
  EXPECT_EQ(op["195:7"]["device"], "nvidia7");
  EXPECT_EQ(op["195:255"]["count"], 1);
  EXPECT_EQ(op["195:255"]["device"], "nvidiactl");
  for (auto& l : lines) EXPECT_NE(l["type"], "ioctl") << l.dump();
}

TEST(Ioctl, BadInputOneLineExit2) {
  for (std::vector<std::string> a :
       {std::vector<std::string>{"--bogus"}, {"--interval", "0"}, {"-p", "999999999"}, {"-p", "abc"}})
    expect_usage_error("ioctl", a);
}

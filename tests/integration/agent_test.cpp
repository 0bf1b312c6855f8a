// gpuscope agent against real processes: the stand-in libraries, scraped by the test itself,
// by promtool and by a real Prometheus. Every agent is scoped by -c to a name only this test
// runs (a link to standin_app), so that other tests' processes do not disturb it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "bridge_fixture.h"
#include "core/clock.h"
#include "harness.h"

using namespace gstest;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::string fmt_hex(unsigned char c) {
  char b[4];
  snprintf(b, sizeof b, "%%%02X", c);
  return b;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t l = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  close(fd);
  return ntohs(a.sin_port);
}

using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A non-blocking TCP connection from `src` (a loopback address) to 127.0.0.1:port; -1 when it
// cannot be made.
int connect_from(const std::string& src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);  // the port comes at connect
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, src.c_str(), &a.sin_addr);
  sockaddr_in d{};
  d.sin_family = AF_INET;
  d.sin_port = htons(static_cast<uint16_t>(port));
  d.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&d), sizeof d) != 0 && errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits up to `s` for `events` on fd; the events seen (0: none in time).
short wait_fd(int fd, short events, double s) {
  pollfd p{fd, events, 0};
  return poll(&p, 1, std::max(0, static_cast<int>(s * 1000))) > 0 ? p.revents : 0;
}

// True once the peer has closed fd (end of file, or reset); data that comes is dropped.
bool closed_by_peer(int fd) {
  char b[4096];
  ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN);
}

// GET path from 127.0.0.1 as HTTP/1.0 (the server closes after its answer), all of it within
// limit_s; status 0 when no whole answer came in time.
Reply timed_get(int port, const std::string& path, double limit_s) {
  Reply r;
  auto t0 = Clock::now();
  auto left = [&] { return limit_s - secs_since(t0); };
  int fd = connect_from("127.0.0.1", port);
  if (fd < 0) return r;
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", all;
  if (!(wait_fd(fd, POLLOUT, left()) & POLLOUT) ||
      send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) {
    close(fd);
    return r;
  }
  char buf[65536];
  for (ssize_t n = 1; n > 0 && left() > 0;) {
    if (!wait_fd(fd, POLLIN, left())) break;
    n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) all.append(buf, static_cast<size_t>(n));
    if (n == 0) {
      size_t sp = all.find(' '), hdr = all.find("\r\n\r\n");
      if (sp != std::string::npos && hdr != std::string::npos) {
        r.status = std::stoi(all.substr(sp + 1, 3));
        r.body = all.substr(hdr + 4);
      }
    }
  }
  close(fd);
  return r;
}

// Slow-loris clients: `n` connections spread over `addresses` loopback addresses (127.0.1.1,
// 127.0.1.2, ...), each sending the head of a request and then one more byte every second,
// never finishing it, and reopened a second after the server closes it.
class Trickler {
 public:
  struct Stats {
    size_t connects = 0, closed_by_server = 0, max_open = 0;
  };
  // Addresses `net`1, `net`2, ... (127.0.1.1, ...; 127.0.0.1 alone with "127.0.0." and 1).
  Trickler(int port, int n, int addresses, std::string net = "127.0.1.")
      : net_(std::move(net)),
        thread_([this, port, n, addresses](std::stop_token stop) { run(stop, port, n, addresses); }) {}
  Stats stop() {
    thread_.request_stop();
    thread_.join();
    return stats_;
  }

 private:
  struct Slot {
    int fd = -1;
    bool connected = false;
    Clock::time_point next;  // the next byte, or the next connect
  };
  void run(std::stop_token stop, int port, int n, int addresses) {
    std::vector<Slot> slots(static_cast<size_t>(n));
    const std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    while (!stop.stop_requested()) {
      auto now = Clock::now();
      std::vector<pollfd> fds;
      size_t open = 0;
      for (size_t i = 0; i < slots.size(); i++) {
        Slot& s = slots[i];
        if (s.fd < 0 && now >= s.next) {
          s.fd = connect_from(net_ + std::to_string(1 + i % static_cast<size_t>(addresses)), port);
          s.connected = false;
          stats_.connects += s.fd >= 0;
          if (s.fd < 0) s.next = now + std::chrono::seconds(1);
        }
        if (s.connected && now >= s.next && send(s.fd, "a", 1, MSG_NOSIGNAL) == 1)
          s.next = now + std::chrono::seconds(1);
        open += s.connected;
        fds.push_back({s.fd, static_cast<short>(s.connected ? POLLIN : POLLOUT), 0});
      }
      stats_.max_open = std::max(stats_.max_open, open);
      poll(fds.data(), fds.size(), 50);
      for (size_t i = 0; i < slots.size(); i++) {
        Slot& s = slots[i];
        if (s.fd < 0 || !fds[i].revents) continue;
        if (!s.connected && !(fds[i].revents & (POLLERR | POLLHUP)) &&
            send(s.fd, head.data(), head.size(), MSG_NOSIGNAL) == ssize_t(head.size())) {
          s.connected = true;
          s.next = Clock::now() + std::chrono::seconds(1);
        } else if (!s.connected || closed_by_peer(s.fd)) {
          stats_.closed_by_server += s.connected;
          close(s.fd);
          s = {-1, false, Clock::now() + std::chrono::seconds(1)};
        }
      }
    }
    for (auto& s : slots)
      if (s.fd >= 0) close(s.fd);
  }
  Stats stats_;
  std::string net_;
  std::jthread thread_;  // last: it starts once the rest exists
};

// The agent tests' workload: a link to standin_app, or to `target`.
struct AgWorkload : Workload {
  explicit AgWorkload(const std::string& target = standin_app(), const std::string& prefix = "agwl")
      : Workload("agent", prefix, target) {}
};

// The governor off: these tests count on the refresh rate asked for (it has its own test in deploy_test).
struct UngovernedAgent : Agent {
  explicit UngovernedAgent(const Workload& w, std::vector<std::string> extra = {}) : Agent(w, governor_off(extra)) {}
  static std::vector<std::string> governor_off(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--max-cpu-percent", "0"});
    return extra;
  }
};

void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  BpfLeftovers left;
  std::vector<std::string> argv = {gpuscope_bin(), "agent", "-d", "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run(argv, {}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(left.list(), "") << "nothing pinned or left attached";
}

}  // namespace

TEST(Agent, BadInput) {
  // A port in use: bound here, listening.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t l = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  std::string busy = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  expect_usage_error({"--listen", busy}, "cannot listen on " + busy + ": Address already in use");
  close(fd);
  expect_usage_error({"--listen", "300.1.2.3:9400"}, "--listen must be ADDR:PORT");
  expect_usage_error({"--listen", "localhost"}, "--listen must be ADDR:PORT");
  expect_usage_error({"--listen", "127.0.0.1:70000"}, "--listen must be ADDR:PORT");
  expect_usage_error({"--collectors", "kernels,gpu_magic"}, "unknown collector 'gpu_magic'");
  expect_usage_error({"--collectors", ","}, "--collectors must name at least one collector");
  expect_usage_error({"--max-kernels-per-process", "0"}, "--max-kernels-per-process must be");
  expect_usage_error({"--latency-apis", "cudaNope"}, "--api: unknown or untraced CUDA API 'cudaNope'");
  expect_usage_error({"--latency-sample-launches", "0"}, "--latency-sample-launches must be");
  expect_usage_error({"-p", "999999999"}, "");
  for (const char* duty : {"0", "1.5", "abc", "2/1", "1/0", "0.01/10", "/10", "1/", "nan/10"})
    expect_usage_error({"--gputime-duty", duty}, "--gputime-duty");
  expect_usage_error({"--gputime-duty", "2/1"}, "--gputime-duty ON/PERIOD: ON (2) exceeds PERIOD");
  expect_usage_error({"--gputime-duty", "0"}, "--gputime-duty must be a number of the share of time recorded");
  // A bad --lib, alone or beside a good one, as the subcommands refuse it.
  const std::string good = standin_lib_dir() + "/libcudart.so.13";
  expect_usage_error({"--lib", "/etc/passwd"}, "gpuscope: --lib /etc/passwd: not an ELF file\n");
  expect_usage_error({"--lib", good, "--lib", "/etc/passwd"}, "gpuscope: --lib /etc/passwd: not an ELF file\n");
  expect_usage_error({"--lib", "/etc/passwd", "--lib", good, "--collectors", "latency"},
                     "gpuscope: --lib /etc/passwd: not an ELF file\n");
  expect_usage_error({"--lib", "/nonexistent/libcuda.so.1"},
                     "gpuscope: --lib /nonexistent/libcuda.so.1: No such file or directory\n");
  // NVML cut short: the loader would fault mapping it.
  std::string dir = "/tmp/gs-agent-nvml-" + std::to_string(getpid()), lib = dir + "/libnvidia-ml.so.1";
  mkdir(dir.c_str(), 0700);
  ASSERT_TRUE(truncated_copy(NVML_STANDIN, lib, 8192));
  expect_usage_error({"--collectors", "bridge", "--nvml", lib},
                     "gpuscope: NVML not available: " + lib + " is truncated: segment ");
  expect_usage_error({"--collectors", "bridge", "--nvml", "/etc/passwd"},
                     "gpuscope: NVML not available: /etc/passwd is not an ELF shared object\n");
  // A FIFO held the open until a signal came.
  std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_usage_error({"--collectors", "bridge", "--nvml", fifo},
                     "gpuscope: NVML not available: " + fifo + " is not a regular file\n");
  std::filesystem::remove_all(dir);
}

// Issue 24: clients that trickle requests must not stop the agent serving. 1000 connections
// from 100 loopback addresses, each sending a byte a second and never finishing its request,
// reopened a second after the server closes one; a scraper from another address must get
// /metrics within 1 s every time, for 15 s.
TEST(Agent, SlowClientsDoNotStopServing) {
  AgWorkload w;
  UngovernedAgent a(w, {"--collectors", "latency"});
  auto up = [](const std::string& m) { return value_of(m, "gpuscope_collector_up", {{"collector", "latency"}}) == 1; };
  ASSERT_NE(a.until(up), "") << a.metrics();
  Trickler t(a.port(), 1000, 100);
  sleep_s(2);  // every slot has connected once
  size_t attempts = 0;
  std::vector<std::string> failed;
  size_t retried = 0;
  for (auto t0 = Clock::now(); secs_since(t0) < 15; sleep_s(0.1)) {
    auto s0 = Clock::now();
    // Within its second the scraper may connect again: a connection refused at once (under
    // load, this scraper's closed connections count against its address until the server has
    // reaped them, and it scrapes 150 times faster than Prometheus) is not a scrape missed.
    Reply r = timed_get(a.port(), "/metrics", 1.0);
    while (r.status == 0 && secs_since(s0) < 0.5) {
      retried++;
      sleep_s(0.05);
      r = timed_get(a.port(), "/metrics", 1.0 - secs_since(s0));
    }
    attempts++;
    if (r.status != 200 || !up(r.body) || secs_since(s0) > 1.0)
      failed.push_back(fmt::format("status {} after {:.2f} s", r.status, secs_since(s0)));
  }
  std::cerr << "scrapes " << attempts << ", connections refused at once and tried again " << retried << "\n";
  auto st = t.stop();
  EXPECT_TRUE(failed.empty()) << failed.size() << " of " << attempts << " scrapes failed, first: " << failed[0];
  EXPECT_GE(attempts, 75u);
  // The attack was real: every slot connected, and more were open at once than the 64
  // connections the server used to allow in all.
  EXPECT_GE(st.connects, 1000u);
  EXPECT_GT(st.max_open, 64u);
  EXPECT_GT(st.closed_by_server, 1000u);
  EXPECT_EQ(timed_get(a.port(), "/metrics", 1.0).status, 200);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// On the default loopback listen every local client is 127.0.0.1: 100 slow connections from it
// that reconnect as soon as they are closed do not keep a scraper from the same address out.
TEST(Agent, LocalSlowClientsDoNotStarveLoopbackScrapers) {
  AgWorkload w;
  UngovernedAgent a(w, {"--collectors", "latency"});
  auto up = [](const std::string& m) { return value_of(m, "gpuscope_collector_up", {{"collector", "latency"}}) == 1; };
  ASSERT_NE(a.until(up), "") << a.metrics();
  Trickler t(a.port(), 100, 1, "127.0.0.");
  sleep_s(2);  // every slot has connected once
  int served = 0;
  for (int i = 0; i < 8; i++, sleep_s(0.5)) {
    Reply r = timed_get(a.port(), "/metrics", 1.0);
    served += r.status == 200 && up(r.body);
  }
  auto st = t.stop();
  EXPECT_EQ(served, 8);
  EXPECT_GE(st.connects, 100u);
  EXPECT_GT(st.closed_by_server, 50u);  // the newcomers made room by closing the slow ones
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// The limits behind it (docs/agent.md): one address holds 8 connections; a request must
// arrive within 3 s however it trickles; on a kept-alive connection the next request's 3 s
// start when the previous answer is done.
TEST(Agent, SlowRequestsAreClosedAndAddressesLimited) {
  AgWorkload w;
  UngovernedAgent a(w, {"--collectors", "latency"});
  const std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  std::vector<int> fds;
  auto t0 = Clock::now();
  for (int i = 0; i < 12; i++) {
    int fd = connect_from("127.0.2.1", a.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(wait_fd(fd, POLLOUT, 2) & POLLOUT);
    ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
    fds.push_back(fd);
  }
  sleep_s(0.5);
  std::vector<int> held;
  for (int fd : fds)
    if (!closed_by_peer(fd)) held.push_back(fd);
  EXPECT_EQ(held.size(), 8u);
  std::vector<double> closed_at;  // seconds after the first connect
  for (auto tick = Clock::now(); !held.empty() && secs_since(t0) < 8; tick += std::chrono::milliseconds(250)) {
    std::this_thread::sleep_until(tick);
    std::erase_if(held, [&](int fd) {
      bool gone = send(fd, "a", 1, MSG_NOSIGNAL) != 1 || closed_by_peer(fd);
      if (gone) closed_at.push_back(secs_since(t0));
      return gone;
    });
  }
  EXPECT_TRUE(held.empty()) << held.size() << " trickling requests still open after 8 s";
  ASSERT_EQ(closed_at.size(), 8u);
  EXPECT_GE(*std::min_element(closed_at.begin(), closed_at.end()), 2.9);
  EXPECT_LE(*std::max_element(closed_at.begin(), closed_at.end()), 4.5);
  for (int fd : fds) close(fd);

  // Kept alive: two requests answered on one connection, 2 s apart; then closed 3 s after the
  // second answer.
  int fd = connect_from("127.0.2.2", a.port());
  ASSERT_TRUE(wait_fd(fd, POLLOUT, 2) & POLLOUT);
  auto answer = [&] {
    std::string req = "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", got;
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return std::string();
    char buf[4096];
    for (ssize_t n; wait_fd(fd, POLLIN, 2) && (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
      got.append(buf, static_cast<size_t>(n));
      size_t hdr = got.find("\r\n\r\n"), cl = got.find("Content-Length: ");
      if (hdr != std::string::npos && cl != std::string::npos &&
          got.size() >= hdr + 4 + std::stoul(got.substr(cl + 16)))
        return got.substr(hdr + 4);
    }
    return std::string();
  };
  EXPECT_EQ(json::parse(answer())["status"], "ok");
  sleep_s(2);
  std::string second = answer();
  auto answered = Clock::now();
  ASSERT_NE(second, "");
  EXPECT_EQ(json::parse(second)["status"], "ok");
  while (!closed_by_peer(fd) && secs_since(answered) < 8) wait_fd(fd, POLLIN, 0.1);
  EXPECT_GE(secs_since(answered), 2.9);
  EXPECT_LE(secs_since(answered), 4.5);
  close(fd);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// Without --listen the agent listens on 127.0.0.1:9400 and nowhere else (the socket table of
// its own sockets).
TEST(Agent, ListensOnLoopbackOnly) {
  AgWorkload w;
  Process g({gpuscope_bin(), "agent", "-c", w.comm(), "--collectors", "latency", "--json"});
  ASSERT_TRUE(g.wait_for("\"type\":\"agent\"", 30)) << g.err();
  std::set<std::string> inodes;
  std::string fddir = "/proc/" + std::to_string(g.pid()) + "/fd";
  for (auto& e : std::filesystem::directory_iterator(fddir)) {
    std::error_code ec;
    auto t = std::filesystem::read_symlink(e.path(), ec).string();
    if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
  }
  std::vector<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream ss(line);
      std::string sl, local, rem, st, q, tr, rt, uid, to, inode;
      ss >> sl >> local >> rem >> st >> q >> tr >> rt >> uid >> to >> inode;
      if (inodes.count(inode)) listening.push_back(std::string(table) + " " + local + " " + st);
    }
  }
  ASSERT_EQ(listening.size(), 1u) << ::testing::PrintToString(listening);
  EXPECT_EQ(listening[0], "/proc/net/tcp 0100007F:24B8 0A") << "127.0.0.1:9400, LISTEN";
  auto h = json::parse(http_get(9400, "/api/health").body);
  EXPECT_EQ(h["status"], "ok");
  g.signal(SIGTERM);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

// Exact values in /metrics and the JSON API: launches per kernel, API calls and durations,
// outstanding bytes of a running process, leaked bytes of one that exited, and an exited
// process's series gone after one scrape while its comm totals stay.
TEST(Agent, MetricsAndApi) {
  AgWorkload w;
  UngovernedAgent a(w);
  // Allocates 1000 + 2000 + 3000 (cudaMalloc) and 777 (cuMemAlloc), then waits for SIGUSR1.
  Holder live(w);
  sleep_s(0.5);
  ASSERT_TRUE(live.allocate()) << live.err();
  std::string lps = std::to_string(live.pid());
  std::string m = a.until([&](const std::string& t) {
    return value_of(t, "gpuscope_memory_outstanding_bytes", {{"pid", lps}, {"category", "device"}}) == 6777;
  });
  ASSERT_NE(m, "") << a.metrics();
  EXPECT_EQ(value_of(m, "gpuscope_memory_outstanding_bytes", {{"pid", lps}, {"category", "pinned_host"}}), 0);
  EXPECT_EQ(value_of(m, "gpuscope_memory_outstanding_allocations", {{"pid", lps}, {"category", "device"}}), 4);
  EXPECT_EQ(value_of(m, "gpuscope_memory_allocations_total", {{"pid", lps}, {"result", "ok"}}), 4);
  auto one = where(samples(m, "gpuscope_memory_outstanding_bytes"), {{"pid", lps}, {"category", "device"}});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].labels["comm"], w.comm());
  EXPECT_EQ(one[0].labels.count("container"), 1u);
  auto procs = a.api("/api/processes");
  bool found = false;
  for (auto& p : procs["processes"])
    if (p["pid"] == live.pid()) {
      found = true;
      EXPECT_EQ(p["outstanding_bytes"], 6777);
      EXPECT_EQ(p["allocs_ok"], 4);
      EXPECT_EQ(p["state"], "running");
    }
  EXPECT_TRUE(found) << procs.dump();

  // 5 launches of kern_a and 3 of kern_b through the driver; 2 blocks allocated and freed.
  Process drv({w.path(), "driver", "2"});
  pid_t dp = ready_pid(drv);
  ASSERT_EQ(drv.wait(20), 0) << drv.err();
  std::string dps = std::to_string(dp);
  m = a.until([&](const std::string& t) {
    return !where(samples(t, "gpuscope_kernel_launches_total"), {{"pid", dps}}).empty();
  });
  ASSERT_NE(m, "") << a.metrics();
  auto k = where(samples(m, "gpuscope_kernel_launches_total"), {{"pid", dps}});
  ASSERT_EQ(k.size(), 2u) << m;
  EXPECT_EQ(value_of(m, "gpuscope_kernel_launches_total", {{"pid", dps}, {"kernel", "kern_a"}}), 5);
  EXPECT_EQ(value_of(m, "gpuscope_kernel_launches_total", {{"pid", dps}, {"kernel", "kern_b"}}), 3);
  // One launch in 64 is timed, at random (every one where the kernel has no uprobe sessions);
  // every entry is counted.
  const double sample = value_of(m, "gpuscope_api_launch_sample", {});
  ASSERT_TRUE(sample == 64 || sample == 1) << sample;
  const double timed = value_of(m, "gpuscope_api_probe_hits_total", {{"api", "cuLaunchKernel"}, {"outcome", "timed"}});
  if (sample == 1) {
    EXPECT_EQ(timed, 8);
  }
  EXPECT_EQ(timed + value_of(m, "gpuscope_api_probe_hits_total", {{"api", "cuLaunchKernel"}, {"outcome", "unsampled"}}),
            8);
  EXPECT_EQ(std::max(0.0, value_of(m, "gpuscope_api_calls_total",
                                   {{"api", "cuLaunchKernel"}, {"layer", "driver"}, {"result", "CUDA_SUCCESS"}})),
            timed);
  EXPECT_EQ(std::max(0.0, value_of(m, "gpuscope_api_duration_seconds_count", {{"api", "cuLaunchKernel"}})), timed);
  EXPECT_EQ(value_of(m, "gpuscope_api_probe_hits_total", {{"api", "cuLaunchKernel"}, {"outcome", "nested"}}), 0);
  // The exited process's series go once a scrape has seen them; the comm's totals stay.
  std::string later = a.until([&](const std::string& t) {
    return where(samples(t, "gpuscope_kernel_launches_total"), {{"pid", dps}}).empty();
  });
  ASSERT_NE(later, "");
  EXPECT_EQ(sum_of(later, "gpuscope_comm_kernel_launches_total", {{"comm", w.comm()}}), 8);
  EXPECT_TRUE(where(samples(later, "gpuscope_memory_allocations_total"), {{"pid", dps}}).empty());

  // 6 blocks never freed: 1000 + 3000 + 5000 + 600 + 800 + a 2 MiB VMM handle.
  Process leaks({w.path(), "leaks"});
  pid_t kp = ready_pid(leaks);
  ASSERT_EQ(leaks.wait(20), 0) << leaks.err();
  m = a.until([&](const std::string& t) {
    return sum_of(t, "gpuscope_memory_leaked_bytes_total", {{"comm", w.comm()}}) > 0;
  });
  ASSERT_NE(m, "") << a.metrics();
  EXPECT_EQ(sum_of(m, "gpuscope_memory_leaked_bytes_total", {{"comm", w.comm()}}),
            1000 + 3000 + 5000 + 600 + 800 + 2097152);
  EXPECT_EQ(sum_of(m, "gpuscope_memory_leaked_allocations_total", {{"comm", w.comm()}}), 6);
  // 3 by the running process, 5 by this one.
  EXPECT_EQ(value_of(m, "gpuscope_api_calls_total", {{"api", "cudaMalloc"}, {"result", "cudaSuccess"}}), 8);
  json lk = a.api("/api/leaks");
  json rep;
  for (auto& r : lk["leaks"])
    if (r["pid"] == kp) rep = r;
  ASSERT_FALSE(rep.is_null()) << lk.dump();
  EXPECT_EQ(rep["leaked_bytes"], 2107552);
  ASSERT_EQ(rep["allocations"].size(), 6u);
  EXPECT_EQ(rep["allocations"][0]["size_bytes"], 2097152);
  EXPECT_EQ(rep["allocations"][0]["api"], "cuMemCreate");
  EXPECT_EQ(rep["allocations"][1]["size_bytes"], 5000);
  EXPECT_EQ(rep["allocations"][1]["api"], "cudaMalloc");

  // No bridge here: that collector alone is off, and says why; the rest serve on.
  auto h = a.api("/api/health");
  EXPECT_EQ(h["status"], "degraded");
  // Starvation needs the bridge's pins: the pin directory is not on bpffs, so it is off too.
  // gputime is up: the library beside gpuscope is probed.
  ASSERT_EQ(h["collectors"].size(), 11u);
  for (auto& c : h["collectors"]) {
    EXPECT_EQ(c["up"].get<bool>(), c["name"] != "bridge" && c["name"] != "starvation") << c.dump();
    if (c["name"] == "bridge") EXPECT_NE(c["why"].get<std::string>().find("no bridge running"), std::string::npos);
    if (c["name"] == "starvation")
      EXPECT_NE(c["why"].get<std::string>().find("is not a directory on bpffs"), std::string::npos) << c.dump();
  }
  EXPECT_EQ(http_get(a.port(), "/api/starvation/folded").status, 503);
  for (const char* c : {"kernels", "memleak", "latency", "copies", "ioctl", "gputime", "errors", "nccl", "graphics"})
    EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", c}}), 1) << c;
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "bridge"}}), 0);
  EXPECT_TRUE(samples(m, "gpuscope_gpu_utilization_ratio").empty());
  EXPECT_GT(value_of(m, "process_resident_memory_bytes", {}), 1e6);
  EXPECT_GT(value_of(m, "process_open_fds", {}), 3);
  EXPECT_EQ(http_get(a.port(), "/nothing").status, 404);
  // A request with a body is answered, not dropped: 405 for a method other than GET.
  EXPECT_EQ(http_request(a.port(), "POST", "/metrics", "a=1").status, 405);
  EXPECT_EQ(http_request(a.port(), "PUT", "/api/health", std::string(100000, 'x')).status, 405);
  EXPECT_EQ(http_request(a.port(), "POST", "/metrics").status, 405);
  Reply with_body = http_request(a.port(), "GET", "/api/health", "ignored");
  EXPECT_EQ(with_body.status, 200);
  EXPECT_NE(with_body.body.find("\"collectors\""), std::string::npos) << with_body.body;

  live.signal(SIGUSR1);
  EXPECT_EQ(live.wait(20), 0);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// promtool, Prometheus's own checker, finds nothing to say about a scrape with every family.
TEST(Agent, PromtoolCheckMetrics) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool not installed (scripts/deps.sh installs it)";
  AgWorkload w;
  UngovernedAgent a(w);
  Process drv({w.path(), "driver", "2"});
  ready_pid(drv);
  ASSERT_EQ(drv.wait(20), 0);
  Process leaks({w.path(), "leaks"});
  ready_pid(leaks);
  ASSERT_EQ(leaks.wait(20), 0);
  std::string m = a.until([&](const std::string& t) {
    return sum_of(t, "gpuscope_memory_leaked_bytes_total", {{"comm", w.comm()}}) > 0 &&
           !samples(t, "gpuscope_kernel_launches_total").empty();
  });
  ASSERT_NE(m, "");
  std::string file = w.dir() + "/scrape.txt";
  std::ofstream(file) << m;
  auto r = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "") << r.out;
  EXPECT_EQ(a.stop(), 0);
}

// A process that names itself with bytes of no UTF-8 (and quotes, a backslash, a newline and
// braces) launches kernels: every series stays valid for promtool, its comm label reads as the
// JSON API's comm (invalid bytes as Latin-1), and so does the per-name total after it exits.
TEST(Agent, AnyProcessNameKeepsTheScrapeValid) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool not installed (scripts/deps.sh installs it)";
  AgWorkload w;
  const std::string odd = "a\"b\\c\nd\xff\xfe{}", shown = "a\"b\\c\nd\xc3\xbf\xc3\xbe{}";
  UngovernedAgent a(w, {"-c", odd});
  // 5 launches of kern_a and 3 of kern_b through the driver, then it waits for SIGUSR1.
  Process drv({w.path(), "--comm", odd, "--wait-usr1", "1", "driver", "2"});
  pid_t dp = ready_pid(drv);
  drv.signal(SIGUSR1);
  const std::string d = std::to_string(dp);
  std::string m = a.until([&](const std::string& t) {
    return value_of(t, "gpuscope_kernel_launches_total", {{"pid", d}, {"kernel", "kern_a"}}) == 5;
  });
  ASSERT_NE(m, "") << a.metrics();
  auto k = where(samples(m, "gpuscope_kernel_launches_total"), {{"pid", d}, {"kernel", "kern_b"}});
  ASSERT_EQ(k.size(), 1u) << m;
  EXPECT_EQ(k[0].value, 3);
  EXPECT_EQ(k[0].labels["comm"], shown);
  json procs = a.api("/api/processes");
  std::string api_comm;
  for (auto& p : procs["processes"])
    if (p["pid"] == dp) api_comm = p["comm"];
  EXPECT_EQ(api_comm, shown) << procs.dump();
  ASSERT_EQ(drv.wait(20), 0) << drv.err();
  std::string later = a.until([&](const std::string& t) {
    return sum_of(t, "gpuscope_comm_kernel_launches_total", {{"comm", shown}}) == 8;
  });
  ASSERT_NE(later, "") << a.metrics();
  for (const std::string& scrape : {m, later}) {
    std::string file = w.dir() + "/scrape.txt";
    std::ofstream(file) << scrape;
    auto r = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out, "") << r.out;
  }
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// GPU time: a process hands libgpuscope-cupti.so's exported function a known record set
// (gputime_feeder agent: 3 kernels on 2 devices, durations on and just past the bucket bounds,
// overlapping intervals). With --max-kernels-per-process 2 the kernel with the least GPU time is
// in "other"; every bucket, _sum, _count and the busy seconds per device are exact; promtool
// finds nothing to say; the process's series go once a scrape has seen its final values.
TEST(Agent, GpuTimeSeries) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool not installed (scripts/deps.sh installs it)";
  AgWorkload w(GT_FEEDER, "aggt");
  UngovernedAgent a(w, {"--max-kernels-per-process", "2"});
  Process f({w.path(), CUPTI_LIB, "agent"});
  pid_t fp = ready_pid(f);
  ASSERT_TRUE(f.wait_for("fed 10", 30)) << f.out() << f.err() << a.proc().err();
  std::string ps = std::to_string(fp);
  const std::string kd = "gpuscope_kernel_duration_seconds";
  auto count = [&](const std::string& t, const std::string& kernel) {
    return value_of(t, kd + "_count", {{"pid", ps}, {"kernel", kernel}});
  };
  std::string m = a.until([&](const std::string& t) {
    return count(t, "alpha_kernel(float*)") == 5 && count(t, "beta_kernel()") == 2 && count(t, "other") == 3;
  });
  ASSERT_NE(m, "") << a.metrics();
  // Cumulative counts at le = 4^i us, i = 0..12, then +Inf.
  const std::vector<std::string> les = {"1e-06",    "4e-06",    "1.6e-05",   "6.4e-05",  "0.000256",
                                        "0.001024", "0.004096", "0.016384",  "0.065536", "0.262144",
                                        "1.048576", "4.194304", "16.777216", "+Inf"};
  const std::map<std::string, std::vector<double>> want = {
      // 1 us, 1.001 us, 4 us, 64 us, 3 s
      {"alpha_kernel(float*)", {1, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5}},
      // 500 us, 20 s
      {"beta_kernel()", {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2}},
      // gamma_kernel: 100 ns three times
      {"other", {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}}};
  for (auto& [kernel, cum] : want) {
    auto b = where(samples(m, kd + "_bucket"), {{"pid", ps}, {"kernel", kernel}});
    ASSERT_EQ(b.size(), les.size()) << kernel << "\n" << m;
    for (size_t i = 0; i < les.size(); i++) {
      EXPECT_EQ(b[i].labels["le"], les[i]) << kernel;
      EXPECT_EQ(b[i].value, cum[i]) << kernel << " le=" << les[i];
      EXPECT_EQ(b[i].labels["comm"], w.comm());
      EXPECT_EQ(b[i].labels.count("container"), 1u);
    }
  }
  EXPECT_EQ(value_of(m, kd + "_sum", {{"pid", ps}, {"kernel", "alpha_kernel(float*)"}}), 3.000070001);
  EXPECT_EQ(value_of(m, kd + "_sum", {{"pid", ps}, {"kernel", "beta_kernel()"}}), 20.0005);
  EXPECT_EQ(value_of(m, kd + "_sum", {{"pid", ps}, {"kernel", "other"}}), 3e-7);
  EXPECT_TRUE(where(samples(m, kd + "_count"), {{"pid", ps}, {"kernel", "gamma_kernel"}}).empty());
  EXPECT_EQ(where(samples(m, kd + "_count"), {{"pid", ps}}).size(), 3u);
  // The union of the process's kernels per device: overlaps counted once.
  EXPECT_EQ(value_of(m, "gpuscope_gpu_busy_seconds_total", {{"pid", ps}, {"device", "0"}}), 3.000069701);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_busy_seconds_total", {{"pid", ps}, {"device", "1"}}), 20);
  EXPECT_EQ(where(samples(m, "gpuscope_gpu_busy_seconds_total"), {{"pid", ps}}).size(), 2u);
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "gputime"}}), 1);
  std::string file = w.dir() + "/scrape-gputime.txt";
  std::ofstream(file) << m;
  auto r = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "") << r.out;

  // The same under the same rule in /api/kernels (no launch was counted: 0 launches), busy time in /api/processes.
  json k = a.api("/api/kernels");
  std::vector<json> rows;
  for (auto& row : k["kernels"])
    if (row["pid"] == fp) rows.push_back(row);
  ASSERT_EQ(rows.size(), 3u) << k.dump();
  EXPECT_EQ(rows[0]["kernel"], "alpha_kernel(float*)");
  EXPECT_EQ(rows[0]["launches"], 0);
  EXPECT_EQ(rows[0]["gpu_kernels"], 5);
  EXPECT_EQ(rows[0]["gpu_time_ns"], 3000070001ull);
  EXPECT_EQ(rows[0]["gpu_mean_ns"], 600014000ull);
  EXPECT_EQ(rows[0]["gpu_max_ns"], 3000000000ull);
  EXPECT_EQ(rows[1]["kernel"], "beta_kernel()");
  EXPECT_EQ(rows[1]["gpu_kernels"], 2);
  EXPECT_EQ(rows[1]["gpu_time_ns"], 20000500000ull);
  EXPECT_EQ(rows[1]["gpu_max_ns"], 20000000000ull);
  EXPECT_EQ(rows[2]["kernel"], "other");
  EXPECT_EQ(rows[2]["gpu_kernels"], 3);
  EXPECT_EQ(rows[2]["gpu_time_ns"], 300);
  EXPECT_EQ(rows[2]["gpu_max_ns"], 100);
  json procs = a.api("/api/processes");
  json busy;
  for (auto& p : procs["processes"])
    if (p["pid"] == fp) busy = p["gpu_busy"];
  EXPECT_EQ(busy, json::parse(R"([{"device":0,"busy_ns":3000069701},{"device":1,"busy_ns":20000000000}])"))
      << procs.dump();
  auto h = a.api("/api/health");
  for (auto& c : h["collectors"])
    if (c["name"] == "gputime") EXPECT_TRUE(c["up"].get<bool>()) << c.dump();

  // Ended: its series go once a scrape has seen their final values.
  f.signal(SIGUSR1);
  ASSERT_EQ(f.wait(20), 0) << f.err();
  std::string later = a.until([&](const std::string& t) {
    return where(samples(t, kd + "_count"), {{"pid", ps}}).empty() &&
           where(samples(t, "gpuscope_gpu_busy_seconds_total"), {{"pid", ps}}).empty();
  });
  ASSERT_NE(later, "") << a.metrics();
  EXPECT_EQ(value_of(later, "gpuscope_exported_processes", {{"state", "exited"}}), 0);
  EXPECT_EQ(value_of(later, "gpuscope_events_lost_total", {{"collector", "gputime"}, {"reason", "ring_buffer_full"}}),
            0);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// GPU time on a duty cycle: a program runs libgpuscope-cupti.so over the stand-in libcupti
// (cupti_app), launching a 100 us kernel every 1 ms for 3 s, the agent asking for 0.3 s in every
// 1 s. The stand-in records only what the library enables: every kernel recorded started inside
// a window (CLOCK_BOOTTIME modulo 1 s below 0.3 s, give or take the thread's wake-up), none
// missed inside one; the histogram holds exactly the recorded kernels, the busy time is theirs
// scaled by 1/0.3, the duty gauge says 0.3, and the agent asked for no launch-call records.
TEST(Agent, GpuTimeDutyCycle) {
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream c(e.path() / "comm"), a(e.path() / "cmdline");
    std::string comm, args((std::istreambuf_iterator<char>(a)), {});
    // A gpuscope scoped to no process (a developer's, on a shared machine) asks every library to record.
    bool scoped = false, tells = false;
    for (const char* f : {"-p", "--pid", "-c", "--comm"})
      scoped = scoped || args.find(std::string(1, '\0') + f + '\0') != std::string::npos;
    for (const char* sub : {"kernels", "timeline", "agent"})
      tells = tells || args.find(std::string(1, '\0') + sub + '\0') != std::string::npos;
    if (std::getline(c, comm) && comm == "gpuscope" && tells && !scoped)
      GTEST_SKIP() << "another gpuscope runs: " << e.path();
  }
  AgWorkload w(CUPTI_APP, "agdc");
  std::string log = w.dir() + "/standin.log";
  UngovernedAgent a(w, {"--collectors", "gputime", "--gputime-duty", "0.3/1"});
  Process f({w.path(), CUPTI_LIB, CUPTI_STANDIN, "wait:window", "duty_kernel:3000:1000:100000", "usr1"},
            {"GPUSCOPE_CUPTI_PATH=" CUPTI_STANDIN, "GS_CUPTI_STANDIN_LOG=" + log});
  std::string ps = std::to_string(ready_pid(f));
  ASSERT_TRUE(f.wait_for("waiting 1", 60)) << f.out() << a.proc().err();
  ASSERT_NE(f.out().find("state window ok"), std::string::npos) << f.out();
  uint64_t launched = 0, recorded = 0, api = 0;
  {
    std::istringstream in(f.out());
    for (std::string line; std::getline(in, line);)
      if (line.rfind("phase duty_kernel ", 0) == 0)
        sscanf(line.c_str(), "phase duty_kernel launched %lu kernels %lu api %lu", &launched, &recorded, &api);
  }
  EXPECT_EQ(launched, 3000u) << f.out();
  EXPECT_EQ(api, 0u);
  // 3 s from inside a window: about 3 windows of 0.3 s.
  EXPECT_GE(recorded, 500u) << f.out();
  EXPECT_LE(recorded, 1300u) << f.out();

  // slack: the library's thread wakes at a window's edge, late by up to this on a loaded machine.
  const uint64_t period = 1000000000, on = 300000000, slack = 150000000;
  size_t kernels = 0, missed = 0, enables = 0, disables = 0, finalizes = 0;
  uint64_t busy_ns = 0, last_end = 0,
           first_enable = 0;  // the union of the recorded kernels, each piece scaled by 1/0.3
  std::ifstream lf(log);
  std::istringstream in(std::string(std::istreambuf_iterator<char>(lf), {}));
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string type;
    uint64_t t = 0;
    l >> type >> t;
    uint64_t phase = t % period;
    if (type == "kernel") {
      kernels++;
      uint64_t end = 0;
      l >> end;
      if (end > std::max(t, last_end)) busy_ns += (end - std::max(t, last_end)) * 1000000 / 300000;
      last_end = std::max(last_end, end);
      EXPECT_LT(phase, on + slack) << line;
    } else if (type == "missed") {
      missed++;
      EXPECT_TRUE(phase < slack || phase >= on) << line;
    } else if (type == "enable") {
      enables++;
      if (!first_enable) first_enable = t;
      // The first window opens when the agent's word arrives: anywhere in a window.
      EXPECT_LT(phase, t - first_enable < 10000000 ? on + slack : slack) << line;
    } else if (type == "disable") {
      disables++;
      EXPECT_TRUE(phase >= on && phase < on + slack) << line;
    } else if (type == "finalize") {
      // CUPTI detached at the exit of the first launch after a window: it costs nothing until
      // the next.
      finalizes++;
      EXPECT_TRUE(phase >= on && phase < on + slack) << line;
    } else {
      ADD_FAILURE() << "the agent asked for more than kernels: " << line;
    }
  }
  EXPECT_EQ(kernels, recorded);
  EXPECT_EQ(kernels + missed, 3000u);
  EXPECT_GE(enables, 3u);  // kernels alone (copies, memsets and syncs are a timeline's), at least 3 windows
  EXPECT_GE(disables, 2u);
  EXPECT_GE(finalizes, 2u);
  EXPECT_LE(finalizes, disables);

  const std::string kd = "gpuscope_kernel_duration_seconds";
  std::string m = a.until([&](const std::string& t) {
    return value_of(t, kd + "_count", {{"pid", ps}, {"kernel", "duty_kernel"}}) == static_cast<double>(recorded);
  });
  ASSERT_NE(m, "") << a.metrics();
  EXPECT_NEAR(value_of(m, kd + "_sum", {{"pid", ps}, {"kernel", "duty_kernel"}}), recorded * 100e-6, 1e-9);
  // Launches that fell behind their schedule overlap: the union, as the log has it.
  EXPECT_NEAR(value_of(m, "gpuscope_gpu_busy_seconds_total", {{"pid", ps}, {"device", "0"}}), busy_ns / 1e9, 1e-9);
  EXPECT_GE(busy_ns, recorded * 100000 * 10 / 3 / 2);
  EXPECT_EQ(value_of(m, "gpuscope_gputime_duty_ratio", {}), 0.3);
  EXPECT_EQ(value_of(m, "gpuscope_events_lost_total", {{"collector", "gputime"}, {"reason", "no_client_slot"}}), 0);
  f.signal(SIGUSR1);
  EXPECT_EQ(f.wait(20), 0) << f.err();
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// 500 short-lived processes: with --max-kernels-per-process 1 each has kern_a (5) and
// "other" (kern_b's 3); every one's series go after a scrape, the comm total is exact, and
// neither the agent's series nor the BPF maps keep anything of them.
TEST(Agent, BoundedCardinality) {
  AgWorkload w;
  UngovernedAgent a(w, {"--max-kernels-per-process", "1"});
  size_t most = 0;
  std::set<std::string> pids_seen;
  auto check = [&](const std::string& t) {
    auto k = where(samples(t, "gpuscope_kernel_launches_total"), {{"comm", w.comm()}});
    std::set<std::string> pids;
    for (auto& s : k) {
      pids.insert(s.labels["pid"]);
      pids_seen.insert(s.labels["pid"]);
      EXPECT_NE(s.labels["kernel"], "kern_b");
      // A process still running may be caught part-way through its launches.
      double most_launches = s.labels["kernel"] == "kern_a" ? 5 : s.labels["kernel"] == "other" ? 3 : -1;
      EXPECT_LE(s.value, most_launches) << s.labels["kernel"];
    }
    most = std::max(most, pids.size());
  };
  const int kProcs = 500, kBatch = 25;
  std::set<uint32_t> workload;
  for (int i = 0; i < kProcs; i += kBatch) {
    std::vector<std::unique_ptr<Process>> batch;
    for (int j = 0; j < kBatch; j++) {
      batch.push_back(std::make_unique<Process>(std::vector<std::string>{w.path(), "driver", "0"}));
      workload.insert(static_cast<uint32_t>(batch.back()->pid()));
    }
    for (auto& p : batch) ASSERT_EQ(p->wait(30), 0) << p->err();
    check(a.metrics());
  }
  std::string end = a.until(
      [&](const std::string& t) {
        check(t);
        return sum_of(t, "gpuscope_comm_kernel_launches_total", {{"comm", w.comm()}}) == kProcs * 8 &&
               where(samples(t, "gpuscope_kernel_launches_total"), {{"comm", w.comm()}}).empty();
      },
      30);
  ASSERT_NE(end, "") << a.metrics();
  EXPECT_EQ(value_of(end, "gpuscope_exported_processes", {{"state", "exited"}}), 0);
  EXPECT_EQ(value_of(end, "gpuscope_exported_processes", {{"state", "running"}}), 0);
  EXPECT_EQ(sum_of(end, "gpuscope_comm_memory_allocations_total", {{"comm", w.comm()}}), 0);
  // Series at once: the processes of the batches since the last refresh and scrape (a few
  // batches, more on a loaded machine), never a number that grows with all 500.
  EXPECT_LT(most, static_cast<size_t>(kProcs / 2));
  EXPECT_GT(pids_seen.size(), 0u);
  // Keyed by pid first; maps keyed otherwise (graphics' call names) hold no workload pid.
  auto maps = pids_in_maps(a.proc().pid());
  std::string left;
  for (auto& [name, pids] : maps)
    for (uint32_t pid : pids)
      if (workload.count(pid)) left += fmt::format(" {}:{}", name, pid);
  EXPECT_EQ(left, "") << "per-process BPF state of exited processes";
  EXPECT_EQ(a.stop(), 0);
}

// A real Prometheus (Debian's) scrapes the agent every second; its HTTP API answers with the
// exact launch counts, outstanding and leaked bytes, and an exited process's series go stale.
TEST(Agent, RealPrometheus) {
  ASSERT_EQ(access("/usr/bin/prometheus", X_OK), 0) << "prometheus not installed (scripts/deps.sh installs it)";
  AgWorkload w;
  UngovernedAgent a(w);
  int pport = free_port();
  std::string cfg = w.dir() + "/prometheus.yml", data = w.dir() + "/data";
  std::ofstream(cfg) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                     << "  - job_name: gpuscope\n    static_configs:\n      - targets: ['127.0.0.1:" << a.port()
                     << "']\n";
  Process prom({"/usr/bin/prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + data,
                "--web.listen-address=127.0.0.1:" + std::to_string(pport)});
  auto query = [&](const std::string& q) -> json {
    std::string enc;
    for (unsigned char c : q) {
      if (isalnum(c) || c == '_' || c == '.' || c == '-')
        enc += static_cast<char>(c);
      else
        enc += fmt_hex(c);
    }
    auto r = http_get(pport, "/api/v1/query?query=" + enc);
    if (r.status != 200) return json();
    return json::parse(r.body)["data"]["result"];
  };
  auto value = [&](const std::string& q) -> double {
    json r = query(q);
    if (!r.is_array() || r.size() != 1) return -1;
    return std::stod(r[0]["value"][1].get<std::string>());
  };
  auto wait_value = [&](const std::string& q, double want, double timeout_s = 30) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    double v = -1;
    while (std::chrono::steady_clock::now() < end && (v = value(q)) != want) sleep_s(0.5);
    return v;
  };
  ASSERT_EQ(wait_value("up{job=\"gpuscope\"}", 1), 1) << prom.err();

  Holder live(w);
  sleep_s(0.5);
  ASSERT_TRUE(live.allocate());
  EXPECT_EQ(
      wait_value("gpuscope_memory_outstanding_bytes{pid=\"" + std::to_string(live.pid()) + "\",category=\"device\"}",
                 6777),
      6777);

  Process drv({w.path(), "driver", "2"});
  pid_t dp = ready_pid(drv);
  ASSERT_EQ(drv.wait(20), 0);
  std::string sel = "{pid=\"" + std::to_string(dp) + "\",kernel=\"kern_a\"}";
  EXPECT_EQ(wait_value("max_over_time(gpuscope_kernel_launches_total" + sel + "[5m])", 5), 5);
  EXPECT_EQ(
      wait_value(
          "max_over_time(gpuscope_kernel_launches_total{pid=\"" + std::to_string(dp) + "\",kernel=\"kern_b\"}[5m])", 3),
      3);
  EXPECT_EQ(wait_value("gpuscope_comm_kernel_launches_total{comm=\"" + w.comm() + "\"}", 8), 8);
  // Gone from the scrape: Prometheus marks the series stale, and an instant query finds nothing.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  json r;
  while (std::chrono::steady_clock::now() < end && (r = query("gpuscope_kernel_launches_total" + sel)).size() != 0)
    sleep_s(0.5);
  EXPECT_TRUE(r.is_array() && r.empty()) << r.dump();

  Process leaks({w.path(), "leaks"});
  ready_pid(leaks);
  ASSERT_EQ(leaks.wait(20), 0);
  EXPECT_EQ(wait_value("gpuscope_memory_leaked_bytes_total{comm=\"" + w.comm() + "\"}", 2107552), 2107552);

  live.signal(SIGUSR1);
  EXPECT_EQ(live.wait(20), 0);
  prom.signal(SIGTERM);
  prom.wait(30);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// Device series from a running bridge's pins (on the NVML stand-in), labelled as dcgm-exporter
// labels them; a bridge that stops, where the agent cannot run one itself, turns the collector
// off without stopping the agent.
TEST(Agent, BridgeDeviceSeries) {
  AgWorkload w;
  PinDir d;
  StandinFile f;
  f.write(
      "device 0 util 37 memutil 12 mem_total 85899345920 mem_free 81067507712 mem_used 4294967296 "
      "mem_reserved 536870912 temp 55 power 123456 smclk 1410 memclk 2619 throttle 0x105 pcie_tx 1000 pcie_rx 2000 "
      "enc 3 dec 4 fan 40 compute_mode 3 ecc_corr 7 ecc_uncorr 1\n"
      "device 1 util 91 memutil 44 mem_total 17179869184 mem_free 1 mem_used 8589934592 mem_reserved 1048576 "
      "temp 60 power 300000 smclk 1980 memclk 1593 throttle 0 pcie_tx 5 pcie_rx 5 enc 0 dec 9 fan 100 "
      "compute_mode 0 ecc_corr 0 ecc_uncorr 0\n");
  auto bridge = std::make_unique<Process>(
      std::vector<std::string>{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path},
      std::vector<std::string>{f.env()});
  ASSERT_TRUE(bridge->wait_for("bridge publishing", 10, true)) << bridge->err();
  Process g({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-c", w.comm(), "--collectors", "bridge",
             "--bridge-pin-dir", d.path, "--nvml", NVML_STANDIN, "--interval", "0.2"},
            {f.env()});
  ASSERT_TRUE(g.wait_for("\"type\":\"agent\"", 30)) << g.err();
  int port = parse_lines(g.out()).at(0).at("port").get<int>();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string m;
  for (int i = 0; i < 100 && samples(m, "gpuscope_gpu_utilization_ratio").size() != 2; i++) {
    sleep_s(0.1);
    m = http_get(port, "/metrics").body;
  }
  auto u = samples(m, "gpuscope_gpu_utilization_ratio");
  ASSERT_EQ(u.size(), 2u) << m;
  std::map<std::string, std::string> dev0 = {{"gpu", "0"},
                                             {"UUID", "GPU-5eed0000-0000-4000-8000-000000000000"},
                                             {"modelName", "NVIDIA Stand-in H200"},
                                             {"Hostname", host}};
  auto dev1 = dev0;
  dev1["gpu"] = "1";
  dev1["UUID"] = "GPU-5eed0000-0000-4000-8000-000000000001";
  EXPECT_EQ(value_of(m, "gpuscope_gpu_utilization_ratio", dev0), 0.37);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_utilization_ratio", dev1), 0.91);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_memory_used_bytes", dev0), 4294967296.0);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_memory_total_bytes", dev1), 17179869184.0);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_power_watts", dev0), 123.456);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_temperature_celsius", dev1), 60);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_sm_clock_hertz", dev0), 1410e6);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_clock_event_reasons", dev0), 0x105);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_pcie_rx_bytes_per_second", dev0), 2000 * 1024);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_ecc_corrected_errors_total", dev0), 7);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_ecc_uncorrected_errors_total", dev0), 1);
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "bridge"}}), 1);
  std::string file = w.dir() + "/devices.txt";
  std::ofstream(file) << m;
  if (access("/usr/bin/promtool", X_OK) == 0) {
    // dcgm-exporter's label names are camelCase (UUID, modelName, Hostname), which promtool's
    // linter remarks on; joining with dcgm-exporter needs exactly them. Nothing else is said.
    auto r = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
    std::istringstream lines(r.out);
    int camel = 0;
    for (std::string l; std::getline(lines, l);) {
      EXPECT_NE(l.find("label names should be written in 'snake_case' not 'camelCase'"), std::string::npos) << l;
      camel++;
    }
    EXPECT_EQ(camel, 2 * 17) << "one remark per device series";
  }

  // NVML fails from now on, so the agent cannot take the pins over when the bridge stops.
  f.write("init_fail 999\n");
  bridge->signal(SIGTERM);
  EXPECT_EQ(bridge->wait(30), 0);
  bridge.reset();
  // The bridge's pins outlive it, unchanging: after 10 s the agent calls them stale, turns the
  // collector off and keeps serving.
  std::string after;
  for (int i = 0; i < 200; i++) {
    after = http_get(port, "/metrics").body;
    if (value_of(after, "gpuscope_collector_up", {{"collector", "bridge"}}) == 0) break;
    sleep_s(0.1);
  }
  EXPECT_EQ(value_of(after, "gpuscope_collector_up", {{"collector", "bridge"}}), 0);
  EXPECT_TRUE(samples(after, "gpuscope_gpu_utilization_ratio").empty());
  auto h = json::parse(http_get(port, "/api/health").body);
  EXPECT_EQ(h["collectors"][0]["name"], "bridge");
  EXPECT_NE(h["collectors"][0]["why"].get<std::string>().find("stale"), std::string::npos) << h.dump();
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  EXPECT_NE(g.err().find("collector bridge is off"), std::string::npos) << g.err();
}

namespace {

// The agent's command line for the bridge tests: device series and starvation, on the stand-in.
std::vector<std::string> bridge_agent_argv(const Workload& w, const PinDir& d, std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {gpuscope_bin(), "agent",  "--json",       "--listen",          "127.0.0.1:0",
                                "-c",           w.comm(), "--collectors", "starvation,bridge", "--bridge-pin-dir",
                                d.path,         "--nvml", NVML_STANDIN,   "--interval",        "0.2"};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

// Scrapes until a bridge publishes fresh data that the agent serves: both collectors up, the
// device's series there, the data under a second old. Returns the last scrape and whether it did.
bool bridge_fresh_within(int port, double timeout_s, std::string* m) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    *m = http_get(port, "/metrics").body;
    double age = value_of(*m, "gpuscope_bridge_update_age_seconds", {});
    if (value_of(*m, "gpuscope_collector_up", {{"collector", "bridge"}}) == 1 &&
        value_of(*m, "gpuscope_collector_up", {{"collector", "starvation"}}) == 1 && age >= 0 && age < 1 &&
        value_of(*m, "gpuscope_gpu_utilization_ratio", {{"gpu", "0"}}) == 0.37)
      return true;
    sleep_s(0.1);
  }
  return false;
}

// The agent of bridge_agent_argv, started.
struct BridgeAgent : Process {
  int port = 0;
  std::string m;  // its last scrape
  BridgeAgent(const Workload& w, const PinDir& d, const StandinFile& f) : Process(bridge_agent_argv(w, d), {f.env()}) {}
  // Whether it came up (its port is known then).
  bool up() {
    if (!wait_for("\"type\":\"agent\"", 30)) return false;
    port = parse_lines(out()).at(0).at("port").get<int>();
    return true;
  }
  bool fresh_within(double timeout_s) { return bridge_fresh_within(port, timeout_s, &m); }
};

}  // namespace

// systemd restarts the agent 5 s after it stops: the next agent finds the pins of a bridge whose
// writer has gone, still within the readers' 10 s of staleness, and runs the bridge itself at once.
TEST(Agent, BridgeOfAnAgentThatExitedIsTakenOverAtOnce) {
  AgWorkload w;
  PinDir d;
  StandinFile f;
  f.write("device 0 util 37 mem_total 85899345920 mem_used 4294967296\n");
  auto first = run(bridge_agent_argv(w, d, {"-d", "3"}), {f.env()}, 60);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_NE(first.err.find("no bridge was publishing"), std::string::npos) << first.err;
  sleep_s(1);
  BridgeAgent g(w, d, f);
  ASSERT_TRUE(g.up()) << g.err();
  EXPECT_TRUE(g.fresh_within(3)) << g.m << g.err();
  EXPECT_NE(g.err().find("is not publishing; the agent runs one"), std::string::npos) << g.err();
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

// The bridge the agent reads stops: the agent takes its pins over and keeps its series going.
TEST(Agent, BridgeThatStopsWhileReadIsTakenOver) {
  AgWorkload w;
  PinDir d;
  StandinFile f;
  f.write("device 0 util 37 mem_total 85899345920 mem_used 4294967296\n");
  auto bridge = std::make_unique<Process>(
      std::vector<std::string>{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path},
      std::vector<std::string>{f.env()});
  ASSERT_TRUE(bridge->wait_for("bridge publishing", 10, true)) << bridge->err();
  BridgeAgent g(w, d, f);
  ASSERT_TRUE(g.up()) << g.err();
  ASSERT_TRUE(g.fresh_within(5)) << g.m << g.err();
  EXPECT_EQ(g.err().find("the agent runs one"), std::string::npos) << g.err();
  bridge->signal(SIGTERM);
  EXPECT_EQ(bridge->wait(30), 0);
  int bridge_pid = bridge->pid();
  bridge.reset();
  sleep_s(1.2);  // past a bridge's freshness: served now, the data is the agent's
  EXPECT_TRUE(g.fresh_within(3)) << g.m << g.err();
  std::string took = "bridge pid " + std::to_string(bridge_pid) + " under " + d.path + " is not publishing";
  EXPECT_NE(g.err().find(took + "; the agent runs one"), std::string::npos) << g.err();
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

// A process in a Kubernetes pod's cgroup (made here, in the pids hierarchy) gets its pod,
// namespace and container names from the kubelet's log directory names (a test directory).
TEST(Agent, KubernetesLabels) {
  AgWorkload w;
  char tail[13];
  snprintf(tail, sizeof tail, "%012d", static_cast<int>(getpid()));
  std::string uid = std::string("0a1b2c3d-1111-2222-3333-") + tail;
  std::string id = "4f2a9c1b7d3e8f6a0b5c2d9e1f7a3b8c6d0e4f2a9c1b7d3e8f6a" + std::string(tail);
  std::string root = "/sys/fs/cgroup/pids";
  if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    root = "/sys/fs/cgroup";
    if (access((root + "/cgroup.procs").c_str(), W_OK) != 0) GTEST_SKIP() << "no writable cgroup hierarchy";
  }
  std::vector<std::string> cgs = {root + "/gstest-kubepods-" + tail, root + "/gstest-kubepods-" + tail + "/pod" + uid,
                                  root + "/gstest-kubepods-" + tail + "/pod" + uid + "/" + id};
  for (auto& c : cgs) ASSERT_EQ(mkdir(c.c_str(), 0755), 0) << c << ": " << strerror(errno);
  std::string pods = w.dir() + "/log/pods", pod = pods + "/ml_trainer-0_" + uid;
  for (auto d : {w.dir() + "/log", pods, pod, pod + "/worker", pod + "/sidecar", w.dir() + "/log/containers"})
    mkdir(d.c_str(), 0755);
  std::ofstream(w.dir() + "/log/containers/trainer-0_ml_worker-" + id + ".log") << "";
  {
    UngovernedAgent a(w, {"--pods-dir", pods});
    Holder live(w);
    std::ofstream(cgs.back() + "/cgroup.procs") << live.pid() << "\n";
    ASSERT_TRUE(live.allocate()) << live.err();
    std::string m = a.until([&](const std::string& t) {
      return value_of(t, "gpuscope_memory_outstanding_bytes",
                      {{"pid", std::to_string(live.pid())}, {"category", "device"}}) == 6777;
    });
    ASSERT_NE(m, "") << a.metrics();
    auto s = where(samples(m, "gpuscope_memory_outstanding_bytes"),
                   {{"pid", std::to_string(live.pid())}, {"category", "device"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].labels["namespace"], "ml");
    EXPECT_EQ(s[0].labels["pod"], "trainer-0");
    EXPECT_EQ(s[0].labels["container"], "worker");
    live.signal(SIGUSR1);
    EXPECT_EQ(live.wait(20), 0);
    EXPECT_EQ(a.stop(), 0);
  }
  for (auto it = cgs.rbegin(); it != cgs.rend(); ++it)
    EXPECT_EQ(rmdir(it->c_str()), 0) << *it << ": " << strerror(errno);
}

namespace {

constexpr unsigned long kRmControl = 0xC020462A;  // _IOWR('F', 0x2A, 32 bytes): NV_ESC_RM_CONTROL

// A child named `comm` that makes `n` ioctls on a major-195 node (each fails with EBADF: no
// driver here), then exits when told to (a byte on its pipe) or at once.
struct IoctlChild {
  pid_t pid = -1;
  int go = -1;
  bool waits;
  IoctlChild(const std::string& node, const std::string& comm, int n, bool wait) : waits(wait) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    pid = fork();
    if (pid == 0) {
      close(p[1]);
      prctl(PR_SET_NAME, comm.c_str());
      int fd = open(node.c_str(), O_PATH);
      for (int i = 0; i < n; i++) ioctl(fd, kRmControl, nullptr);
      char c;
      if (wait) (void)!read(p[0], &c, 1);
      _exit(0);
    }
    close(p[0]);
    go = p[1];
  }
  void finish() {
    if (waits) (void)!write(go, "x", 1);  // one that did not wait may have closed its end
    close(go);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st));
  }
};

}  // namespace

// ioctl series: calls per request stay counted after their processes exit; a process's own
// series goes once a scrape has seen its final value.
TEST(Agent, IoctlSeries) {
  AgWorkload w;
  std::string node = w.dir() + "/nvidia7";
  ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0600, makedev(195, 7)), 0) << strerror(errno);
  std::string comm = "gsio" + std::to_string(getpid() % 1000000);
  Process g({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-c", comm, "--collectors", "ioctl",
             "--interval", "0.2"});
  ASSERT_TRUE(g.wait_for("\"type\":\"agent\"", 30)) << g.err();
  int port = parse_lines(g.out()).at(0).at("port").get<int>();
  auto scrape = [&](const std::function<bool(const std::string&)>& pred) {
    std::string m;
    for (int i = 0; i < 200; i++) {
      m = http_get(port, "/metrics").body;
      if (pred(m)) return m;
      sleep_s(0.05);
    }
    ADD_FAILURE() << m;
    return std::string();
  };
  const std::map<std::string, std::string> rm = {{"request", "NV_ESC_RM_CONTROL"}};

  IoctlChild a(node, comm, 5, true);
  std::string as = std::to_string(a.pid);
  std::string m = scrape([&](const std::string& t) {
    return value_of(t, "gpuscope_process_ioctl_calls_total", {{"pid", as}}) == 5;
  });
  EXPECT_EQ(value_of(m, "gpuscope_ioctl_calls_total", rm), 5);
  EXPECT_EQ(value_of(m, "gpuscope_ioctl_errors_total", rm), 5);
  EXPECT_GT(value_of(m, "gpuscope_ioctl_duration_seconds_total", rm), 0);
  EXPECT_EQ(samples(m, "gpuscope_ioctl_calls_total").size(), 1u) << "only the NVIDIA node's request";
  auto ps = where(samples(m, "gpuscope_process_ioctl_calls_total"), {{"pid", as}});
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].labels["comm"], comm);
  auto procs = json::parse(http_get(port, "/api/processes").body);
  bool found = false;
  for (auto& p : procs["processes"])
    if (p["pid"] == a.pid) {
      found = true;
      EXPECT_EQ(p["ioctl_calls"], 5);
      EXPECT_EQ(p["ioctl_errors"], 5);
    }
  EXPECT_TRUE(found) << procs.dump();
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "ioctl"}}), 1);

  // It exits: its series goes, the request's count stays.
  a.finish();
  m = scrape([&](const std::string& t) {
    return where(samples(t, "gpuscope_process_ioctl_calls_total"), {{"pid", as}}).empty();
  });
  EXPECT_EQ(value_of(m, "gpuscope_ioctl_calls_total", rm), 5);
  // A life shorter than one refresh is counted all the same.
  IoctlChild b(node, comm, 3, false);
  b.finish();
  m = scrape([&](const std::string& t) { return value_of(t, "gpuscope_ioctl_calls_total", rm) == 8; });
  EXPECT_EQ(value_of(m, "gpuscope_ioctl_errors_total", rm), 8);
  m = scrape([&](const std::string& t) { return samples(t, "gpuscope_process_ioctl_calls_total").empty(); });
  EXPECT_EQ(value_of(m, "gpuscope_ioctl_calls_total", rm), 8);
  EXPECT_EQ(value_of(m, "gpuscope_events_lost_total", {{"collector", "ioctl"}, {"reason", "counter_map_full"}}), 0);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

namespace {

uint64_t schedstat_ns(int pid, int tid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat");
  uint64_t ns = 0;
  f >> ns;
  return ns;
}

}  // namespace

// Starvation from the agent, with no bridge running: the agent runs its own on the NVML
// stand-in, serves its device series, counts a burning thread's CPU time while its GPU sits
// idle (against the scheduler's count) and serves its folded stacks.
TEST(Agent, StarvationWithTheBridgeInside) {
  PinDir d;
  StandinFile f;
  Process fx({STARV_FIXTURE, "burn"});
  ASSERT_TRUE(fx.wait_for("ready pid=", 10)) << fx.err();
  std::map<std::string, std::string> ready;
  {
    std::istringstream in(fx.out().substr(fx.out().find("ready ")));
    for (std::string word; in >> word;)
      if (auto eq = word.find('='); eq != std::string::npos) ready[word.substr(0, eq)] = word.substr(eq + 1);
  }
  int pid = std::stoi(ready.at("pid")), burner = std::stoi(ready.at("burner"));
  f.write("device 0 util 0 mem_total 85899345920 mem_used 1048576\nprocess 0 " + std::to_string(pid) + " 1048576\n");
  Process g({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-p", std::to_string(pid), "--collectors",
             "starvation,bridge", "--bridge-pin-dir", d.path, "--nvml", NVML_STANDIN, "--starvation-min-idle-ms", "200",
             "--interval", "0.2"},
            {f.env()});
  ASSERT_TRUE(g.wait_for("\"type\":\"agent\"", 30)) << g.err();
  EXPECT_NE(g.err().find("the agent runs one"), std::string::npos) << g.err();
  int port = parse_lines(g.out()).at(0).at("port").get<int>();
  std::string ps = std::to_string(pid), ts = std::to_string(burner);
  std::map<std::string, std::string> me = {{"pid", ps}, {"tid", ts}};
  std::string m;
  for (int i = 0; i < 200 && !(value_of(m, "gpuscope_starvation_cpu_seconds_total", me) > 0); i++) {
    sleep_s(0.05);
    m = http_get(port, "/metrics").body;
  }
  ASSERT_GT(value_of(m, "gpuscope_starvation_cpu_seconds_total", me), 0) << m << g.err();
  auto one = where(samples(m, "gpuscope_starvation_cpu_seconds_total"), me);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].labels["comm"], "starv_fixture");
  EXPECT_EQ(one[0].labels["thread"], "burner");
  EXPECT_EQ(where(samples(m, "gpuscope_starvation_cpu_seconds_total"), {{"thread", "sleeper"}}).size(), 0u);
  EXPECT_EQ(value_of(m, "gpuscope_gpu_memory_used_bytes", {{"gpu", "0"}}), 1048576);
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "bridge"}}), 1);
  EXPECT_EQ(value_of(m, "gpuscope_collector_up", {{"collector", "starvation"}}), 1);

  // Over a few seconds, the series grows as the scheduler counts the thread's CPU time.
  double v0 = value_of(m, "gpuscope_starvation_cpu_seconds_total", me);
  uint64_t s0 = schedstat_ns(pid, burner);
  sleep_s(3);
  uint64_t s1 = schedstat_ns(pid, burner);
  m = http_get(port, "/metrics").body;
  double v1 = value_of(m, "gpuscope_starvation_cpu_seconds_total", me);
  EXPECT_NEAR((v1 - v0) / ((s1 - s0) / 1e9), 1.0, 0.2) << v0 << " " << v1 << " " << s0 << " " << s1;
  EXPECT_EQ(sum_of(m, "gpuscope_comm_starvation_cpu_seconds_total", {{"comm", "starv_fixture"}}), v1);

  // Folded stacks, flamegraph.pl's input, weighted in sampled ns.
  auto r = http_get(port, "/api/starvation/folded");
  EXPECT_EQ(r.status, 200);
  std::istringstream in(r.body);
  BurnerFolded fo;
  ASSERT_NO_FATAL_FAILURE(read_burner_folded(in, &fo));
  auto [lines, total, known] = fo;
  ASSERT_GT(lines, 0);
  EXPECT_NEAR(total / 1e9 / v1, 1.0, 0.3) << "49 Hz samples against the accounted time";
  EXPECT_GE(known, 0.9 * total);

  // The GPU turns busy: no more starving time.
  f.write("device 0 util 100 mem_total 85899345920 mem_used 1048576\nprocess 0 " + std::to_string(pid) + " 1048576\n");
  sleep_s(1);
  double busy0 = value_of(http_get(port, "/metrics").body, "gpuscope_starvation_cpu_seconds_total", me);
  sleep_s(1.5);
  double busy1 = value_of(http_get(port, "/metrics").body, "gpuscope_starvation_cpu_seconds_total", me);
  EXPECT_EQ(busy0, busy1);

  // The process ends: its threads' series go; the comm's total keeps their time.
  fx.signal(SIGKILL);
  fx.wait(10);
  for (int i = 0; i < 200; i++) {
    m = http_get(port, "/metrics").body;
    if (samples(m, "gpuscope_starvation_cpu_seconds_total").empty()) break;
    sleep_s(0.05);
  }
  EXPECT_TRUE(samples(m, "gpuscope_starvation_cpu_seconds_total").empty()) << m;
  EXPECT_EQ(sum_of(m, "gpuscope_comm_starvation_cpu_seconds_total", {{"comm", "starv_fixture"}}), busy1);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
  // The agent's bridge leaves its pins, as `gpuscope bridge` does: their data goes stale.
  EXPECT_EQ(d.entries(), 4);
}

// Starvation's sched_switch hook is on only while a listed process's GPU nears idle (the default
// 1 s): off while it is busy, on within half of that once it idles, and the burning thread's
// starving time is then what a hook kept on counts (from 1 s after the GPU's last busy tick, at
// the scheduler's rate); off again once the GPU is busy.
TEST(Agent, StarvationHooksContextSwitchesOnlyNearIdle) {
  PinDir d;
  StandinFile f;
  Process fx({STARV_FIXTURE, "burn"});
  ASSERT_TRUE(fx.wait_for("ready pid=", 10)) << fx.err();
  auto num = [&](const std::string& key) {
    auto at = fx.out().find(" " + key + "=");
    return at == std::string::npos ? -1 : std::stoi(fx.out().substr(at + key.size() + 2));
  };
  int pid = num("pid"), burner = num("burner");
  ASSERT_GT(burner, 0) << fx.out();
  auto standin = [&](int util) {
    f.write(fmt::format("device 0 util {} mem_total 85899345920 mem_used 1048576\nprocess 0 {} 1048576\n", util, pid));
  };
  standin(100);
  Process g({gpuscope_bin(), "agent", "--json", "--listen", "127.0.0.1:0", "-p", std::to_string(pid), "--collectors",
             "starvation,bridge", "--bridge-pin-dir", d.path, "--nvml", NVML_STANDIN, "--interval", "0.1",
             "--max-cpu-percent", "0"},
            {f.env()});
  ASSERT_TRUE(g.wait_for("\"type\":\"agent\"", 30)) << g.err();
  int port = parse_lines(g.out()).at(0).at("port").get<int>();
  std::map<std::string, std::string> me = {{"pid", std::to_string(pid)}, {"tid", std::to_string(burner)}};
  auto scrape = [&] { return http_get(port, "/metrics").body; };
  // The starving time as a refresh has just published it, and the scheduler's count read right
  // after: a value published a while before the count would be older than it (a slow refresh).
  auto starving_now = [&] {
    double was = value_of(scrape(), "gpuscope_starvation_cpu_seconds_total", me);
    for (int i = 0; i < 300; i++) {
      double v = value_of(scrape(), "gpuscope_starvation_cpu_seconds_total", me);
      if (v != was) return std::pair{v, schedstat_ns(pid, burner)};
      sleep_s(0.01);
    }
    ADD_FAILURE() << "no new starving time in 3 s";
    return std::pair{was, schedstat_ns(pid, burner)};
  };
  auto hook_becomes = [&](double want, double within_s) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(within_s);
    std::string m;
    do {
      m = scrape();
      if (value_of(m, "gpuscope_starvation_switch_hook", {}) == want) return m;
      sleep_s(0.05);
    } while (std::chrono::steady_clock::now() < until);
    ADD_FAILURE() << "hook not " << want << " within " << within_s << " s: " << m << g.err();
    return m;
  };

  // Busy: attached at start (to refuse a kernel without it), off within a second and a half.
  std::string m = hook_becomes(0, 3);
  EXPECT_EQ(value_of(m, "gpuscope_starvation_switch_hook_attaches_total", {}), 1) << m;
  sleep_s(1.5);
  m = scrape();
  EXPECT_EQ(value_of(m, "gpuscope_starvation_switch_hook", {}), 0) << m;
  EXPECT_TRUE(where(samples(m, "gpuscope_starvation_cpu_seconds_total"), me).empty()) << m;

  // Idle: on before the GPU has been idle the 1 s the verdict needs.
  auto idle_from = std::chrono::steady_clock::now();
  uint64_t s_idle = schedstat_ns(pid, burner);
  standin(0);
  m = hook_becomes(1, 1.0);
  double on_after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - idle_from).count();
  EXPECT_LT(on_after_s, 1.0);
  EXPECT_EQ(value_of(m, "gpuscope_starvation_switch_hook_attaches_total", {}), 2) << m;
  EXPECT_TRUE(where(samples(m, "gpuscope_starvation_cpu_seconds_total"), me).empty()) << "not idle 1 s yet: " << m;

  // Counted from 1 s after the last busy tick (at most a poll before the idle one): the burner's
  // CPU time since the GPU idled less at most the first second's, nothing lost to the hook's
  // late start; then at the scheduler's rate.
  sleep_s(2.5);
  auto [v0, s0] = starving_now();
  double cpu_since_idle = (s0 - s_idle) / 1e9;
  EXPECT_GT(v0, cpu_since_idle - 1.0 - 0.15) << cpu_since_idle;
  EXPECT_LT(v0, cpu_since_idle - 0.5) << cpu_since_idle;
  sleep_s(2);
  auto [v1, s1] = starving_now();
  m = scrape();
  EXPECT_NEAR((v1 - v0) / ((s1 - s0) / 1e9), 1.0, 0.15)
      << v0 << " " << v1 << "; attached " << value_of(m, "gpuscope_starvation_switch_hook_attaches_total", {})
      << " times; bridge age " << value_of(m, "gpuscope_bridge_update_age_seconds", {});

  // Busy again: nothing more counted, and the hook goes.
  standin(100);
  m = hook_becomes(0, 3);
  double busy0 = value_of(m, "gpuscope_starvation_cpu_seconds_total", me);
  sleep_s(1);
  EXPECT_EQ(value_of(scrape(), "gpuscope_starvation_cpu_seconds_total", me), busy0);
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(30), 0) << g.err();
}

// By default the latency collector leaves out what a framework calls around every operation
// (cudaGetDevice) and the runtime's launches (timed on the driver layer, where each arrives):
// those APIs are not even probed. --latency-apis puts them back, every call timed.
TEST(Agent, LatencyProbesOnlyWhatItReports) {
  AgWorkload w;
  {
    UngovernedAgent a(w, {"--collectors", "latency"});
    Process p({w.path(), "torch_steps", "200", "2", "1", "1", "20", "1000"});
    ASSERT_EQ(p.wait(30), 0) << p.err();
    sleep_s(0.6);  // a refresh after the last call
    std::string m = a.until([&](const std::string& t) {
      return value_of(t, "gpuscope_api_probe_hits_total", {{"api", "cuLaunchKernelEx"}, {"outcome", "unsampled"}}) > 0;
    });
    ASSERT_NE(m, "") << a.metrics();
    EXPECT_TRUE(where(samples(m, "gpuscope_api_probe_hits_total"), {{"api", "cudaGetDevice"}}).empty()) << m;
    EXPECT_TRUE(where(samples(m, "gpuscope_api_probe_hits_total"), {{"api", "cudaLaunchKernel"}}).empty()) << m;
    EXPECT_TRUE(where(samples(m, "gpuscope_api_calls_total"), {{"api", "cudaGetDevice"}}).empty()) << m;
    // Launches are counted exactly at entry whether or not they were timed.
    double entries = 0;
    for (auto& s : where(samples(m, "gpuscope_api_probe_hits_total"), {{"api", "cuLaunchKernel"}})) entries += s.value;
    double ex = 0;
    for (auto& s : where(samples(m, "gpuscope_api_probe_hits_total"), {{"api", "cuLaunchKernelEx"}})) ex += s.value;
    EXPECT_GT(entries, 0);
    EXPECT_EQ(entries, 3 * ex) << "per step 2 runtime launches (each reaching cuLaunchKernel), 1 cuLaunchKernel, 1 Ex";
    EXPECT_EQ(value_of(m, "gpuscope_api_probe_hits_total", {{"api", "cudaDeviceSynchronize"}, {"outcome", "timed"}}),
              value_of(m, "gpuscope_api_calls_total", {{"api", "cudaDeviceSynchronize"}, {"result", "cudaSuccess"}}));
    EXPECT_EQ(a.stop(), 0);
  }
  {
    UngovernedAgent a(w, {"--collectors", "latency", "--latency-apis", "cudaGetDevice,cudaLaunchKernel",
                          "--latency-sample-launches", "1"});
    Process p({w.path(), "torch_steps", "100", "2", "0", "0", "6", "1000"});
    ASSERT_EQ(p.wait(30), 0) << p.err();
    sleep_s(0.6);
    std::string m = a.until([&](const std::string& t) {
      return value_of(t, "gpuscope_api_probe_hits_total", {{"api", "cudaLaunchKernel"}, {"outcome", "timed"}}) > 0;
    });
    ASSERT_NE(m, "") << a.metrics();
    double launches = value_of(m, "gpuscope_api_calls_total", {{"api", "cudaLaunchKernel"}, {"result", "cudaSuccess"}});
    EXPECT_EQ(value_of(m, "gpuscope_api_calls_total", {{"api", "cudaGetDevice"}, {"result", "cudaSuccess"}}),
              3 * launches)
        << "6 queries a step over 2 launches";
    EXPECT_EQ(value_of(m, "gpuscope_api_probe_hits_total", {{"api", "cudaLaunchKernel"}, {"outcome", "unsampled"}}), 0);
    EXPECT_EQ(value_of(m, "gpuscope_api_launch_sample", {}), 1);
    EXPECT_TRUE(where(samples(m, "gpuscope_api_probe_hits_total"), {{"api", "cuLaunchKernel"}}).empty()) << m;
    EXPECT_EQ(a.stop(), 0);
  }
}

namespace {
// Runs the stand-in's PyTorch-shaped loop (standin_app torch_steps ARGS) to its end; the steps
// it made, or -1 (a failure added) when it did not run.
double run_torch_steps(const AgWorkload& w, const std::vector<std::string>& args) {
  std::vector<std::string> argv{w.path(), "torch_steps"};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv);
  if (p.wait(30) != 0) {
    ADD_FAILURE() << p.err();
    return -1;
  }
  std::smatch sm;
  const std::string out = p.out();
  if (!std::regex_search(out, sm, std::regex("calls=(\\d+)"))) {
    ADD_FAILURE() << out;
    return -1;
  }
  return std::stod(sm[1]);
}
}  // namespace

// With kernels running too, its launch programs time the driver's launches for latency (one
// program per launch): the same series come out, counted the same way. Without uprobe sessions
// each collector keeps its own programs, and latency times every launch.
TEST(Agent, LaunchesTimedThroughKernelsProgramsReportAsLatencyAlone) {
  AgWorkload w;
  for (bool sessions : {true, false}) {
    SCOPED_TRACE(sessions ? "uprobe sessions" : "entry and return probes");
    std::vector<std::string> env;
    if (!sessions) env.push_back("GPUSCOPE_UPROBE_SESSION=0");
    // One in 16 rather than the default 64: a few hundred steps then time some of each kind.
    Agent a(w, {"--max-cpu-percent", "0", "--collectors", "kernels,latency", "--latency-sample-launches", "16"}, env);
    const double steps = run_torch_steps(w, {"200", "2", "1", "1", "20", "1000"});
    ASSERT_GT(steps, 0);
    std::string m = a.until([&](const std::string& t) {
      double n = 0;
      for (auto& s : where(samples(t, "gpuscope_api_probe_hits_total"), {{"api", "cuLaunchKernelEx"}})) n += s.value;
      // The last step's synchronize comes after its launches.
      return n >= steps && value_of(t, "gpuscope_api_probe_hits_total",
                                    {{"api", "cudaDeviceSynchronize"}, {"outcome", "timed"}}) >= std::floor(steps / 10);
    });
    ASSERT_NE(m, "") << a.metrics();
    auto hits = [&](const std::string& api, const std::string& outcome) {
      return value_of(m, "gpuscope_api_probe_hits_total", {{"api", api}, {"outcome", outcome}});
    };
    for (const char* api : {"cuLaunchKernel", "cuLaunchKernelEx"}) {
      SCOPED_TRACE(api);
      const double per_step = std::string(api) == "cuLaunchKernel" ? 3 : 1;
      EXPECT_EQ(hits(api, "nested"), 0);
      EXPECT_EQ(hits(api, "timed") + hits(api, "unsampled"), per_step * steps);
      EXPECT_GT(hits(api, "timed"), 0);
      if (sessions)
        EXPECT_GT(hits(api, "unsampled"), hits(api, "timed")) << "one launch in 16 timed";
      else
        EXPECT_EQ(hits(api, "unsampled"), 0) << "every launch timed";
      double calls = 0;
      for (auto& s : where(samples(m, "gpuscope_api_calls_total"), {{"api", api}})) calls += s.value;
      EXPECT_EQ(calls, hits(api, "timed")) << m;
      EXPECT_EQ(value_of(m, "gpuscope_api_duration_seconds_count", {{"api", api}, {"layer", "driver"}}), calls);
    }
    EXPECT_EQ(value_of(m, "gpuscope_api_launch_sample", {}), sessions ? 16 : 1);
    EXPECT_EQ(hits("cudaDeviceSynchronize", "timed"), std::floor(steps / 10));
    EXPECT_EQ(a.stop(), 0);
    const std::string said = a.proc().out() + a.proc().err();  // the start line names the collectors
    EXPECT_EQ(said.find("latency (launches timed by kernels' programs)") != std::string::npos, sessions) << said;
  }
}

namespace {
// kernel.bpf_stats_enabled, given back as it was.
struct StatsKnob {
  static constexpr char kPath[] = "/proc/sys/kernel/bpf_stats_enabled";
  int before = std::stoi(read_all(kPath));
  ~StatsKnob() { set(before); }
  void set(int v) { std::ofstream(kPath) << v << "\n"; }
  static std::string read_all(const char* p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};
}  // namespace

// With kernel.bpf_stats_enabled set, the agent counts its own BPF programs' runs and time: what
// each collector costs inside the traced process, by program. Here (no NVIDIA driver: launches
// counted at both layers) a step of 2 runtime launches (each reaching cuLaunchKernel), 1
// cuLaunchKernel and 1 cuLaunchKernelEx runs each program a known number of times.
TEST(Agent, ReportsItsBpfProgramsWhileStatsAreOn) {
  AgWorkload w;
  UngovernedAgent a(w, {"--collectors", "kernels,latency"});
  StatsKnob knob;
  if (knob.before == 0) {
    EXPECT_TRUE(samples(a.metrics(), "gpuscope_bpf_program_runs_total").empty()) << "stats off: nothing counted";
  }
  knob.set(1);
  {
    const double steps = run_torch_steps(w, {"200", "2", "1", "1", "0", "1000", "2"});
    ASSERT_GT(steps, 0);
    std::string m = a.until([&](const std::string& t) {
      // Programs that run once a launch: the session programs' runs include sampled returns,
      // so a refresh before the last step can read `steps` of them already.
      return value_of(t, "gpuscope_bpf_program_runs_total", {{"program", "gs_k_cuda_launch"}}) >= 2 * steps &&
             value_of(t, "gpuscope_bpf_program_runs_total", {{"program", "gs_k_launch_exit"}}) >= 2 * steps;
    });
    ASSERT_NE(m, "") << a.metrics();
    auto runs = [&](const std::string& prog) {
      return value_of(m, "gpuscope_bpf_program_runs_total", {{"program", prog}});
    };
    EXPECT_EQ(runs("gs_k_cuda_launch"), 2 * steps);
    EXPECT_EQ(runs("gs_k_launch_exit"), 2 * steps);
    // The driver's launches run one session program each, serving kernels and latency: at
    // entry, and again at the return of those latency times (1 in 64).
    EXPECT_EQ(runs("gs_k_cu_launch"), -1) << "not loaded: the timed session program replaces it";
    EXPECT_GE(runs("gs_k_cu_launch_timed"), 3 * steps);
    EXPECT_LT(runs("gs_k_cu_launch_timed"), 3 * steps * 1.25);
    EXPECT_GE(runs("gs_k_cu_launch_ex_timed"), steps) << "a name longer than the kernel keeps, whole from BTF";
    EXPECT_LT(runs("gs_k_cu_launch_ex_timed"), steps * 1.4);
    // Two naming calls a step asking the same two names: each name's first call runs the
    // session program at entry and return, every later one at entry alone.
    EXPECT_EQ(runs("gs_k_name_session"), 2 * steps + 2);
    EXPECT_EQ(runs("gs_k_name_exit"), -1) << "loaded, though the session program replaces it";
    // Latency's own session runs only at what it times beside launches: cudaDeviceSynchronize
    // (every 10 steps) and the driver's cuCtxSynchronize within it, at entry and return.
    EXPECT_EQ(runs("gs_lat_session"), 4 * std::floor(steps / 10));
    EXPECT_GT(value_of(m, "gpuscope_bpf_program_run_seconds_total", {{"program", "gs_k_cuda_launch"}}), 0);
  }
  EXPECT_EQ(a.stop(), 0);
}

// One rule for every per-process series of a process that has exited (kernels, memory, ioctl
// here; GPU time and starvation keep it too): the first scrape after its final values were
// published has them, the next has none, and its counts live on in the comm_* totals.
TEST(Agent, ExitedProcessSeriesAreScrapedOnceThenGo) {
  AgWorkload w;
  std::string node = w.dir() + "/nvidia7";
  ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0600, makedev(195, 7)), 0) << strerror(errno);
  UngovernedAgent a(w, {"--collectors", "kernels,memleak,ioctl"});
  // 5 launches of kern_a and 3 of kern_b through the driver; 2 blocks allocated and freed.
  Process drv({w.path(), "driver", "2"});
  pid_t dp = ready_pid(drv);
  ASSERT_EQ(drv.wait(20), 0) << drv.err();
  IoctlChild io(node, w.comm(), 5, false);
  io.finish();
  sleep_s(1.5);  // several refreshes (every 0.2 s) and no scrape: the final values wait for one
  const std::string d = std::to_string(dp), i = std::to_string(io.pid);
  std::string first = a.metrics();
  EXPECT_EQ(value_of(first, "gpuscope_kernel_launches_total", {{"pid", d}, {"kernel", "kern_a"}}), 5) << first;
  EXPECT_EQ(value_of(first, "gpuscope_kernel_launches_total", {{"pid", d}, {"kernel", "kern_b"}}), 3);
  EXPECT_EQ(value_of(first, "gpuscope_memory_allocations_total", {{"pid", d}, {"result", "ok"}}), 2);
  EXPECT_EQ(value_of(first, "gpuscope_process_ioctl_calls_total", {{"pid", i}}), 5);
  EXPECT_EQ(value_of(first, "gpuscope_exported_processes", {{"state", "exited"}}), 2);
  sleep_s(0.6);
  std::string second = a.metrics();
  for (const char* name : {"gpuscope_kernel_launches_total", "gpuscope_memory_allocations_total",
                           "gpuscope_memory_outstanding_bytes", "gpuscope_process_ioctl_calls_total"})
    for (const std::string& pid : {d, i}) EXPECT_TRUE(where(samples(second, name), {{"pid", pid}}).empty()) << name;
  EXPECT_EQ(value_of(second, "gpuscope_exported_processes", {{"state", "exited"}}), 0);
  EXPECT_EQ(sum_of(second, "gpuscope_comm_kernel_launches_total", {{"comm", w.comm()}}), 8);
  EXPECT_EQ(value_of(second, "gpuscope_ioctl_calls_total", {{"request", "NV_ESC_RM_CONTROL"}}), 5);
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// Per-process GPU utilization from the bridge (NVML's per-process samples, the highest of a
// tick): series with the process's labels and its device, and /api/processes, for processes in
// scope only (-c); gone with the process.
TEST(Agent, ProcessGpuUtilizationFromTheBridge) {
  AgWorkload w;
  PinDir d;
  StandinFile f;
  Process live({w.path(), "--wait-usr1", "1", "prestart", "1"});
  const pid_t lp = ready_pid(live), other = getpid();
  live.signal(SIGUSR1);  // it allocates, then waits for the next
  ASSERT_TRUE(live.wait_for("allocated")) << live.err();
  // Each bridge tick publishes the samples newer than its last: they are written anew while waiting.
  auto nvml_now = [&] {
    const uint64_t now_us = gpuscope::realtime_ns() / 1000;
    f.write(
        fmt::format("device 0 util 37 memutil 12 mem_total 85899345920 mem_free 81067507712 mem_used 4294967296 "
                    "mem_reserved 536870912 temp 55 power 123456 smclk 1410 memclk 2619 throttle 0 pcie_tx 1 pcie_rx 2 "
                    "enc 0 dec 0 fan 40 compute_mode 0 ecc_corr 0 ecc_uncorr 0\n"
                    "process 0 {} 1048576\nprocess 0 {} 2048\n"
                    "putil 0 {} {} 30 5 0 0\nputil 0 {} {} 42 7 0 0\nputil 0 {} {} 50 50 0 0\n",
                    lp, other, lp, now_us, lp, now_us + 1, other, now_us));
  };
  nvml_now();
  auto bridge = std::make_unique<Process>(
      std::vector<std::string>{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path},
      std::vector<std::string>{f.env()});
  ASSERT_TRUE(bridge->wait_for("bridge publishing", 10, true)) << bridge->err();
  UngovernedAgent a(w, {"--collectors", "bridge", "--bridge-pin-dir", d.path, "--nvml", NVML_STANDIN});
  const std::string lps = std::to_string(lp);
  std::string m = a.until([&](const std::string& t) {
    nvml_now();
    return value_of(t, "gpuscope_process_gpu_utilization_ratio", {{"pid", lps}}) == 0.42;
  });
  ASSERT_NE(m, "") << a.metrics();
  const std::map<std::string, std::string> want{{"pid", lps}, {"comm", w.comm()}, {"gpu", "0"}};
  EXPECT_EQ(value_of(m, "gpuscope_process_gpu_utilization_ratio", want), 0.42);
  EXPECT_EQ(value_of(m, "gpuscope_process_gpu_memory_utilization_ratio", want), 0.07);
  EXPECT_EQ(value_of(m, "gpuscope_process_gpu_memory_used_bytes", want), 1048576);
  EXPECT_TRUE(where(samples(m, "gpuscope_process_gpu_utilization_ratio"), {{"pid", std::to_string(other)}}).empty())
      << "another name: out of scope";
  json procs, mine;
  for (int i = 0; i < 100 && (mine.is_null() || mine["gpus"][0]["sm_utilization_ratio"] != 0.42); i++) {
    nvml_now();
    sleep_s(0.1);
    procs = a.api("/api/processes");
    for (auto& p : procs["processes"])
      if (p["pid"] == lp) mine = p;
  }
  ASSERT_FALSE(mine.is_null()) << procs.dump();
  ASSERT_EQ(mine["gpus"].size(), 1u) << mine.dump();
  EXPECT_EQ(mine["gpus"][0]["gpu"], 0);
  EXPECT_EQ(mine["gpus"][0]["sm_utilization_ratio"], 0.42);
  EXPECT_EQ(mine["gpus"][0]["memory_used_bytes"], 1048576);
  EXPECT_EQ(mine["gpus"][0]["compute"], true);
  EXPECT_EQ(mine["gpus"][0]["graphics"], false);
  live.signal(SIGUSR1);
  EXPECT_EQ(live.wait(20), 0) << live.err();
  // NVML goes on listing the process for a while after its exit (the H200's driver does for
  // a second or two): its series still go, on the agent's rule.
  EXPECT_NE(a.until([&](const std::string& t) {
    nvml_now();
    return where(samples(t, "gpuscope_process_gpu_utilization_ratio"), {{"pid", lps}}).empty();
  }),
            "");
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
  bridge->signal(SIGTERM);
  EXPECT_EQ(bridge->wait(30), 0);
}

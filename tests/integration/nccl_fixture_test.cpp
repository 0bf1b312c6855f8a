// The NCCL stand-in (tests/fixtures/nccl) on its own, before anything probes it: the real
// library's exported names, aliases and error strings; 4 rank processes whose collectives wait for
// a straggler; a split into two communicators; a rank that exits early; nccl_rank's bad input.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace gstest;

namespace {

const std::string kLib = std::string(NCCL_STANDIN_LIB_DIR) + "/libnccl.so.2";

// A fresh directory for one communicator's id file.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/gs-nccl-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string id() const { return path + "/id"; }
};

struct Op {
  long calls = -1;
  long long bytes = -1, blocked_us = -1;
};

// What one nccl_rank printed: its communicator and per-function lines, and the done line.
struct RankOut {
  int rank = -1, nranks = -1, device = -1;
  std::map<std::string, Op> ops;
  long calls = -1;
  long long bytes = -1, blocked_us = -1, wall_us = -1;
};

RankOut parse(const std::string& out) {
  RankOut r;
  std::smatch m;
  std::regex comm(R"(comm rank=(\d+) nranks=(\d+) device=(\d+)\n)");
  if (std::regex_search(out, m, comm)) r.rank = std::stoi(m[1]), r.nranks = std::stoi(m[2]), r.device = std::stoi(m[3]);
  std::regex op(R"(op=(\w+) calls=(\d+) bytes=(\d+) blocked_us=(\d+)\n)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), op); it != std::sregex_iterator(); ++it)
    r.ops[(*it)[1]] = {std::stol((*it)[2]), std::stoll((*it)[3]), std::stoll((*it)[4])};
  std::regex done(R"(done calls=(\d+) bytes=(\d+) blocked_us=(\d+) wall_us=(\d+)\n)");
  if (std::regex_search(out, m, done))
    r.calls = std::stol(m[1]), r.bytes = std::stoll(m[2]), r.blocked_us = std::stoll(m[3]),
    r.wall_us = std::stoll(m[4]);
  return r;
}

// Ranks 1.. start first and wait for rank 0's id file; `extra` adds arguments per rank.
std::vector<std::unique_ptr<Process>> start_ranks(int n, const TempDir& d,
                                                  const std::function<std::vector<std::string>(int)>& extra) {
  std::vector<std::unique_ptr<Process>> p(n);
  for (int r = n - 1; r >= 0; r--) {
    std::vector<std::string> argv{NCCL_RANK,   "--ranks", std::to_string(n), "--rank", std::to_string(r),
                                  "--id-file", d.id()};
    for (auto& a : extra(r)) argv.push_back(a);
    p[r] = std::make_unique<Process>(argv);
    EXPECT_EQ(ready_pid(*p[r]), p[r]->pid());
  }
  return p;
}

void expect_near(long long got_us, double want_ms, double tol, const std::string& what) {
  EXPECT_NEAR(got_us / 1000.0, want_ms, want_ms * tol) << what;
}

TEST(NcclFixture, ExportsTheRealNamesAliasesAndErrorStrings) {
  void* h = dlopen(kLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  // The real libnccl.so.2 defines pnccl* and makes nccl* weak aliases of them.
  for (const char* name :
       {"GetVersion",     "GetUniqueId",  "CommInitRank",  "CommInitRankConfig", "CommInitRankScalable",
        "CommInitAll",    "CommSplit",    "CommShrink",    "CommFinalize",       "CommDestroy",
        "CommAbort",      "CommCount",    "CommCuDevice",  "CommUserRank",       "CommGetAsyncError",
        "GetErrorString", "GetLastError", "AllReduce",     "Broadcast",          "Bcast",
        "Reduce",         "AllGather",    "ReduceScatter", "AlltoAll",           "Gather",
        "Scatter",        "Send",         "Recv",          "GroupStart",         "GroupEnd"}) {
    void* plain = dlsym(h, (std::string("nccl") + name).c_str());
    void* p = dlsym(h, (std::string("pnccl") + name).c_str());
    EXPECT_NE(plain, nullptr) << name;
    EXPECT_EQ(plain, p) << name;
  }
  auto version = reinterpret_cast<int (*)(int*)>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  EXPECT_EQ(version(&v), 0);
  EXPECT_EQ(v, 22809);  // nccl.h's NCCL_VERSION_CODE of the toolkit it is built against
  auto str = reinterpret_cast<const char* (*)(int)>(dlsym(h, "ncclGetErrorString"));
  const std::vector<std::string> want{"no error",
                                      "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                                      "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                                      "internal error - please report this issue to the NCCL developers",
                                      "invalid argument (run with NCCL_DEBUG=WARN for details)",
                                      "invalid usage (run with NCCL_DEBUG=WARN for details)",
                                      "remote process exited or there was a network error",
                                      "NCCL operation in progress",
                                      "unknown result code"};
  for (int i = 0; i < (int)want.size(); i++) EXPECT_EQ(str(i), want[i]) << i;
  dlclose(h);
}

// Rank 2 sleeps 50 ms before each of the 5 steps of an iteration. Rank 0 waits for it in every
// collective: one delay each, two in the all-reduce after the first iteration (rank 2's sleep
// before the send/recv ring, where rank 0's peers are 1 and 3, falls there).
TEST(NcclFixture, FourRanksWaitForTheStraggler) {
  TempDir d;
  const int iters = 4, delay = 50;
  auto p = start_ranks(4, d, [&](int r) {
    return std::vector<std::string>{"--iters", std::to_string(iters), "--bytes",
                                    "4096",    "--delay-ms",          r == 2 ? std::to_string(delay) : "0"};
  });
  // The rank maps the stand-in by its SONAME, where a uprobe on libnccl.so.2 will find it.
  std::ifstream maps("/proc/" + std::to_string(p[1]->pid()) + "/maps");
  std::string text((std::istreambuf_iterator<char>(maps)), {});
  EXPECT_NE(text.find(kLib), std::string::npos) << text;
  for (int r = 0; r < 4; r++) ASSERT_EQ(p[r]->wait(20), 0) << r << ": " << p[r]->err();
  for (int r = 0; r < 4; r++) {
    RankOut o = parse(p[r]->out());
    EXPECT_EQ(o.rank, r);
    EXPECT_EQ(o.nranks, 4);
    EXPECT_EQ(o.device, r);
    const std::map<std::string, long long> bytes{
        {"ncclAllReduce", 4096}, {"ncclBroadcast", 4096}, {"ncclAllGather", 1024}, {"ncclReduceScatter", 1024},
        {"ncclGroupStart", 0},   {"ncclSend", 4096},      {"ncclRecv", 4096},      {"ncclGroupEnd", 0}};
    ASSERT_EQ(o.ops.size(), bytes.size()) << p[r]->out();
    for (auto& [name, b] : bytes) {
      EXPECT_EQ(o.ops[name].calls, iters) << r << " " << name;
      EXPECT_EQ(o.ops[name].bytes, b * iters) << r << " " << name;
    }
    EXPECT_EQ(o.calls, 6 * iters);
    EXPECT_EQ(o.bytes, (4096 * 4 + 1024 * 2) * iters);
    // Every rank's iterations take as long as the straggler's sleeps.
    expect_near(o.wall_us, 5.0 * iters * delay, 0.2, "wall of rank " + std::to_string(r));
  }
  RankOut r0 = parse(p[0]->out()), r2 = parse(p[2]->out());
  expect_near(r0.ops["ncclAllReduce"].blocked_us, (2 * iters - 1) * delay, 0.2, "rank 0 all-reduce");
  for (const char* op : {"ncclBroadcast", "ncclAllGather", "ncclReduceScatter"})
    expect_near(r0.ops[op].blocked_us, iters * delay, 0.2, std::string("rank 0 ") + op);
  expect_near(r0.blocked_us, (5 * iters - 1) * delay, 0.2, "rank 0 in all calls");
  // The straggler itself never waits long.
  EXPECT_LT(r2.blocked_us, 0.1 * 5 * iters * delay * 1000) << p[2]->out();
}

// Colors 0 and 1 make two communicators of 2 ranks each, ordered by key (the old rank): only the
// straggler's partner (rank 0) waits for it, in every step.
TEST(NcclFixture, SplitMakesTwoCommunicators) {
  TempDir d;
  const int iters = 3, delay = 40;
  auto p = start_ranks(4, d, [&](int r) {
    return std::vector<std::string>{
        "--iters", std::to_string(iters), "--bytes",    "4096",
        "--split", std::to_string(r % 2), "--delay-ms", r == 2 ? std::to_string(delay) : "0"};
  });
  for (int r = 0; r < 4; r++) ASSERT_EQ(p[r]->wait(20), 0) << r << ": " << p[r]->err();
  for (int r = 0; r < 4; r++) {
    RankOut o = parse(p[r]->out());
    EXPECT_EQ(o.rank, r / 2);
    EXPECT_EQ(o.nranks, 2);
    EXPECT_EQ(o.device, r);                                      // the parent's device
    EXPECT_EQ(o.ops["ncclAllGather"].bytes, 2048 * iters) << r;  // 4096 bytes over 2 ranks
    EXPECT_EQ(o.calls, 6 * iters);
  }
  expect_near(parse(p[0]->out()).blocked_us, 5.0 * iters * delay, 0.2, "rank 0 waits for rank 2");
  for (int r : {1, 3})
    EXPECT_LT(parse(p[r]->out()).blocked_us, 0.1 * 5 * iters * delay * 1000) << r << ": " << p[r]->out();
}

// Rank 3 leaves after 2 iterations without destroying its communicator: the others' next
// collective returns ncclRemoteError at once, naming it, and they exit 1.
TEST(NcclFixture, EarlyExitFailsTheOthersPromptly) {
  TempDir d;
  auto p = start_ranks(4, d, [&](int r) {
    std::vector<std::string> a{"--iters", "1000"};
    if (r == 3) a.insert(a.end(), {"--exit-after", "2"});
    return a;
  });
  const pid_t pid3 = p[3]->pid();
  ASSERT_EQ(p[3]->wait(20), 0) << p[3]->err();
  EXPECT_NE(p[3]->out().find("exit-early after 2 iterations\n"), std::string::npos) << p[3]->out();
  auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> comms;
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(p[r]->wait(10), 1) << r;
    // Collectives 1-8 were rank 3's two iterations; 9 is the third all-reduce.
    std::smatch m;
    std::string err = p[r]->err();
    EXPECT_TRUE(std::regex_match(
        err, m,
        std::regex("nccl_rank: rank " + std::to_string(r) +
                   ": ncclAllReduce: remote process exited or there was a network error; rank 3 \\(pid " +
                   std::to_string(pid3) +
                   "\\) exited before it entered collective 9 of communicator (gsnccl-[0-9a-f]{32})\n")))
        << err;
    if (m.size() == 2) comms.insert(m[1]);
    EXPECT_EQ(p[r]->out().find("done"), std::string::npos);
  }
  EXPECT_EQ(comms.size(), 1u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(NcclFixture, RankProgramRefusesBadInput) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--ranks", "0", "--rank", "0", "--id-file", "x"}, "nccl_rank: --ranks: '0' is not a valid number here\n"},
      {{"--ranks", "2", "--rank", "2", "--id-file", "x"}, "nccl_rank: --rank must be below --ranks\n"},
      {{"--ranks", "2", "--rank", "0"}, "nccl_rank: --ranks, --rank and --id-file are required\n"},
      {{"--ranks", "2", "--rank", "0", "--id-file", "x", "--bytes", "12"},
       "nccl_rank: --bytes must be a multiple of 4 x --ranks\n"},
      {{"--ranks", "2", "--rank", "0", "--id-file", "x", "--nope", "1"}, "nccl_rank: unknown argument '--nope'\n"},
  };
  for (auto& [args, err] : cases) {
    std::vector<std::string> argv{NCCL_RANK};
    argv.insert(argv.end(), args.begin(), args.end());
    Result r = run(argv, {}, 10);
    EXPECT_EQ(r.exit_code, 2) << err;
    EXPECT_EQ(r.err, err);
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace

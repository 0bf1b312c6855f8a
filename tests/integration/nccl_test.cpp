// gpuscope nccl against the NCCL stand-in (tests/fixtures/nccl): 4 rank processes of one
// communicator with rank 2 late to every collective; a split into two communicators; a rank that
// exits early; bad input.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "usage_error.h"

using namespace gstest;

namespace {

const std::string kLib = std::string(NCCL_STANDIN_LIB_DIR) + "/libnccl.so.2";

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/gs-nccl-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string id() const { return path + "/id"; }
};

using Ranks = std::vector<std::unique_ptr<Process>>;

// Rank `r` of n, waiting for rank 0's id file.
std::unique_ptr<Process> start_rank(int n, int r, const TempDir& d, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{NCCL_RANK,   "--ranks", std::to_string(n), "--rank", std::to_string(r),
                                "--id-file", d.id()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Process>(argv);
  EXPECT_EQ(ready_pid(*p), p->pid());
  return p;
}

// gpuscope nccl --json, ready to see calls.
std::unique_ptr<Process> start_gpuscope(std::vector<std::string> args) {
  std::vector<std::string> argv{gpuscope_bin(), "nccl", "--json", "--interval", "0.5"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto g = std::make_unique<Process>(argv);
  EXPECT_TRUE(g->wait_for("Ctrl-C to end", 30, true)) << g->err();
  return g;
}

// Stops it and returns its lines about the given pids (the summary kept too).
std::vector<json> stop(Process& g, const std::set<pid_t>& pids) {
  usleep(1500 * 1000);  // the last calls' interval, and the next one (nothing stale in it)
  g.signal(SIGINT);
  EXPECT_EQ(g.wait(20), 0) << g.err();
  std::vector<json> out;
  for (auto& j : parse_lines(g.out()))
    if (!j.contains("pid") || pids.count(j["pid"].get<pid_t>())) out.push_back(j);
  return out;
}

std::vector<json> of_type(const std::vector<json>& lines, const std::string& type) {
  std::vector<json> out;
  for (auto& j : lines)
    if (j["type"] == type) out.push_back(j);
  return out;
}

struct OpTotal {
  uint64_t calls = 0, bytes = 0, grouped = 0;
  std::map<std::string, uint64_t> errors;
};
// Summed over the intervals, by (pid, op).
std::map<std::pair<pid_t, std::string>, OpTotal> totals(const std::vector<json>& lines) {
  std::map<std::pair<pid_t, std::string>, OpTotal> t;
  for (auto& j : of_type(lines, "collective")) {
    OpTotal& o = t[{j["pid"].get<pid_t>(), j["op"].get<std::string>()}];
    o.calls += j["calls"].get<uint64_t>();
    o.bytes += j["bytes"].get<uint64_t>();
    o.grouped += j["grouped"].get<uint64_t>();
    for (auto& [name, n] : j["errors"].items()) o.errors[name] += n.get<uint64_t>();
  }
  return t;
}

struct Lag {
  uint64_t matched = 0, last = 0;
  std::vector<json> lines;
};
std::map<pid_t, Lag> lags(const std::vector<json>& lines) {
  std::map<pid_t, Lag> out;
  for (auto& j : of_type(lines, "straggler")) {
    Lag& l = out[j["pid"].get<pid_t>()];
    l.matched += j["matched"].get<uint64_t>();
    l.last += j["last_arrivals"].get<uint64_t>();
    l.lines.push_back(j);
  }
  return out;
}

// Nothing about a communicator after the interval that said it ended.
void expect_nothing_after_end(const std::vector<json>& lines) {
  std::map<std::string, uint64_t> ended;  // handle -> ts_ns of its comm_end
  for (auto& j : of_type(lines, "comm_end")) ended[j["handle"]] = j["ts_ns"].get<uint64_t>();
  for (auto& j : lines) {
    if (!j.contains("handle") || j["type"] == "comm_end") continue;
    auto e = ended.find(j["handle"]);
    if (e != ended.end()) EXPECT_LE(j["ts_ns"].get<uint64_t>(), e->second) << j.dump();
  }
}

void expect_within(uint64_t got_ns, double want_ms, double tol, const std::string& what) {
  EXPECT_NEAR(got_ns / 1e6, want_ms, want_ms * tol) << what;
}

// Ranks 1-3 are running (waiting for the id) when gpuscope starts: it finds the stand-in in their
// maps. Rank 2 sleeps before each of the 5 steps of an iteration, so every collective waits for it.
TEST(Nccl, FourRanksCountedExactlyAndTheLateRankNamed) {
  TempDir d;
  const int iters = 6, delay_ms = 60;
  Ranks p(4);
  for (int r = 3; r >= 1; r--)
    p[r] =
        start_rank(4, r, d, {"--iters", std::to_string(iters), "--delay-ms", r == 2 ? std::to_string(delay_ms) : "0"});
  auto g = start_gpuscope({});
  p[0] = start_rank(4, 0, d, {"--iters", std::to_string(iters)});
  std::map<pid_t, int> rank_of;
  for (int r = 0; r < 4; r++) {
    ASSERT_EQ(p[r]->wait(30), 0) << r << ": " << p[r]->err();
    rank_of[p[r]->pid()] = r;
  }
  std::vector<json> lines = stop(*g, {p[0]->pid(), p[1]->pid(), p[2]->pid(), p[3]->pid()});

  std::set<std::string> ids;
  for (auto& j : of_type(lines, "collective")) {
    ids.insert(j["comm_id"]);
    EXPECT_EQ(j["rank"], rank_of[j["pid"]]) << j.dump();
    EXPECT_EQ(j["nranks"], 4);
    EXPECT_EQ(j["comm"], "nccl_rank");
    EXPECT_EQ(j["container"], "host");
  }
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids.begin()->size(), 16u);
  const std::map<std::string, uint64_t> bytes{{"ncclAllReduce", 4096}, {"ncclBroadcast", 4096},
                                              {"ncclAllGather", 1024}, {"ncclReduceScatter", 1024},
                                              {"ncclSend", 4096},      {"ncclRecv", 4096}};
  auto t = totals(lines);
  EXPECT_EQ(t.size(), 4 * bytes.size());
  for (auto& [pid, r] : rank_of)
    for (auto& [op, b] : bytes) {
      const OpTotal& o = t[{pid, op}];
      EXPECT_EQ(o.calls, uint64_t(iters)) << r << " " << op;
      EXPECT_EQ(o.bytes, b * iters) << r << " " << op;
      EXPECT_EQ(o.grouped, op == "ncclSend" || op == "ncclRecv" ? uint64_t(iters) : 0u) << r << " " << op;
      EXPECT_TRUE(o.errors.empty()) << r << " " << op;
    }

  // Every collective matched on every rank; rank 2 last at each, behind by its sleep (all but
  // the all-reduce, where rank 0 (whose ring peers are 1 and 3) left the send/recv ring one sleep
  // earlier still: the median is one sleep).
  auto l = lags(lines);
  for (auto& [pid, r] : rank_of) EXPECT_EQ(l[pid].matched, uint64_t(4 * iters)) << r;
  const Lag& late = l[p[2]->pid()];
  EXPECT_EQ(late.last, uint64_t(4 * iters));
  int checked = 0;
  uint64_t largest = 0;
  for (auto& j : of_type(lines, "straggler")) {
    const bool is2 = j["pid"] == p[2]->pid();
    EXPECT_EQ(j["slowest"], is2) << j.dump();
    if (!is2) {
      EXPECT_EQ(j["last_arrivals"], 0) << j.dump();
      continue;
    }
    largest = std::max(largest, j["lag_max_ns"].get<uint64_t>());
    EXPECT_LE(j["lag_max_ns"].get<uint64_t>(), 2 * delay_ms * 1'100'000ull) << j.dump();
    if (j["matched"].get<uint64_t>() < 4) continue;  // an interval cut inside an iteration
    checked++;
    expect_within(j["lag_p50_ns"].get<uint64_t>(), delay_ms, 0.10, "rank 2's median lag: " + j.dump());
    // What it did before arriving: the sleep, off CPU.
    expect_within(j["before_ns"].get<uint64_t>(), delay_ms, 0.10, "before rank 2's arrivals: " + j.dump());
    EXPECT_LT(j["before_cpu_ns"].get<uint64_t>(), delay_ms * 1'000'000ull / 10) << j.dump();
  }
  EXPECT_GE(checked, 2);
  expect_within(largest, 2 * delay_ms, 0.10, "rank 2's largest lag");
  EXPECT_EQ(of_type(lines, "comm_end").size(), 4u);
  expect_nothing_after_end(lines);
}

// Started before any rank, with the stand-in named: colors 0 and 1 split the world into two
// communicators of 2 ranks, each with its own id, the same on both of its ranks.
TEST(Nccl, SplitCommunicatorsHaveTheirOwnIds) {
  TempDir d;
  const int iters = 3, delay_ms = 40;
  auto g = start_gpuscope({"--nccl-lib", kLib});
  Ranks p(4);
  std::map<pid_t, int> parent_rank;
  for (int r = 3; r >= 0; r--) {
    p[r] = start_rank(4, r, d,
                      {"--iters", std::to_string(iters), "--split", std::to_string(r % 2), "--delay-ms",
                       r == 2 ? std::to_string(delay_ms) : "0"});
    parent_rank[p[r]->pid()] = r;
  }
  for (int r = 0; r < 4; r++) ASSERT_EQ(p[r]->wait(30), 0) << r << ": " << p[r]->err();
  std::vector<json> lines = stop(*g, {p[0]->pid(), p[1]->pid(), p[2]->pid(), p[3]->pid()});

  std::map<int, std::set<std::string>> by_color;
  for (auto& j : of_type(lines, "collective")) {
    const int pr = parent_rank[j["pid"]];
    by_color[pr % 2].insert(j["comm_id"]);
    EXPECT_EQ(j["rank"], pr / 2) << j.dump();  // ordered by key, the parent rank
    EXPECT_EQ(j["nranks"], 2) << j.dump();
    EXPECT_EQ(j["device"], pr) << j.dump();  // the parent's, from ncclCommCuDevice
  }
  ASSERT_EQ(by_color[0].size(), 1u);
  ASSERT_EQ(by_color[1].size(), 1u);
  EXPECT_NE(*by_color[0].begin(), *by_color[1].begin());
  std::set<std::string> world;
  for (auto& j : of_type(lines, "comm_end"))
    if (j["nranks"] == 4) world.insert(j["comm_id"]);
  ASSERT_EQ(world.size(), 1u);  // the parent ended too, its id equal on all 4
  EXPECT_FALSE(by_color[0].count(*world.begin()));
  EXPECT_FALSE(by_color[1].count(*world.begin()));
  EXPECT_EQ(of_type(lines, "comm_end").size(), 8u);

  auto t = totals(lines);
  for (auto& [pid, pr] : parent_rank) {
    EXPECT_EQ((t[{pid, "ncclAllGather"}]).bytes, 2048u * iters) << pr;  // 4096 bytes over 2 ranks
    EXPECT_EQ((t[{pid, "ncclAllReduce"}]).calls, uint64_t(iters)) << pr;
  }
  // Only rank 2's partner (parent rank 0) waits for it, by its sleep at every collective.
  auto l = lags(lines);
  EXPECT_EQ(l[p[2]->pid()].last, uint64_t(4 * iters));
  EXPECT_EQ(l[p[0]->pid()].last, 0u);
  for (auto& j : l[p[2]->pid()].lines) {
    EXPECT_TRUE(j["slowest"].get<bool>()) << j.dump();
    expect_within(j["lag_p50_ns"].get<uint64_t>(), delay_ms, 0.10, j.dump());
    expect_within(j["lag_max_ns"].get<uint64_t>(), delay_ms, 0.10, j.dump());
  }
  expect_nothing_after_end(lines);
}

// Found as the ranks start (exec and dlopen notices, rescans); rank 3 exits after 2 iterations
// without destroying anything: its rows end with it, and the others' next all-reduce fails.
TEST(Nccl, ARankThatExitsEarlyEnds) {
  TempDir d;
  auto g = start_gpuscope({"-v"});
  Ranks p(4);
  for (int r = 3; r >= 1; r--) {
    std::vector<std::string> a{"--iters", "1000"};
    if (r == 3) a.insert(a.end(), {"--exit-after", "2"});
    p[r] = start_rank(4, r, d, a);
  }
  // Rank 0 (the id) only once the stand-in is probed in the waiting ranks.
  ASSERT_TRUE(g->wait_for("probing the libnccl mapped by pid", 15, true)) << g->err();
  p[0] = start_rank(4, 0, d, {"--iters", "1000"});
  ASSERT_EQ(p[3]->wait(20), 0) << p[3]->err();
  for (int r = 0; r < 3; r++) EXPECT_EQ(p[r]->wait(20), 1) << r << ": " << p[r]->err();
  const pid_t gone = p[3]->pid();
  std::vector<json> lines = stop(*g, {p[0]->pid(), p[1]->pid(), p[2]->pid(), gone});

  auto t = totals(lines);
  EXPECT_EQ((t[{gone, "ncclAllReduce"}]).calls, 2u);
  EXPECT_EQ((t[{gone, "ncclRecv"}]).calls, 2u);
  EXPECT_TRUE((t[{gone, "ncclAllReduce"}]).errors.empty());
  for (int r = 0; r < 3; r++) {
    const OpTotal& o = t[std::pair{p[r]->pid(), std::string("ncclAllReduce")}];
    EXPECT_EQ(o.calls, 3u) << r;
    EXPECT_EQ(o.errors, (std::map<std::string, uint64_t>{{"ncclRemoteError", 1}})) << r;
  }
  // The 8 collectives every rank reached matched; the failed all-reduce matched without rank 3.
  auto l = lags(lines);
  EXPECT_EQ(l[gone].matched, 8u);
  for (int r = 0; r < 3; r++) EXPECT_EQ(l[p[r]->pid()].matched, 9u) << r;
  uint64_t gone_end = 0;
  for (auto& j : of_type(lines, "comm_end"))
    if (j["pid"] == gone) gone_end = j["ts_ns"];
  ASSERT_NE(gone_end, 0u);
  for (auto& j : lines)
    if (j.contains("pid") && j["pid"] == gone) EXPECT_LE(j["ts_ns"].get<uint64_t>(), gone_end) << j.dump();
  expect_nothing_after_end(lines);
}

// ncclCommInitAll's ranks and devices; a shrink's id, size and ranks (the parent's order less the
// excluded rank); ncclCommInitRankScalable and ...Config meeting on one id, the id's hash.
TEST(Nccl, InitAllShrinkAndScalableInit) {
  auto g = start_gpuscope({"--nccl-lib", kLib});
  Process life({NCCL_LIFE});
  ASSERT_EQ(life.wait(20), 0) << life.err();
  std::vector<json> lines = stop(*g, {life.pid()});
  const std::string out = life.out();
  ASSERT_EQ(out.rfind("id=", 0), 0u) << out;
  const std::string id = out.substr(3, 16);

  std::map<std::string, std::vector<json>> ends;  // comm id -> its comm_end lines
  for (auto& j : of_type(lines, "comm_end")) ends[j["comm_id"]].push_back(j);
  ASSERT_EQ(ends.size(), 3u) << g->out();
  std::string all_id, shrunk_id;
  for (auto& [cid, v] : ends) {
    if (v.size() == 4) all_id = cid;
    if (v.size() == 3) shrunk_id = cid;
  }
  ASSERT_FALSE(all_id.empty());
  ASSERT_FALSE(shrunk_id.empty());
  std::set<std::pair<int, int>> rank_device;
  for (auto& j : ends[all_id]) {
    EXPECT_EQ(j["nranks"], 4);
    rank_device.insert({j["rank"].get<int>(), j["device"].get<int>()});
  }
  EXPECT_EQ(rank_device, (std::set<std::pair<int, int>>{{0, 3}, {1, 2}, {2, 1}, {3, 0}}));
  rank_device.clear();
  for (auto& j : ends[shrunk_id]) {
    EXPECT_EQ(j["nranks"], 3);
    rank_device.insert({j["rank"].get<int>(), j["device"].get<int>()});
  }
  EXPECT_EQ(rank_device, (std::set<std::pair<int, int>>{{0, 3}, {1, 1}, {2, 0}}));  // parent ranks 0, 2, 3
  ASSERT_EQ(ends[id].size(), 2u) << "the hash of the ncclUniqueId " << id << ": " << g->out();
  std::set<int> ranks;
  for (auto& j : ends[id]) {
    EXPECT_EQ(j["nranks"], 2);
    ranks.insert(j["rank"].get<int>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));

  // The shrink that excluded its own rank, on the communicator it was called on.
  auto failed = of_type(lines, "comm_error");
  ASSERT_EQ(failed.size(), 1u) << g->out();
  EXPECT_EQ(failed[0]["op"], "ncclCommShrink");
  EXPECT_EQ(failed[0]["error"], 5);
  EXPECT_EQ(failed[0]["error_name"], "ncclInvalidUsage");
  EXPECT_EQ(failed[0]["comm_id"], all_id);
  EXPECT_EQ(failed[0]["rank"], 0);
  EXPECT_EQ(failed[0]["device"], 3);

  auto t = totals(lines);
  EXPECT_EQ((t[{life.pid(), "ncclAllReduce"}]).calls, 3u * 2 + 2);
  EXPECT_EQ((t[{life.pid(), "ncclAllReduce"}]).bytes, (3u * 2 + 2) * 4096);
  // Three ranks of the shrunk communicator in one process, matched by sequence number.
  uint64_t matched = 0;
  for (auto& j : of_type(lines, "straggler"))
    if (j["comm_id"] == shrunk_id) matched += j["matched"].get<uint64_t>();
  EXPECT_EQ(matched, 3u * 2);
}

// A copy without some of the probed functions (an older NCCL) is said once; what it has is probed.
TEST(Nccl, AnOlderNcclWithoutSomeFunctions) {
  const std::string old = std::string(NCCL_OLD_LIB_DIR) + "/libnccl.so.2";
  auto g = start_gpuscope({"--nccl-lib", old});
  TempDir d;
  Process rank({NCCL_RANK, "--ranks", "1", "--rank", "0", "--id-file", d.id(), "--iters", "3"},
               {"LD_LIBRARY_PATH=" + std::string(NCCL_OLD_LIB_DIR)});
  ASSERT_EQ(rank.wait(20), 0) << rank.err();
  std::vector<json> lines = stop(*g, {rank.pid()});
  const std::string said =
      "gpuscope: " + old +
      " has no ncclAlltoAll, ncclGather, ncclScatter, ncclCommInitRankScalable, ncclCommShrink (an "
      "older NCCL): the rest is probed\n";
  size_t n = 0;
  for (size_t at = g->err().find(said); at != std::string::npos; at = g->err().find(said, at + 1)) n++;
  EXPECT_EQ(n, 1u) << g->err();
  auto t = totals(lines);
  EXPECT_EQ(t.size(), 6u);
  EXPECT_EQ((t[{rank.pid(), "ncclAllReduce"}]).calls, 3u);
  EXPECT_EQ((t[{rank.pid(), "ncclAllReduce"}]).bytes, 3u * 4096);
  EXPECT_EQ((t[{rank.pid(), "ncclRecv"}]).grouped, 3u);
  for (auto& j : of_type(lines, "collective")) {
    EXPECT_EQ(j["rank"], 0);
    EXPECT_EQ(j["nranks"], 1);
    EXPECT_EQ(j["comm_id"].get<std::string>().size(), 16u);
  }
  EXPECT_EQ(of_type(lines, "comm_end").size(), 1u);
}

TEST(Nccl, RefusesBadInput) {
  EXPECT_EQ(expect_usage_error("nccl", {"--communicator", "xyz"}).err,
            "gpuscope: --communicator: 'xyz' is not a communicator id (1 to 16 hex digits, as gpuscope nccl shows)\n");
  expect_usage_error("nccl", {"--communicator", "0123456789abcdef0"});
  expect_usage_error("nccl", {"--rank", "-1"});
  expect_usage_error("nccl", {"--interval", "0"});
  EXPECT_EQ(expect_usage_error("nccl", {"--nccl-lib", "/nonexistent/libnccl.so.2"}).err,
            "gpuscope: --nccl-lib /nonexistent/libnccl.so.2: No such file or directory\n");
  EXPECT_EQ(expect_usage_error("nccl", {"--nccl-lib", NCCL_RANK}).err,
            std::string("gpuscope: --nccl-lib ") + NCCL_RANK + ": not the library: no ncclAllReduce\n");
  Process other({"/bin/sleep", "30"});
  EXPECT_EQ(expect_usage_error("nccl", {"-p", std::to_string(other.pid())}).err,
            "gpuscope: pid " + std::to_string(other.pid()) + " maps no libnccl.so.2\n");
}

// An id or rank not seen is said once; it keeps watching.
TEST(Nccl, UnknownCommunicatorAndRankAreSaidOnce) {
  Result r = run({gpuscope_bin(), "nccl", "--communicator", "0123456789abcdef", "--rank", "4096", "--interval", "0.3",
                  "-d", "1.2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = r.err.find(s); at != std::string::npos; at = r.err.find(s, at + 1)) n++;
    return n;
  };
  EXPECT_EQ(count("gpuscope: communicator 0123456789abcdef not seen yet; still watching for it\n"), 1u) << r.err;
  EXPECT_EQ(count("gpuscope: rank 4096 not seen yet; still watching for it\n"), 1u) << r.err;
}

}  // namespace

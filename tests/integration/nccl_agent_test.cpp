// The agent's nccl collector against the NCCL stand-in (tests/fixtures/nccl): 4 rank processes of
// one communicator with rank 2 late to every collective, through a name only this test uses
// (-c): the series per communicator id, rank and op, the late rank's lag and last arrivals, a
// communicator's series ending once a scrape has seen them, and /api/nccl beside `gpuscope nccl
// --json`.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace gstest;

namespace {

const std::string kLib = std::string(NCCL_STANDIN_LIB_DIR) + "/libnccl.so.2";
const int kIters = 6, kDelayMs = 60;
// Bytes per call of each op the stand-in ranks make (4096 bytes, 4 ranks).
const std::map<std::string, uint64_t> kBytes{{"ncclAllReduce", 4096}, {"ncclBroadcast", 4096},
                                             {"ncclAllGather", 1024}, {"ncclReduceScatter", 1024},
                                             {"ncclSend", 4096},      {"ncclRecv", 4096}};

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/gs-ncclag-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string id() const { return path + "/id"; }
};

using Ranks = std::vector<std::unique_ptr<Process>>;

// Rank r of 4 through the workload's name, waiting for rank 0's id file.
std::unique_ptr<Process> start_rank(const Workload& w, int r, const TempDir& d, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{w.path(), "--ranks", "4", "--rank", std::to_string(r), "--id-file", d.id()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Process>(argv);
  EXPECT_EQ(ready_pid(*p), p->pid());
  return p;
}

std::vector<json> records(const json& api, const std::string& type) {
  std::vector<json> out;
  for (auto& j : api.at("records"))
    if (j["type"] == type) out.push_back(j);
  return out;
}

// /api/nccl once it holds `ends` comm_end records of the workload (the final values), else null.
json api_after_ends(Agent& a, const Workload& w, size_t ends) {
  for (int i = 0; i < 200; i++) {
    json api = a.api("/api/nccl");
    size_t n = 0;
    for (auto& j : records(api, "comm_end")) n += j["comm"] == w.comm();
    if (n >= ends) return api;
    usleep(100 * 1000);
  }
  return nullptr;
}

double hist_mean(const std::string& m, const std::map<std::string, std::string>& want) {
  return value_of(m, "gpuscope_nccl_arrival_lag_seconds_sum", want) /
         value_of(m, "gpuscope_nccl_arrival_lag_seconds_count", want);
}

// Started before the ranks, with `gpuscope nccl --json` beside it: the series exact per rank and
// op, rank 2 last at every collective and lagging by its sleep, promtool content, /api/nccl's
// records those of the subcommand summed, and the series gone after a scrape saw their end.
TEST(NcclAgent, SeriesPerRankAndOpAndTheLateRank) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool not installed (scripts/deps.sh installs it)";
  Workload w("ncclagent", "ncag", NCCL_RANK);
  TempDir d;
  Agent a(w, {"--collectors", "nccl", "--nccl-lib", kLib});
  Process g({gpuscope_bin(), "nccl", "--json", "--interval", "0.5", "-c", w.comm(), "--nccl-lib", kLib});
  ASSERT_TRUE(g.wait_for("Ctrl-C to end", 30, true)) << g.err();
  Ranks p(4);
  std::map<pid_t, int> rank_of;
  for (int r = 3; r >= 0; r--) {
    p[r] =
        start_rank(w, r, d, {"--iters", std::to_string(kIters), "--delay-ms", r == 2 ? std::to_string(kDelayMs) : "0"});
    rank_of[p[r]->pid()] = r;
  }
  for (int r = 0; r < 4; r++) ASSERT_EQ(p[r]->wait(30), 0) << r << ": " << p[r]->err();
  // Only /metrics counts as a scrape: the series stay until the one below.
  json api = api_after_ends(a, w, 4);
  ASSERT_FALSE(api.is_null()) << a.proc().err();
  const std::string m = a.metrics();

  std::set<std::string> ids;
  for (auto& s : where(samples(m, "gpuscope_nccl_calls_total"), {{"comm", w.comm()}})) {
    ids.insert(s.labels.at("comm_id"));
    const pid_t pid = std::stoi(s.labels.at("pid"));
    ASSERT_TRUE(rank_of.count(pid)) << pid;
    EXPECT_EQ(s.labels.at("rank"), std::to_string(rank_of[pid]));
    EXPECT_EQ(s.labels.at("nranks"), "4");
    EXPECT_EQ(s.labels.at("container"), "host");
    EXPECT_EQ(s.labels.at("pod"), "");
    EXPECT_EQ(s.labels.at("namespace"), "");
  }
  ASSERT_EQ(ids.size(), 1u);
  const std::string id = *ids.begin();
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(where(samples(m, "gpuscope_nccl_calls_total"), {{"comm", w.comm()}}).size(), 4 * kBytes.size());
  for (auto& [pid, r] : rank_of)
    for (auto& [op, b] : kBytes) {
      std::map<std::string, std::string> l{{"comm_id", id}, {"pid", std::to_string(pid)}, {"op", op}};
      EXPECT_EQ(value_of(m, "gpuscope_nccl_calls_total", l), kIters) << r << " " << op;
      EXPECT_EQ(value_of(m, "gpuscope_nccl_bytes_total", l), double(b * kIters)) << r << " " << op;
      EXPECT_EQ(value_of(m, "gpuscope_nccl_call_seconds_count", l), kIters) << r << " " << op;
      EXPECT_EQ(
          value_of(m, "gpuscope_nccl_call_seconds_bucket", {{"pid", std::to_string(pid)}, {"op", op}, {"le", "+Inf"}}),
          kIters)
          << r << " " << op;
    }
  // 4 collectives per iteration matched on every rank (send and receive are not collectives);
  // rank 2 last at all of them. It lags one sleep, and two at each all-reduce after the first
  // (rank 0, whose ring peers are 1 and 3, left the send/receive ring one sleep earlier still).
  const std::string p2 = std::to_string(p[2]->pid());
  for (auto& [pid, r] : rank_of) {
    std::map<std::string, std::string> l{{"comm_id", id}, {"pid", std::to_string(pid)}, {"rank", std::to_string(r)}};
    EXPECT_EQ(value_of(m, "gpuscope_nccl_arrival_lag_seconds_count", l), 4 * kIters) << r;
    EXPECT_EQ(value_of(m, "gpuscope_nccl_last_arrivals_total", l), r == 2 ? 4 * kIters : 0) << r;
    if (r != 2) {
      EXPECT_LT(hist_mean(m, l), hist_mean(m, {{"pid", p2}})) << r;
    }
  }
  const double want_mean_ms = kDelayMs * (1 + double(kIters - 1) / (4 * kIters));
  EXPECT_NEAR(hist_mean(m, {{"pid", p2}}) * 1e3, want_mean_ms, want_mean_ms * 0.10) << m;
  // Every lag of rank 2 is at least one sleep: none in the buckets up to 33.5 ms.
  EXPECT_EQ(value_of(m, "gpuscope_nccl_arrival_lag_seconds_bucket", {{"pid", p2}, {"le", "0.033554431"}}), 0);

  std::string file = w.dir() + "/scrape.txt";
  std::ofstream(file) << m;
  auto check = run({"sh", "-c", "promtool check metrics < " + file + " 2>&1"});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_EQ(check.out, "") << check.out;

  // /api/nccl: the subcommand's records, summed over its intervals.
  usleep(1500 * 1000);  // its last interval
  g.signal(SIGINT);
  ASSERT_EQ(g.wait(20), 0) << g.err();
  std::map<std::pair<pid_t, std::string>, json> sub;  // (pid, op) -> the sum of its lines
  std::map<pid_t, json> sub_lag;
  for (auto& j : parse_lines(g.out())) {
    if (!j.contains("pid") || !rank_of.count(j["pid"])) continue;
    if (j["type"] == "collective") {
      json& s = sub[{j["pid"], j["op"]}];
      if (s.is_null()) {
        s = j;
        continue;
      }
      for (auto k : {"calls", "bytes", "grouped", "call_ns"}) s[k] = s[k].get<uint64_t>() + j[k].get<uint64_t>();
      s["finalized"] = j["finalized"];  // as of the latest
    } else if (j["type"] == "straggler") {
      json& s = sub_lag[j["pid"]];
      if (s.is_null()) {
        s = j;
        continue;
      }
      for (auto k : {"matched", "last_arrivals"}) s[k] = s[k].get<uint64_t>() + j[k].get<uint64_t>();
      s["lag_max_ns"] = std::max(s["lag_max_ns"].get<uint64_t>(), j["lag_max_ns"].get<uint64_t>());
    }
  }
  size_t compared = 0;
  for (auto& j : records(api, "collective")) {
    if (j["comm"] != w.comm()) continue;
    auto it = sub.find({j["pid"], j["op"]});
    ASSERT_NE(it, sub.end()) << j.dump();
    const json& s = it->second;
    std::set<std::string> keys, sub_keys;
    for (auto& [k, v] : j.items()) keys.insert(k);
    for (auto& [k, v] : s.items()) sub_keys.insert(k);
    EXPECT_EQ(keys, sub_keys) << j.dump();
    for (auto k : {"comm", "container", "comm_id", "rank", "nranks", "device", "handle", "op", "calls", "bytes",
                   "grouped", "errors", "finalized"})
      EXPECT_EQ(j[k], s[k]) << k << ": " << j.dump() << " vs " << s.dump();
    // Each tool times the calls with its own probes: a few microseconds apart per call.
    EXPECT_NEAR(j["call_ns"].get<double>(), s["call_ns"].get<double>(), 200'000.0 * kIters) << j.dump();
    compared++;
  }
  EXPECT_EQ(compared, 4 * kBytes.size());
  compared = 0;
  for (auto& j : records(api, "straggler")) {
    if (j["comm"] != w.comm()) continue;
    const json& s = sub_lag.at(j["pid"]);
    for (auto k : {"comm_id", "rank", "nranks", "handle", "matched", "last_arrivals"})
      EXPECT_EQ(j[k], s[k]) << k << ": " << j.dump() << " vs " << s.dump();
    EXPECT_EQ(j["slowest"], j["pid"] == p[2]->pid()) << j.dump();
    EXPECT_NEAR(j["lag_max_ns"].get<double>(), s["lag_max_ns"].get<double>(), 1e6) << j.dump();
    if (j["pid"] == p[2]->pid()) {
      EXPECT_NEAR(j["lag_p50_ns"].get<double>() / 1e6, kDelayMs, kDelayMs * 0.10) << j.dump();
    }
    compared++;
  }
  EXPECT_EQ(compared, 4u);

  // That scrape saw the final values: the next ones have none of the communicator's series.
  std::string gone = a.until([&](const std::string& t) {
    return where(samples(t, "gpuscope_nccl_calls_total"), {{"comm_id", id}}).empty() &&
           where(samples(t, "gpuscope_nccl_arrival_lag_seconds_count"), {{"comm_id", id}}).empty();
  });
  EXPECT_NE(gone, "");
  const json last = a.api("/api/nccl");  // held: a range-for over a temporary's member dangles
  for (auto& j : last["records"]) EXPECT_NE(j["comm_id"], id) << j.dump();
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// Rank 3 exits after 2 iterations; the others fail their third all-reduce and exit: rank 3's
// series hold its final counts at one scrape and are gone from a later one, like the others'.
TEST(NcclAgent, ARankThatExitsEarlyHasItsSeriesEnd) {
  Workload w("ncclagent2", "ncae", NCCL_RANK);
  TempDir d;
  Agent a(w, {"--collectors", "nccl", "--nccl-lib", kLib});
  Ranks p(4);
  for (int r = 3; r >= 0; r--) {
    std::vector<std::string> extra{"--iters", "1000"};
    if (r == 3) extra.insert(extra.end(), {"--exit-after", "2"});
    p[r] = start_rank(w, r, d, extra);
  }
  ASSERT_EQ(p[3]->wait(20), 0) << p[3]->err();
  for (int r = 0; r < 3; r++) EXPECT_EQ(p[r]->wait(20), 1) << r << ": " << p[r]->err();
  json api = api_after_ends(a, w, 4);
  ASSERT_FALSE(api.is_null()) << a.proc().err();
  const std::string m = a.metrics();
  const std::string gone = std::to_string(p[3]->pid());
  EXPECT_EQ(value_of(m, "gpuscope_nccl_calls_total", {{"pid", gone}, {"op", "ncclAllReduce"}}), 2);
  EXPECT_EQ(value_of(m, "gpuscope_nccl_calls_total", {{"pid", gone}, {"op", "ncclRecv"}}), 2);
  EXPECT_EQ(value_of(m, "gpuscope_nccl_arrival_lag_seconds_count", {{"pid", gone}}), 8);
  for (int r = 0; r < 3; r++)
    EXPECT_EQ(value_of(m, "gpuscope_nccl_calls_total", {{"pid", std::to_string(p[r]->pid())}, {"op", "ncclAllReduce"}}),
              3)
        << r;
  std::string after = a.until([&](const std::string& t) {
    return where(samples(t, "gpuscope_nccl_calls_total"), {{"comm", w.comm()}}).empty() &&
           where(samples(t, "gpuscope_nccl_last_arrivals_total"), {{"comm", w.comm()}}).empty();
  });
  EXPECT_NE(after, "");
  const json last = a.api("/api/nccl");
  for (auto& j : last["records"]) EXPECT_NE(j["comm"], w.comm()) << j.dump();
  EXPECT_EQ(a.stop(), 0) << a.proc().err();
}

// --nccl-lib that cannot be read: one line, exit 2, before anything loads.
TEST(NcclAgent, RefusesAnUnreadableLibrary) {
  auto r = run({gpuscope_bin(), "agent", "--collectors", "nccl", "--nccl-lib", "/nonexistent/libnccl.so.2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "gpuscope: --nccl-lib /nonexistent/libnccl.so.2: No such file or directory\n");
}

}  // namespace

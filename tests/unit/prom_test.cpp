// The Prometheus text writer and the container labels: escaping, HELP/TYPE once per family,
// families kept together, cumulative histograms; pod, namespace and container from cgroup paths.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "cmd/agent/http.h"
#include "cmd/agent/labels.h"
#include "cmd/agent/prom.h"
#include "core/output.h"
#include "core/system.h"

using namespace gpuscope;

TEST(Prom, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(prom_escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(prom_escape_label("void f<int>(float*)"), "void f<int>(float*)");
  EXPECT_EQ(prom_escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
}

// What Prometheus's text parser makes of a quoted label value (the three escapes it knows).
static std::string prom_unescape(std::string_view v) {
  std::string o;
  for (size_t i = 0; i < v.size(); i++) {
    if (v[i] != '\\') {
      o += v[i];
      continue;
    }
    char n = v[++i];
    o += n == 'n' ? '\n' : n;
  }
  return o;
}

// A process may name itself with any bytes (prctl PR_SET_NAME): its label is valid UTF-8 and
// reads as the same text JSON gives for those bytes, so one name cannot break a scrape.
TEST(Prom, LabelValuesAreValidUtf8ReadAsJsonReadsThem) {
  const std::string comm = "a\"b\\c\nd\xff\xfe{}";
  EXPECT_EQ(prom_escape_label(comm), "a\\\"b\\\\c\\nd\xc3\xbf\xc3\xbe{}");
  std::string series;
  prom_series(series, "m", {{"comm", comm}, {"kernel", "k\xe2\x82\xac\xc0\xaf"}});
  EXPECT_EQ(series, "m{comm=\"a\\\"b\\\\c\\nd\xc3\xbf\xc3\xbe{}\",kernel=\"k\xe2\x82\xac\xc3\x80\xc2\xaf\"}");
  std::mt19937 rng(11);
  for (int round = 0; round < 3000; round++) {
    std::string r(rng() % 24, '\0');
    for (auto& c : r) c = static_cast<char>(rng());
    fmt::memory_buffer b;
    JsonLine(b).str("v", r).end();
    std::string json_text = nlohmann::json::parse(std::string_view(b.data(), b.size()))["v"];
    std::string label = prom_escape_label(r);
    EXPECT_EQ(label.find('\n'), std::string::npos);
    EXPECT_EQ(prom_unescape(label), json_text);
    EXPECT_EQ(utf8_valid(r), json_text);
  }
}

TEST(Prom, Numbers) {
  EXPECT_EQ(prom_number(0), "0");
  EXPECT_EQ(prom_number(2107552), "2107552");
  EXPECT_EQ(prom_number(9007199254740991.0), "9007199254740991");
  EXPECT_EQ(prom_number(0.5), "0.5");
  EXPECT_EQ(prom_number(1.023e-06), "1.023e-06");
  EXPECT_EQ(prom_number(INFINITY), "+Inf");
  EXPECT_EQ(prom_number(-INFINITY), "-Inf");
  EXPECT_EQ(prom_number(NAN), "NaN");
}

TEST(Prom, FamiliesTogetherWithHelpAndTypeOnce) {
  PromSet m;
  m.family("a_total", PromSet::Type::counter, "A things\nover lines");
  m.family("b_bytes", PromSet::Type::gauge, "B");
  m.add("a_total", {{"pid", "1"}, {"kernel", "k\"1"}}, 5);
  m.add("b_bytes", {}, 7);
  m.add("a_total", {{"pid", "2"}, {"kernel", "k2"}}, 3);
  m.family("a_total", PromSet::Type::counter, "declared again: ignored");
  EXPECT_EQ(m.series(), 3u);
  EXPECT_EQ(m.text(),
            "# HELP a_total A things\\nover lines\n"
            "# TYPE a_total counter\n"
            "a_total{pid=\"1\",kernel=\"k\\\"1\"} 5\n"
            "a_total{pid=\"2\",kernel=\"k2\"} 3\n"
            "# HELP b_bytes B\n"
            "# TYPE b_bytes gauge\n"
            "b_bytes 7\n");
  EXPECT_THROW(m.add("undeclared", {}, 1), std::logic_error);
}

TEST(Prom, HistogramIsCumulativeWithInf) {
  PromSet m;
  m.family("d_seconds", PromSet::Type::histogram, "D");
  // 2 at or under 0.001, 3 more under 0.01, 4 beyond the last bound.
  m.histogram("d_seconds", {{"api", "x"}}, {0.001, 0.01}, {2, 3, 4}, 1.5);
  EXPECT_EQ(m.text(),
            "# HELP d_seconds D\n"
            "# TYPE d_seconds histogram\n"
            "d_seconds_bucket{api=\"x\",le=\"0.001\"} 2\n"
            "d_seconds_bucket{api=\"x\",le=\"0.01\"} 5\n"
            "d_seconds_bucket{api=\"x\",le=\"+Inf\"} 9\n"
            "d_seconds_sum{api=\"x\"} 1.5\n"
            "d_seconds_count{api=\"x\"} 9\n");
  EXPECT_EQ(m.series(), 5u);
}

TEST(Listen, ParsesAndRejects) {
  auto a = parse_listen("127.0.0.1:9400");
  EXPECT_EQ(a.ss_family, AF_INET);
  EXPECT_EQ(parse_listen("[::1]:0").ss_family, AF_INET6);
  for (const char* bad : {"localhost", "127.0.0.1", "127.0.0.1:", "300.1.1.1:80", "127.0.0.1:65536", "1.2.3.4:-1",
                          "example.com:80", "[::1:80", ":80"})
    EXPECT_THROW(parse_listen(bad), UsageError) << bad;
}

class Labels : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = "/tmp/gs-labels-" + std::to_string(getpid());
    mkdir(root_.c_str(), 0755);
    mkdir((root_ + "/pods").c_str(), 0755);
    mkdir((root_ + "/containers").c_str(), 0755);
  }
  void TearDown() override { (void)system(("rm -rf " + root_).c_str()); }
  void dir(const std::string& d) { mkdir((root_ + "/" + d).c_str(), 0755); }
  void file(const std::string& f) { std::ofstream(root_ + "/" + f) << ""; }
  std::string root_;
};

const std::string kId = "4f2a9c1b7d3e8f6a0b5c2d9e1f7a3b8c6d0e4f2a9c1b7d3e8f6a0b5c2d9e1f7a";

TEST_F(Labels, SystemdDriverPodWithContainerLog) {
  dir("pods/ml_trainer-7f9c_0a1b2c3d-1111-2222-3333-444455556666");
  dir("pods/ml_trainer-7f9c_0a1b2c3d-1111-2222-3333-444455556666/worker");
  dir("pods/ml_trainer-7f9c_0a1b2c3d-1111-2222-3333-444455556666/sidecar");
  file("containers/trainer-7f9c_ml_worker-" + kId + ".log");
  std::string cg =
      "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_1111_2222_3333_444455556666.slice/"
      "cri-containerd-" +
      kId + ".scope\n";
  auto l = labels_from_cgroup(cg, root_ + "/pods");
  EXPECT_EQ(l.ns, "ml");
  EXPECT_EQ(l.pod, "trainer-7f9c");
  EXPECT_EQ(l.container, "worker");
}

TEST_F(Labels, CgroupfsDriverOneContainerPod) {
  dir("pods/default_jupyter-0_99999999-8888-7777-6666-555555555555");
  dir("pods/default_jupyter-0_99999999-8888-7777-6666-555555555555/notebook");
  std::string cg = "0::/kubepods/besteffort/pod99999999-8888-7777-6666-555555555555/" + kId + "\n";
  auto l = labels_from_cgroup(cg, root_ + "/pods");
  EXPECT_EQ(l.ns, "default");
  EXPECT_EQ(l.pod, "jupyter-0");
  EXPECT_EQ(l.container, "notebook");
}

TEST_F(Labels, DockerAndHost) {
  auto d = labels_from_cgroup("0::/system.slice/docker-" + kId + ".scope\n", root_ + "/pods");
  EXPECT_EQ(d.container, kId.substr(0, 12));
  EXPECT_EQ(d.pod, "");
  EXPECT_EQ(d.ns, "");
  auto h = labels_from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n", root_ + "/pods");
  EXPECT_EQ(h.container, "host");
  EXPECT_EQ(h.pod, "");
  // A pod whose log directory is not there: its container id, no names.
  auto p = labels_from_cgroup("0::/kubepods/pod12345678-1234-1234-1234-123456789012/" + kId + "\n", root_ + "/pods");
  EXPECT_EQ(p.container, kId.substr(0, 12));
  EXPECT_EQ(p.pod, "");
}

// The overhead governor's and the anomaly rules' decisions, on given numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cmd/agent/anomaly.h"
#include "cmd/agent/governor.h"
#include "core/system.h"

using namespace gpuscope;

namespace {

// A governor on a fake clock and a fake CPU: each window is exactly what the test says it used.
struct Driven {
  double now = 100, cpu = 7;
  std::vector<unsigned> changes;
  Governor g;
  explicit Driven(Governor::Config c, std::vector<Governor::Step> steps)
      : g(
            c, std::move(steps), [this](unsigned l) { changes.push_back(l); },
            Governor::Sources{[this] { return cpu; }, [this] { return now; }}) {
    g.tick();  // the first window starts here
  }
  // One 2 s window that used `cpu_s` of CPU, ticked every half second; the level after it.
  unsigned window(double cpu_s) {
    for (int i = 0; i < 4; i++) {
      now += 0.5;
      cpu += cpu_s / 4;
      g.tick();
    }
    return g.level();
  }
};

}  // namespace

TEST(Governor, StepsDownOverTheLimitAndUpUnderHalfOfIt) {
  std::vector<unsigned> seen;
  Governor g({2, 2, 3}, {{"a", 4}, {"b", 4}}, nullptr);
  EXPECT_EQ(g.decide(1.5), 0u);
  EXPECT_EQ(g.decide(9), 1u);
  EXPECT_EQ(g.decide(3), 2u);
  EXPECT_EQ(g.decide(50), 2u) << "no level below the last";
  // Under the limit but not under half of it: it stays.
  for (int i = 0; i < 5; i++) EXPECT_EQ(g.decide(1.5), 2u);
  // Under half: up after 3 calm windows, not before.
  EXPECT_EQ(g.decide(0.9), 2u);
  EXPECT_EQ(g.decide(0.9), 2u);
  EXPECT_EQ(g.decide(0.9), 1u);
  // A window between half and the limit pauses the calm count; one over the limit resets it.
  EXPECT_EQ(g.decide(0.9), 1u);
  EXPECT_EQ(g.decide(1.5), 1u);
  EXPECT_EQ(g.decide(0.9), 1u);
  EXPECT_EQ(g.decide(0.9), 0u);
  EXPECT_EQ(g.decide(9), 1u);
  EXPECT_EQ(g.decide(0.9), 1u);
  EXPECT_EQ(g.decide(0.9), 1u);
  EXPECT_EQ(g.decide(2.5), 2u);
  EXPECT_EQ(g.level(), 2u);
  EXPECT_EQ(g.cpu_percent(), 2.5);
}

TEST(Governor, AStepUpUndoneAtOnceDoublesTheWait) {
  Governor g({2, 2, 3}, {{"a", 4}, {"b", 4}}, nullptr);
  EXPECT_EQ(g.decide(9), 1u);
  EXPECT_EQ(g.decide(9), 2u);
  for (int i = 0; i < 2; i++) EXPECT_EQ(g.decide(0.5), 2u);
  EXPECT_EQ(g.decide(0.5), 1u);
  EXPECT_EQ(g.decide(9), 2u) << "over straight after the step up";
  for (int i = 0; i < 5; i++) EXPECT_EQ(g.decide(0.5), 2u) << "6 calm windows now, not 3";
  EXPECT_EQ(g.decide(0.5), 1u);
  // That one held: the wait is back to 3 (the window that held counts as the first).
  for (int i = 0; i < 2; i++) EXPECT_EQ(g.decide(0.5), 1u);
  EXPECT_EQ(g.decide(0.5), 0u);
  EXPECT_EQ(g.decide(0.5), 0u);
  EXPECT_EQ(g.decide(9), 1u);
  for (int i = 0; i < 2; i++) EXPECT_EQ(g.decide(0.5), 1u);
  EXPECT_EQ(g.decide(0.5), 0u);
}

TEST(Governor, MeasuresWindowsFromItsSources) {
  Driven d({2, 2, 3}, {{"a", 4}, {"b", 4}});
  // Under the window's length nothing is decided, however much CPU went.
  d.now += 1.5, d.cpu += 5;
  d.g.tick();
  EXPECT_EQ(d.g.level(), 0u);
  EXPECT_EQ(d.g.cpu_percent(), 0);
  testing::internal::CaptureStderr();
  d.now += 0.5;
  d.g.tick();  // 5 s in 2 s: 250 %
  EXPECT_EQ(d.g.level(), 1u);
  EXPECT_DOUBLE_EQ(d.g.cpu_percent(), 250);
  // A late tick: the window is as long as it really was (0.045 s in 2.5 s: 1.8 %, not over).
  d.now += 2.5, d.cpu += 0.045;
  d.g.tick();
  EXPECT_EQ(d.g.level(), 1u);
  EXPECT_NEAR(d.g.cpu_percent(), 1.8, 1e-9);
  EXPECT_EQ(d.window(0.05), 2u) << "2.5 %";
  for (int i = 0; i < 2; i++) EXPECT_EQ(d.window(0.016), 2u);
  EXPECT_EQ(d.window(0.016), 1u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "gpuscope: agent: governor level 1: CPU 250.0% over 2.0%: a\n"
            "gpuscope: agent: governor level 2: CPU 2.5% over 2.0%: b\n"
            "gpuscope: agent: governor level 1: CPU 0.8%, restored: b\n");
  EXPECT_EQ(d.changes, (std::vector<unsigned>{1, 2, 1}));
}

// A storm that lasts, then stops: one level down per window to the last, then one up every
// third calm window, each change told to on_change once.
TEST(Governor, StormDownEveryWindowThenUpEveryThirdCalmOne) {
  Driven d({2, 2, 3}, {{"sampling", 4}, {"refresh 4", 4}, {"refresh 16", 4}, {"events", 1}});
  for (int i = 0; i < 3; i++) EXPECT_EQ(d.window(0.01), 0u) << "idle: 0.5 %";
  std::vector<unsigned> storm, calm;
  for (int i = 0; i < 7; i++) storm.push_back(d.window(1.2));  // 60 % of a core
  EXPECT_EQ(storm, (std::vector<unsigned>{1, 2, 3, 4, 4, 4, 4}));
  for (int i = 0; i < 13; i++) calm.push_back(d.window(0.01));
  EXPECT_EQ(calm, (std::vector<unsigned>{4, 4, 3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0}));
  EXPECT_EQ(d.changes, (std::vector<unsigned>{1, 2, 3, 4, 3, 2, 1, 0}));
}

// The test hook of the agent's CPU source: a file's number of seconds, read each time.
TEST(Governor, TestCpuFileSource) {
  unsetenv("GPUSCOPE_TEST_GOVERNOR_CPU_FILE");
  EXPECT_EQ(agent_cpu_source().target<double (*)()>() != nullptr, true) << "getrusage without the variable";
  std::string path = "/tmp/gs-governor-cpu-" + std::to_string(getpid());
  setenv("GPUSCOPE_TEST_GOVERNOR_CPU_FILE", path.c_str(), 1);
  unlink(path.c_str());
  try {
    agent_cpu_source();
    ADD_FAILURE() << "no file, no source";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "GPUSCOPE_TEST_GOVERNOR_CPU_FILE: cannot read " + path);
  }
  std::ofstream(path) << "x1\n";
  try {
    agent_cpu_source();
    ADD_FAILURE() << "not a number";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "GPUSCOPE_TEST_GOVERNOR_CPU_FILE must be a number of CPU seconds between 0 and 1000000000000");
  }
  std::ofstream(path) << "1.5\n";
  auto cpu = agent_cpu_source();
  EXPECT_EQ(cpu(), 1.5);
  std::ofstream(path) << "40";
  EXPECT_EQ(cpu(), 40);
  std::ofstream(path) << "";  // being rewritten: the last reading stands
  EXPECT_EQ(cpu(), 40);
  unlink(path.c_str());
  EXPECT_EQ(cpu(), 40);
  unsetenv("GPUSCOPE_TEST_GOVERNOR_CPU_FILE");
}

TEST(Anomaly, Rules) {
  AnomalyRules r({5000, 3, 100});
  using P = AnomalyRules::ProcMem;
  // A holds 6000 first: nobody else held anything, nothing said.
  EXPECT_TRUE(r.observe({{1, "a", 6000}}, {}, 1).empty());
  EXPECT_TRUE(r.observe({{1, "a", 6000}}, {}, 1).empty());
  // B crosses 5000 while A holds: said of B, naming A, once.
  auto e = r.observe({{1, "a", 6000}, {2, "b", 7000}}, {}, 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].rule, "unexpected_allocation");
  EXPECT_EQ(e[0].pid, 2u);
  EXPECT_EQ(e[0].other_pid, 1u);
  EXPECT_TRUE(r.observe({P{1, "a", 6000}, P{2, "b", 7000}}, {}, 1).empty());
  // C grows 3 refreshes in a row (a flat refresh in between does not break it): said once.
  EXPECT_TRUE(r.observe({{3, "c", 100}}, {}, 1).empty());
  EXPECT_TRUE(r.observe({{3, "c", 200}}, {}, 1).empty());
  EXPECT_TRUE(r.observe({{3, "c", 200}}, {}, 1).empty());
  EXPECT_TRUE(r.observe({{3, "c", 300}}, {}, 1).empty());
  e = r.observe({{3, "c", 400}}, {}, 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].rule, "memory_growth");
  EXPECT_TRUE(r.observe({{3, "c", 500}}, {}, 1).empty());
  // Errors: 50 in 1 s is under 100/s; 1050 more in 1 s is a burst, said once while it lasts.
  EXPECT_TRUE(r.observe({}, {{"cudaMalloc", 50}}, 1).empty());
  e = r.observe({}, {{"cudaMalloc", 1100}}, 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].rule, "error_burst");
  EXPECT_EQ(e[0].api, "cudaMalloc");
  EXPECT_DOUBLE_EQ(e[0].rate_per_s, 1050);
  EXPECT_TRUE(r.observe({}, {{"cudaMalloc", 2200}}, 1).empty());
  EXPECT_TRUE(r.observe({}, {{"cudaMalloc", 2200}}, 1).empty());
  EXPECT_EQ(r.observe({}, {{"cudaMalloc", 3300}}, 1).size(), 1u) << "a new burst";
  auto j = r.json();
  EXPECT_NE(j.find("\"totals\":{\"unexpected_allocation\":1,\"memory_growth\":1,\"error_burst\":2}"), std::string::npos)
      << j;
}

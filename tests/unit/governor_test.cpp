// The overhead governor's and the anomaly rules' decisions, on given numbers.
#include <gtest/gtest.h>

#include "cmd/agent/anomaly.h"
#include "cmd/agent/governor.h"

using namespace gpuscope;

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

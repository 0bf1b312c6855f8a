// The perf map reader (src/core/perf_map.h): the rules of the symbolizer's reader, as a function.
#include "core/perf_map.h"

#include <gtest/gtest.h>

using gpuscope::parse_perf_map;
using gpuscope::perf_map_find;

TEST(PerfMap, CPythonLinesParseAndSortByStart) {
  auto m = parse_perf_map(
      "7f1c2a00000b 1e py::worker:/app/work.py\n"
      "7f1c2a000000 b py::preprocess_burn:/app/work.py\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].start, 0x7f1c2a000000u);
  EXPECT_EQ(m[0].size, 0xbu);
  EXPECT_EQ(m[0].name, "py::preprocess_burn:/app/work.py");
  EXPECT_EQ(m[1].name, "py::worker:/app/work.py");
}

TEST(PerfMap, LinesThatDoNotFitAreSkipped) {
  auto m = parse_perf_map("not a line\n\n10 20\n10\n30 4 ok\n");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].name, "ok");
  EXPECT_TRUE(parse_perf_map("").empty());
  EXPECT_EQ(parse_perf_map("1 2 no newline at the end").at(0).name, "no newline at the end");
}

TEST(PerfMap, LookupPrefersTheLatestEntryForAStart) {
  auto m = parse_perf_map("1000 40 first\n1000 40 second\n2000 0 zero_size\n");
  ASSERT_EQ(m.size(), 3u);
  ASSERT_NE(perf_map_find(m, 0x1000), nullptr);
  EXPECT_EQ(*perf_map_find(m, 0x1000), "second");
  EXPECT_EQ(*perf_map_find(m, 0x103f), "second");
  EXPECT_EQ(perf_map_find(m, 0x1040), nullptr);
  EXPECT_EQ(perf_map_find(m, 0xfff), nullptr);
  EXPECT_EQ(*perf_map_find(m, 0x2000), "zero_size") << "size 0 covers its start";
  EXPECT_EQ(perf_map_find(m, 0x2001), nullptr);
}

TEST(PerfMap, ARangeReachingPastTheTopOfTheAddressSpaceDoesNotWrap) {
  auto m = parse_perf_map("ffffffffffffff00 200 top\n");
  EXPECT_EQ(*perf_map_find(m, 0xffffffffffffffffu), "top");
  EXPECT_EQ(perf_map_find(m, 0x10), nullptr);
}

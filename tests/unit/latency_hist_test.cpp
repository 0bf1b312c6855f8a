#include <gtest/gtest.h>

#include "core/histogram.h"

using namespace gpuscope;

TEST(LatencyHist, BucketBounds) {
  EXPECT_EQ(bucket_of(0), 0u);
  EXPECT_EQ(bucket_of(1), 0u);
  EXPECT_EQ(bucket_of(2), 1u);
  EXPECT_EQ(bucket_of(50000), 15u);
  EXPECT_EQ(bucket_of(65535), 15u);
  EXPECT_EQ(bucket_of(65536), 16u);
  EXPECT_EQ(bucket_of(2000000), 20u);
  EXPECT_EQ(bucket_of(UINT64_MAX), 63u);
  EXPECT_EQ(bucket_low(15), 32768u);
  EXPECT_EQ(bucket_le(15), 65535u);
  EXPECT_EQ(bucket_le(0), 1u);
  EXPECT_EQ(bucket_le(63), UINT64_MAX);
}

TEST(LatencyHist, PercentilesInterpolateWithinBuckets) {
  Buckets b{};
  EXPECT_EQ(percentile(b, 0.5, 0), 0);
  b[10] = 100;  // [1024, 2048)
  EXPECT_DOUBLE_EQ(percentile(b, 0.5, 0), 1536);
  EXPECT_DOUBLE_EQ(percentile(b, 1.0, 0), 2048);
  EXPECT_DOUBLE_EQ(percentile(b, 0.5, 1500), 1024 + 0.5 * (1500 - 1024)) << "the maximum caps the top bucket";
  b[20] = 100;  // [1048576, 2097152)
  EXPECT_DOUBLE_EQ(percentile(b, 0.25, 0), 1536);
  EXPECT_DOUBLE_EQ(percentile(b, 0.5, 0), 2048) << "exactly the end of the first bucket";
  EXPECT_DOUBLE_EQ(percentile(b, 0.75, 0), 1048576 + 0.5 * 1048576);
  EXPECT_DOUBLE_EQ(percentile(b, 0.99, 2000000), 1048576 + 0.98 * (2000000 - 1048576));
}

TEST(LatencyHist, PercentileSkipsEmptyBuckets) {
  Buckets b{};
  b[3] = 1;
  b[40] = 1;
  EXPECT_DOUBLE_EQ(percentile(b, 0.5, 0), 16);
  EXPECT_GE(percentile(b, 0.51, 0), static_cast<double>(bucket_low(40)));
}

TEST(LatencyHist, RenderedText) {
  LatencyStats s;
  s.buckets[15] = 20;
  s.buckets[20] = 5;
  s.max_ns = 2000500;
  fmt::memory_buffer out;
  render_histogram(out, "cuMemAlloc_v2 (driver)", s);
  std::string t(out.data(), out.size());
  EXPECT_NE(t.find("cuMemAlloc_v2 (driver)\n"), std::string::npos);
  EXPECT_NE(t.find("32.768 -> 65.536 : 20        |****************************************|"), std::string::npos) << t;
  EXPECT_NE(t.find("1048.576 -> 2097.152 : 5         |**********"), std::string::npos) << t;
  EXPECT_NE(t.find("65.536 -> 131.072 : 0         |"), std::string::npos) << "empty buckets between are shown";
  EXPECT_NE(t.find("count 25"), std::string::npos);
  EXPECT_NE(t.find("max 2000.5 µs"), std::string::npos) << t;
  EXPECT_NE(t.find("interpolated within log2 buckets"), std::string::npos);
  EXPECT_EQ(format_us(1500), "1.5");
  EXPECT_EQ(format_us(2000000), "2000");
}

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

TEST(LatencyHist, NearestRank) {
  EXPECT_EQ(nearest_rank(0.5, 10), 5u);
  EXPECT_EQ(nearest_rank(0.95, 10), 10u);
  EXPECT_EQ(nearest_rank(0.0, 10), 1u);
  EXPECT_EQ(nearest_rank(1.0, 7), 7u);
  EXPECT_EQ(nearest_rank(0.5, 0), 0u);
  EXPECT_EQ(nearest_rank(0.07, 100), 7u) << "0.07 * 100 is 7.000000000000001 in doubles";
  EXPECT_EQ(nearest_rank(0.99, 100), 99u);
  EXPECT_EQ(nearest_rank(0.95, 1000), 950u);
}

// log2 buckets (BPF's): a percentile is the bucket its rank falls in, the top one capped by the max.
TEST(LatencyHist, PercentileRangeIsTheBucketOfTheRank) {
  Buckets b{};
  EXPECT_EQ(percentile_range(b, 0.5, 0).hi, 0u);
  b[10] = 100;  // [1024, 2047]
  EXPECT_EQ(percentile_range(b, 0.5, 0).lo, 1024u);
  EXPECT_EQ(percentile_range(b, 0.5, 0).hi, 2047u);
  EXPECT_EQ(percentile_range(b, 0.5, 1500).hi, 1500u) << "no value was over the maximum";
  b[20] = 100;  // [1048576, 2097151]
  EXPECT_EQ(percentile_range(b, 0.5, 2000000).lo, 1024u) << "rank 100 is the first bucket's last";
  EXPECT_EQ(percentile_range(b, 0.5, 2000000).hi, 2047u);
  EXPECT_EQ(percentile_range(b, 0.505, 2000000).lo, 1048576u);
  EXPECT_EQ(percentile_range(b, 0.99, 2000000).hi, 2000000u);
  b[3] = 1;
  b[10] = 0;
  EXPECT_EQ(percentile_range(b, 0.0, 0).lo, 8u) << "empty buckets skipped";
  EXPECT_EQ(percentile_range(b, 0.0, 0).hi, 15u);
  EXPECT_EQ(format_range_us({32768, 65535}), "32.768-65.536") << "the bounds as the rows print them";
  EXPECT_EQ(format_range_us({1048576, 2000500}), "1048.576-2000.5") << "capped: the maximum itself";
  EXPECT_EQ(format_range_us({1500, 1500}), "1.5");
}

namespace {

uint64_t exact(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  return v[nearest_rank(q, v.size()) - 1];
}

// Every percentile of the values within 1 % of the exact nearest-rank one.
void expect_within_1pct(const std::vector<uint64_t>& v, const char* what) {
  Percentiles p;
  for (uint64_t x : v) p.add(x);
  ASSERT_EQ(p.count(), v.size());
  EXPECT_EQ(p.max(), *std::max_element(v.begin(), v.end()));
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    const auto want = static_cast<double>(exact(v, q)), got = static_cast<double>(p.at(q));
    EXPECT_LE(std::abs(got - want), 0.01 * want) << what << " q " << q << ": " << got << " for " << want;
  }
}

struct Lcg {
  uint64_t s = 42;
  uint64_t operator()(uint64_t n) { return ((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % n; }
};

}  // namespace

// The run: frames of 16.3 ms with a few of 17 ms and 33.55 ms. log2 buckets put 16.3 ms
// in [8.4, 16.8) ms and 17 ms in [16.8, 33.6) ms, and interpolating there printed p50 13.09 ms.
TEST(Percentiles, FramesOf16msWithAFewSlowOnesAreExact) {
  std::vector<uint64_t> v(940, 16'300'000);
  v.insert(v.end(), 45, 17'000'000);
  v.insert(v.end(), 15, 33'550'000);
  Percentiles p;
  for (uint64_t x : v) p.add(x);
  EXPECT_EQ(p.at(0.5), 16'300'000u);
  EXPECT_EQ(p.at(0.95), 17'000'000u);
  EXPECT_EQ(p.at(0.99), 33'550'000u);
  EXPECT_EQ(p.at(1.0), 33'550'000u);
  EXPECT_EQ(p.at(0.0), 16'300'000u);
  expect_within_1pct(v, "16.3 ms frames");
}

TEST(Percentiles, JitteredBimodalAndWideSetsWithin1Percent) {
  Lcg r;
  std::vector<uint64_t> frames;
  for (int i = 0; i < 1000; i++) frames.push_back(16'000'000 + r(600'000) + (i % 50 == 0 ? 17'000'000 : 0));
  expect_within_1pct(frames, "jittered frames");
  std::vector<uint64_t> bimodal;
  for (int i = 0; i < 600; i++) bimodal.push_back(2'000 + r(500));
  for (int i = 0; i < 400; i++) bimodal.push_back(5'000'000 + r(2'000'000));
  expect_within_1pct(bimodal, "bimodal");
  std::vector<uint64_t> wide;  // 0 ns to ~70 s, log-uniform
  for (int i = 0; i < 5000; i++) wide.push_back(r(uint64_t{1} << r(37)));
  expect_within_1pct(wide, "wide");
  std::vector<uint64_t> small{0, 1, 2, 3, 100, 127, 128, 200, 255};
  expect_within_1pct(small, "small values, exact");
}

TEST(Percentiles, TheWholeRangeAndNoValues) {
  Percentiles p;
  EXPECT_EQ(p.at(0.5), 0u);
  EXPECT_EQ(p.count(), 0u);
  p.add(UINT64_MAX);
  p.add(0);
  p.add(UINT64_MAX - 1);
  EXPECT_EQ(p.at(0.0), 0u);
  EXPECT_GE(p.at(0.5), UINT64_MAX - UINT64_MAX / 128) << "within its bucket, not wrapped past 2^64";
  EXPECT_EQ(p.at(1.0), UINT64_MAX);
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
  EXPECT_NE(t.find("\n  count 25  p50 32.768-65.536 µs  p95 1048.576-2000.5 µs  p99 1048.576-2000.5 µs  max 2000.5 µs  "
                   "(percentiles: the log2 bucket each falls in)\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(format_us(1500), "1.5");
  EXPECT_EQ(format_us(2000000), "2000");
}

// Where every value was seen (frames), the percentiles are printed as values.
TEST(LatencyHist, RenderedTextWithEveryValue) {
  LatencyStats s;
  Percentiles p;
  for (uint64_t d : {16'300'000, 16'300'000, 16'300'000, 17'000'000, 33'550'000}) {
    s.buckets[bucket_of(d)]++;
    s.max_ns = std::max(s.max_ns, d);
    p.add(d);
  }
  fmt::memory_buffer out;
  render_histogram(out, "frame times", s, &p);
  std::string t(out.data(), out.size());
  EXPECT_NE(t.find("\n  count 5  p50 16300 µs  p95 33550 µs  p99 33550 µs  max 33550 µs\n"), std::string::npos) << t;
}

#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace gpuscope {

inline constexpr unsigned kLatBuckets = 64;  // bucket b holds [2^b, 2^(b+1)) ns; bucket 0 also 0
using Buckets = std::array<uint64_t, kLatBuckets>;

inline uint64_t bucket_low(unsigned b) { return b == 0 ? 0 : uint64_t{1} << b; }
inline uint64_t bucket_le(unsigned b) { return b >= 63 ? UINT64_MAX : (uint64_t{2} << b) - 1; }
unsigned bucket_of(uint64_t ns);

// The nearest rank of the fraction q of n values: ceil(q*n), within 1..n; 0 when n is 0.
uint64_t nearest_rank(double q, uint64_t n);

// Where the nearest-rank percentile q of log2 buckets lies: its bucket, [lo, hi] inclusive, hi
// capped by max_ns when non-zero (no value was larger). {0, 0} when there are no values.
struct BucketRange {
  uint64_t lo = 0, hi = 0;
};
BucketRange percentile_range(const Buckets& b, double q, uint64_t max_ns);
// "32.768-65.536" µs: the bounds as the histogram's rows print them (hi exclusive unless capped).
std::string format_range_us(const BucketRange& r);

// Values seen one at a time (frames): nearest-rank percentiles within 1 % in bounded memory.
// Log-linear buckets, 128 a power of two (at most 7424, 16 bytes each, only those from the
// smallest value's to the largest's kept): values of one bucket differ by under 1/128 of either.
class Percentiles {
 public:
  void add(uint64_t v);
  uint64_t count() const { return n_; }
  uint64_t max() const { return max_; }
  // The nearest-rank value at q: exact at the ends and where a bucket holds one value, else the
  // mean of its bucket's values (exact when they are equal), under 0.8 % from the true one.
  uint64_t at(double q) const;

 private:
  static constexpr unsigned kSubBits = 7;
  static uint32_t index_of(uint64_t v);
  static uint64_t low_of(uint32_t i);
  struct Cell {
    uint64_t n = 0;
    double above_low = 0;  // the sum of the values' distances from the bucket's low bound
  };
  std::vector<Cell> cells_;
  uint32_t first_ = 0;
  uint64_t n_ = 0, min_ = UINT64_MAX, max_ = 0;
};

struct LatencyStats {
  Buckets buckets{};
  uint64_t max_ns = 0;
  uint64_t count() const;
};

// bcc-style text histogram in µs, then count, p50/p95/p99 and max: from `values` when every value
// was seen, else as the log2 bucket each falls in.
void render_histogram(fmt::memory_buffer& out, const std::string& title, const LatencyStats& s,
                      const Percentiles* values = nullptr);
std::string format_us(double ns);

}  // namespace gpuscope

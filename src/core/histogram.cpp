#include "core/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace gpuscope {

unsigned bucket_of(uint64_t ns) { return ns ? 63 - std::countl_zero(ns) : 0; }

uint64_t LatencyStats::count() const {
  uint64_t n = 0;
  for (auto c : buckets) n += c;
  return n;
}

uint64_t nearest_rank(double q, uint64_t n) {
  if (n == 0) return 0;
  // q*n carries q's binary rounding (0.07 * 100 is 7.000000000000001): an exact integer rank
  // must not round up to the next one.
  const double x = std::clamp(q, 0.0, 1.0) * static_cast<double>(n);
  const auto r = static_cast<uint64_t>(std::ceil(x - x * 1e-12));
  return std::clamp<uint64_t>(r, 1, n);
}

BucketRange percentile_range(const Buckets& b, double q, uint64_t max_ns) {
  uint64_t total = 0;
  for (auto c : b) total += c;
  const uint64_t rank = nearest_rank(q, total);
  uint64_t seen = 0;
  for (unsigned i = 0; i < kLatBuckets && rank; i++) {
    seen += b[i];
    if (seen < rank) continue;
    BucketRange r{bucket_low(i), bucket_le(i)};
    if (max_ns) r.hi = std::min(r.hi, max_ns);
    r.lo = std::min(r.lo, r.hi);
    return r;
  }
  return {};
}

std::string format_range_us(const BucketRange& r) {
  const bool capped = r.hi != bucket_le(bucket_of(r.hi));
  const double hi = static_cast<double>(r.hi) + (capped ? 0 : 1);
  if (static_cast<double>(r.lo) == hi) return format_us(hi);
  return format_us(static_cast<double>(r.lo)) + "-" + format_us(hi);
}

uint32_t Percentiles::index_of(uint64_t v) {
  if (v < (uint64_t{1} << kSubBits)) return static_cast<uint32_t>(v);
  const unsigned shift = 63 - std::countl_zero(v) - kSubBits;
  return ((shift + 1) << kSubBits) + static_cast<uint32_t>((v >> shift) - (uint64_t{1} << kSubBits));
}

uint64_t Percentiles::low_of(uint32_t i) {
  if (i < (1u << kSubBits)) return i;
  const unsigned shift = (i >> kSubBits) - 1;
  return ((uint64_t{1} << kSubBits) + (i & ((1u << kSubBits) - 1))) << shift;
}

void Percentiles::add(uint64_t v) {
  const uint32_t i = index_of(v);
  if (cells_.empty()) {
    first_ = i;
    cells_.resize(1);
  } else if (i < first_) {
    cells_.insert(cells_.begin(), first_ - i, Cell{});
    first_ = i;
  } else if (i - first_ >= cells_.size()) {
    cells_.resize(i - first_ + 1);
  }
  Cell& c = cells_[i - first_];
  c.n++;
  c.above_low += static_cast<double>(v - low_of(i));
  n_++;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
}

uint64_t Percentiles::at(double q) const {
  const uint64_t rank = nearest_rank(q, n_);
  if (rank == 0) return 0;
  if (rank == 1) return min_;
  if (rank == n_) return max_;
  uint64_t seen = 0;
  for (size_t k = 0; k < cells_.size(); k++) {
    const Cell& c = cells_[k];
    seen += c.n;
    if (seen < rank) continue;
    const uint32_t i = first_ + static_cast<uint32_t>(k);
    // The bucket's width less one: double's rounding may carry the mean past its top.
    const uint64_t last = i < (2u << kSubBits) ? 0 : (uint64_t{1} << ((i >> kSubBits) - 1)) - 1;
    const auto mean = static_cast<uint64_t>(std::min(std::round(c.above_low / static_cast<double>(c.n)), 0x1p63));
    return std::clamp(low_of(i) + std::min(mean, last), min_, max_);
  }
  return max_;
}

std::string format_us(double ns) {
  std::string s = fmt::format("{:.3f}", ns / 1000.0);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

void render_histogram(fmt::memory_buffer& out, const std::string& title, const LatencyStats& s,
                      const Percentiles* values) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{}\n", title);
  unsigned first = kLatBuckets, last = 0;
  uint64_t peak = 0;
  for (unsigned i = 0; i < kLatBuckets; i++) {
    if (!s.buckets[i]) continue;
    first = std::min(first, i);
    last = i;
    peak = std::max(peak, s.buckets[i]);
  }
  if (first == kLatBuckets) {
    fmt::format_to(it, "  no calls\n");
    return;
  }
  fmt::format_to(it, "  {:>24} : {:<9} {}\n", "µs", "count", "distribution");
  for (unsigned i = first; i <= last; i++) {
    std::string range =
        format_us(static_cast<double>(bucket_low(i))) + " -> " + format_us(static_cast<double>(bucket_le(i)) + 1);
    size_t bar = static_cast<size_t>((s.buckets[i] * 40 + peak - 1) / peak);
    fmt::format_to(it, "  {:>24} : {:<9} |{:<40}|\n", range, s.buckets[i], std::string(bar, '*'));
  }
  fmt::format_to(it, "  count {}", s.count());
  for (double q : {0.50, 0.95, 0.99}) {
    const std::string v = values ? format_us(static_cast<double>(values->at(q)))
                                 : format_range_us(percentile_range(s.buckets, q, s.max_ns));
    fmt::format_to(it, "  p{} {} µs", static_cast<int>(std::lround(q * 100)), v);
  }
  fmt::format_to(it, "  max {} µs{}\n", format_us(static_cast<double>(s.max_ns)),
                 values ? "" : "  (percentiles: the log2 bucket each falls in)");
}

}  // namespace gpuscope

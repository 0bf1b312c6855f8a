#include "core/histogram.h"

#include <algorithm>
#include <bit>

namespace gpuscope {

unsigned bucket_of(uint64_t ns) { return ns ? 63 - std::countl_zero(ns) : 0; }

uint64_t LatencyStats::count() const {
  uint64_t n = 0;
  for (auto c : buckets) n += c;
  return n;
}

double percentile(const Buckets& b, double q, uint64_t max_ns) {
  uint64_t total = 0;
  unsigned last = 0;
  for (unsigned i = 0; i < kLatBuckets; i++)
    if (b[i]) total += b[i], last = i;
  if (total == 0) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
  uint64_t below = 0;
  for (unsigned i = 0; i <= last; i++) {
    if (!b[i]) continue;
    if (static_cast<double>(below + b[i]) >= rank || i == last) {
      double lo = static_cast<double>(bucket_low(i));
      double hi = static_cast<double>(bucket_le(i)) + 1;
      if (max_ns && i == last) hi = std::max(lo, std::min(hi, static_cast<double>(max_ns)));
      double frac = std::clamp((rank - static_cast<double>(below)) / static_cast<double>(b[i]), 0.0, 1.0);
      return lo + frac * (hi - lo);
    }
    below += b[i];
  }
  return 0;
}

std::string format_us(double ns) {
  std::string s = fmt::format("{:.3f}", ns / 1000.0);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

void render_histogram(fmt::memory_buffer& out, const std::string& title, const LatencyStats& s) {
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
  fmt::format_to(
      it, "  count {}  p50 {} µs  p95 {} µs  p99 {} µs  max {} µs  (percentiles interpolated within log2 buckets)\n",
      s.count(), format_us(percentile(s.buckets, 0.50, s.max_ns)), format_us(percentile(s.buckets, 0.95, s.max_ns)),
      format_us(percentile(s.buckets, 0.99, s.max_ns)), format_us(static_cast<double>(s.max_ns)));
}

}  // namespace gpuscope

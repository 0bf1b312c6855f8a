#pragma once
#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace gpuscope {

inline constexpr unsigned kLatBuckets = 64;  // bucket b holds [2^b, 2^(b+1)) ns; bucket 0 also 0
using Buckets = std::array<uint64_t, kLatBuckets>;

inline uint64_t bucket_low(unsigned b) { return b == 0 ? 0 : uint64_t{1} << b; }
inline uint64_t bucket_le(unsigned b) { return b >= 63 ? UINT64_MAX : (uint64_t{2} << b) - 1; }
unsigned bucket_of(uint64_t ns);

// The value below which a fraction q of the calls fall, interpolated linearly inside the
// bucket it lands in. The top bucket's range is capped by max_ns (when non-zero), since no
// call took longer. 0 when there are no calls.
double percentile(const Buckets& b, double q, uint64_t max_ns);

struct LatencyStats {
  Buckets buckets{};
  uint64_t max_ns = 0;
  uint64_t count() const;
};

// bcc-style text histogram in µs, then count, p50/p95/p99 and max.
void render_histogram(fmt::memory_buffer& out, const std::string& title, const LatencyStats& s);
std::string format_us(double ns);

}  // namespace gpuscope

#include "core/clock.h"

#include <time.h>

namespace gpuscope {

static uint64_t now_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t boottime_ns() { return now_ns(CLOCK_BOOTTIME); }
uint64_t realtime_ns() { return now_ns(CLOCK_REALTIME); }

int64_t realtime_minus_boottime_ns() {
  int64_t best = 0;
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 10; i++) {
    uint64_t r1 = realtime_ns(), b = boottime_ns(), r2 = realtime_ns();
    uint64_t gap = r2 - r1;
    if (gap < best_gap) {
      best_gap = gap;
      best = static_cast<int64_t>(r1 + gap / 2) - static_cast<int64_t>(b);
    }
    if (gap < 2000) break;
  }
  return best;
}

}  // namespace gpuscope

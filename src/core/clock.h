#pragma once
#include <cstdint>

namespace gpuscope {
// CLOCK_REALTIME - CLOCK_BOOTTIME, from a BOOTTIME read between two REALTIME reads,
// retried while those reads are far apart.
int64_t realtime_minus_boottime_ns();
uint64_t boottime_ns();
uint64_t realtime_ns();
}  // namespace gpuscope

/* gpuscope latency: map layouts shared by latency.bpf.c and userspace. */
#ifndef GPUSCOPE_LATENCY_H
#define GPUSCOPE_LATENCY_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#define GS_LAT_BUCKETS 64 /* bucket b holds [2^b, 2^(b+1)) ns; bucket 0 also holds 0 */

struct gs_lat_key {
	__u32 pid; /* 0 unless --per-process */
	__u32 api;
};

/* Per CPU: one lookup per call updates the histogram, the maximum and, for the common
 * return code 0, the return-code count; other codes go to the separate rets map. */
struct gs_lat_stats {
	__u64 buckets[GS_LAT_BUCKETS];
	__u64 max_ns;
	__u64 ret_zero;
};

struct gs_lat_ret_key {
	__u32 pid;
	__u16 api;
	__u16 pad;
	__s32 ret;
	__u32 pad2;
};

/* Per site-table row, summed over CPUs: entries the probe took, and those not timed. */
struct gs_lat_site {
	__u64 entries;
	__u64 nested;    /* inside an outer call of the same layer */
	__u64 filtered;  /* -c did not match */
	__u64 unsampled; /* launches left untimed by the launch sample */
};

enum gs_lat_drop { GS_LAT_DROP_STATE_FULL, GS_LAT_DROP_HIST_FULL, GS_LAT_DROP_COUNT };

#ifdef __cplusplus
static_assert(sizeof(gs_lat_key) == 8);
static_assert(sizeof(gs_lat_stats) == 8 * (GS_LAT_BUCKETS + 2));
static_assert(sizeof(gs_lat_ret_key) == 16);
static_assert(sizeof(gs_lat_site) == 32);
#endif

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/* log2 histograms: bucket b counts the values in [2^b, 2^(b+1)), bucket 0 also 0, so that 64
 * buckets hold every __u64. Userspace reads them with core/histogram.h (bucket_low, bucket_le).
 *
 *   gs_log2(v)                      floor(log2(v)), 0 for 0: branch-free, no loop
 *   gs_hist_add(buckets, n, v)      counts v in a histogram of n buckets (n a power of 2; a value
 *                                   past the last bucket wraps, which 64 buckets never do)
 */
#ifndef GPUSCOPE_COMMON_LOG2_HIST_BPF_H
#define GPUSCOPE_COMMON_LOG2_HIST_BPF_H

static __always_inline __u32 gs_log2(__u64 v)
{
	__u32 r = 0, s;
	s = (v > 0xFFFFFFFFULL) << 5;
	v >>= s;
	r |= s;
	s = (v > 0xFFFF) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	r |= (v >> 1);
	return r;
}

static __always_inline void gs_hist_add(__u64 *buckets, const __u32 n, __u64 v)
{
	buckets[gs_log2(v) & (n - 1)] += 1;
}

#endif

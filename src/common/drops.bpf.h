/* SPDX-License-Identifier: GPL-2.0 */
/* Events and updates that could not be delivered, counted per CPU and per reason; userspace
 * sums the slots (percpu_sum) and reports them. GS_DROP_COUNTERS(map, reasons) defines the
 * map and count_drop(reason). */
#ifndef GPUSCOPE_DROPS_BPF_H
#define GPUSCOPE_DROPS_BPF_H

#define GS_DROP_COUNTERS(map, reasons)                                  \
	struct {                                                        \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                \
		__uint(max_entries, reasons);                           \
		__type(key, __u32);                                     \
		__type(value, __u64);                                   \
	} map SEC(".maps");                                             \
	static __always_inline void count_drop(__u32 why)               \
	{                                                               \
		__u64 *n = bpf_map_lookup_elem(&map, &why);             \
		if (n)                                                  \
			*n += 1;                                        \
	}

#endif

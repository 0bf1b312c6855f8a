/* SPDX-License-Identifier: GPL-2.0 */
/* The map shapes that every capability declares: a ring buffer, one value per CPU, and per-CPU
 * counters (drop counters among them), hashes, arrays and stack maps. The map names stay the
 * callers' (skeletons and userspace find them by name).
 *
 *   GS_RINGBUF(map, bytes)               a ring buffer of `bytes` (a power of 2, a page at least)
 *   GS_PERCPU_VALUE(map, type)           one `type` per CPU: scratch too large for the BPF stack,
 *                                        a zeroed template, per-CPU state
 *   gs_percpu(&map)                      this CPU's value (never NULL there, but the verifier
 *                                        wants the check)
 *   GS_PERCPU_COUNTERS(map, slots, inc)  `slots` __u64 counters per CPU, and inc(slot), which adds
 *                                        one to this CPU's
 *   gs_counter_add(&map, slot, n)        adds n
 *   GS_DROP_COUNTERS(map, reasons)       events and updates that could not be delivered, per
 *                                        reason: the counters and count_drop(reason)
 *   GS_HASH(map, entries, key, value)    a hash map; GS_LRU_HASH and GS_ARRAY alike
 *   GS_STACK_TRACE(map, entries, depth)  stack ids to `depth` return addresses
 *   GS_MAP_DEF(map, type, entries, flags, key, value)  the definition they share
 *
 * Per-CPU counters need no atomics; userspace sums the CPUs' slots (percpu_sum) and reports them.
 * The including object needs vmlinux.h. */
#ifndef GPUSCOPE_COMMON_MAPS_BPF_H
#define GPUSCOPE_COMMON_MAPS_BPF_H

#include <bpf/bpf_helpers.h>

#define GS_RINGBUF(map, bytes)                                                                     \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                                                \
		__uint(max_entries, bytes);                                                        \
	} map SEC(".maps")

/* A map with every attribute given (0: the default), for the shapes below. */
#define GS_MAP_DEF(map, map_type, entries, flags, key_type, value_type)                            \
	struct {                                                                                   \
		__uint(type, map_type);                                                            \
		__uint(max_entries, entries);                                                      \
		__uint(map_flags, flags);                                                          \
		__type(key, key_type);                                                             \
		__type(value, value_type);                                                         \
	} map SEC(".maps")

#define GS_HASH(map, entries, key_type, value_type)                                                \
	GS_MAP_DEF(map, BPF_MAP_TYPE_HASH, entries, 0, key_type, value_type)
#define GS_LRU_HASH(map, entries, key_type, value_type)                                            \
	GS_MAP_DEF(map, BPF_MAP_TYPE_LRU_HASH, entries, 0, key_type, value_type)
#define GS_ARRAY(map, entries, key_type, value_type)                                               \
	GS_MAP_DEF(map, BPF_MAP_TYPE_ARRAY, entries, 0, key_type, value_type)

#define GS_STACK_TRACE(map, entries, depth)                                                        \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                                            \
		__uint(max_entries, entries);                                                      \
		__uint(key_size, sizeof(__u32));                                                   \
		__uint(value_size, (depth) * sizeof(__u64));                                       \
	} map SEC(".maps")

#define GS_PERCPU_VALUE(map, value_type)                                                           \
	GS_MAP_DEF(map, BPF_MAP_TYPE_PERCPU_ARRAY, 1, 0, __u32, value_type)

/* The key is a constant in .rodata rather than a zero stored on the stack: a lookup takes one
 * instruction to pass it, not four. */
static const __u32 gs_zero_key = 0;

static __always_inline void *gs_percpu(void *map)
{
	return bpf_map_lookup_elem(map, &gs_zero_key);
}

static __always_inline void gs_counter_add(void *map, __u32 slot, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(map, &slot);
	if (c)
		*c += n;
}

#define GS_PERCPU_COUNTERS(map, slots, inc)                                                        \
	GS_MAP_DEF(map, BPF_MAP_TYPE_PERCPU_ARRAY, slots, 0, __u32, __u64);                        \
	static __always_inline void inc(__u32 slot)                                                \
	{                                                                                          \
		gs_counter_add(&map, slot, 1);                                                     \
	}

#define GS_DROP_COUNTERS(map, reasons) GS_PERCPU_COUNTERS(map, reasons, count_drop)

#endif

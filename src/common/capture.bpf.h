/* SPDX-License-Identifier: GPL-2.0 */
/* Stream capture: launches on a stream under capture (cudaStreamBeginCapture ..
 * cudaStreamEndCapture, and the driver's) are recorded into a graph, not run. Each program
 * that needs it declares its own state with GS_CAPTURE_STATE(), which defines
 *
 *   capturing         hash of (pid, stream) under capture
 *   captures_active   how many, host-wide: launches look the map up only while it is > 0
 *   gs_capture_begin(pid, stream), gs_capture_end(pid, stream)
 *   gs_capture_any()              any stream under capture (a global load, no helper call)
 *   gs_capture_lookup(pid, stream)  that stream under capture (a map lookup)
 *   gs_is_captured(pid, stream)   both: the lookup only while any is
 *
 * Where begin and end are taken (entry or return) is the program's choice. */
#ifndef GPUSCOPE_COMMON_CAPTURE_BPF_H
#define GPUSCOPE_COMMON_CAPTURE_BPF_H

#include <bpf/bpf_helpers.h>

#define GS_CAPTURE_MAX 4096

struct gs_capture_key {
	__u32 pid;
	__u32 pad;
	__u64 stream;
};

#define GS_CAPTURE_STATE()                                                                         \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                                                   \
		__uint(max_entries, GS_CAPTURE_MAX);                                               \
		__type(key, struct gs_capture_key);                                                \
		__type(value, __u8);                                                               \
	} capturing SEC(".maps");                                                                  \
                                                                                                   \
	__s64 captures_active = 0;                                                                 \
                                                                                                   \
	static __always_inline bool gs_capture_any(void)                                           \
	{                                                                                          \
		return captures_active > 0;                                                        \
	}                                                                                          \
                                                                                                   \
	static __always_inline bool gs_capture_lookup(__u32 pid, __u64 stream)                     \
	{                                                                                          \
		struct gs_capture_key k = {.pid = pid, .stream = stream};                          \
		return bpf_map_lookup_elem(&capturing, &k) != NULL;                                \
	}                                                                                          \
                                                                                                   \
	static __always_inline bool gs_is_captured(__u32 pid, __u64 stream)                        \
	{                                                                                          \
		return gs_capture_any() && gs_capture_lookup(pid, stream);                         \
	}                                                                                          \
                                                                                                   \
	static __always_inline void gs_capture_begin(__u32 pid, __u64 stream)                      \
	{                                                                                          \
		struct gs_capture_key k = {.pid = pid, .stream = stream};                          \
		__u8 one = 1;                                                                      \
		if (bpf_map_update_elem(&capturing, &k, &one, BPF_NOEXIST) == 0)                   \
			__sync_fetch_and_add(&captures_active, 1);                                 \
	}                                                                                          \
                                                                                                   \
	static __always_inline void gs_capture_end(__u32 pid, __u64 stream)                        \
	{                                                                                          \
		struct gs_capture_key k = {.pid = pid, .stream = stream};                          \
		if (bpf_map_delete_elem(&capturing, &k) == 0)                                      \
			__sync_fetch_and_sub(&captures_active, 1);                                 \
	}

#endif

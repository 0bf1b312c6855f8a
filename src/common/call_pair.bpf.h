/* SPDX-License-Identifier: GPL-2.0 */
/* A probed call's entry paired with its return, per thread: trace, latency, memleak, kernels.
 *
 * What an entry probe keeps for the return probe (start time, arguments, the row) lives in
 * task-local storage rather than a hash keyed by tid: it is a pointer away from the task, costs
 * no insert or delete per call, and the kernel frees it with the thread, so a thread that dies
 * inside a call leaves nothing behind. Probed calls nest (a runtime call reaches the driver's, a
 * library calls itself), so each slot of that state counts its depth and only the outermost call
 * of a slot is handled:
 *
 *   GS_THREAD_STORAGE(map, type)  the task storage map: one value of `type` per thread
 *   gs_thread_state_new(&map)     at an entry: this thread's value, zeroed at its first entry
 *                                 (NULL: no memory for it; count a drop)
 *   gs_thread_state(&map)         at a return: this thread's value, NULL if it has none
 *   GS_CALL_ENTER(depth)          at an entry: true for the outermost call of the slot, which the
 *                                 caller then records; false for a nested one. Counts the call.
 *   GS_CALL_LEAVE(depth)          at a return: true when the outermost call returns (what its
 *                                 entry recorded is complete); false for a nested call, and for a
 *                                 return whose entry was not seen (probes attached mid-call).
 *
 * depth is a slot's counter (an unsigned struct member, of any width). Entering and leaving are a
 * load, an add and a store each. The including object needs vmlinux.h. */
#ifndef GPUSCOPE_COMMON_CALL_PAIR_BPF_H
#define GPUSCOPE_COMMON_CALL_PAIR_BPF_H

#include <bpf/bpf_helpers.h>
#include "common/maps.bpf.h"

#define GS_THREAD_STORAGE(map, value_type)                                                         \
	GS_MAP_DEF(map, BPF_MAP_TYPE_TASK_STORAGE, 0, BPF_F_NO_PREALLOC, int, value_type)

static __always_inline void *gs_thread_state_new(void *map)
{
	return bpf_task_storage_get(map, bpf_get_current_task_btf(), 0,
	                            BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline void *gs_thread_state(void *map)
{
	return bpf_task_storage_get(map, bpf_get_current_task_btf(), 0, 0);
}

#define GS_CALL_ENTER(depth) ((depth)++ == 0)
#define GS_CALL_LEAVE(depth) ((depth) != 0 && --(depth) == 0)

#endif

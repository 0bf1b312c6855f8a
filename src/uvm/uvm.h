/* gpuscope uvm: map layouts shared by uvm.bpf.c and userspace. */
#ifndef GPUSCOPE_UVM_H
#define GPUSCOPE_UVM_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

enum gs_uvm_counter { GS_UVM_REPLAYABLE, GS_UVM_NON_REPLAYABLE, GS_UVM_THRASHING, GS_UVM_COUNTERS };

struct gs_uvm_thrash_val {
	__u64 count;
	__u32 last_pid; /* the task that recorded it: often a driver worker, so userspace also asks /proc */
	__u32 pad;
};

#ifdef __cplusplus
static_assert(sizeof(gs_uvm_thrash_val) == 16);
#endif

#endif

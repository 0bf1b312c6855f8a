/* gpuscope errors: the sticky CUDA errors' map and event layouts, shared by errors.bpf.c and
 * userspace. */
#ifndef GPUSCOPE_ERRORS_H
#define GPUSCOPE_ERRORS_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#define GS_ERR_MAX_PROCS 16384  /* processes with state: a successful sync or a sticky error */
#define GS_ERR_MAX_COUNTS 16384 /* (pid, api, code) counters of the sticky errors after the first */

/* Per process. */
struct gs_err_proc {
	__u64 last_ok_sync_ns; /* CLOCK_MONOTONIC of the last synchronizing call that returned 0 */
	__u32 reported;        /* its first sticky error was sent */
	__u32 pad;
};

struct gs_err_count_key {
	__u32 pid;
	__u16 api; /* site-table row */
	__u16 pad;
	__s32 code;
	__u32 pad2;
};

/* The first sticky error of a process. */
struct gs_err_event {
	__u32 pid;
	__u32 tid;
	__u64 ts_ns;           /* CLOCK_MONOTONIC of the return */
	__u64 last_ok_sync_ns; /* 0: none since it was first seen */
	__u64 cgroup_id;
	__s32 code;      /* cudaError_t or CUresult, by the row's layer */
	__u32 api;       /* site-table row */
	char comm[16];   /* the process's (group leader's) name */
	char thread[16]; /* the calling thread's */
};

enum gs_err_drop {
	GS_ERR_DROP_EVENTS,     /* ring buffer full: a first sticky error not sent */
	GS_ERR_DROP_PROCS_FULL, /* no per-process state: a sync or an error not recorded */
	GS_ERR_DROP_COUNTS_FULL,
	GS_ERR_DROP_COUNT
};

#ifdef __cplusplus
static_assert(sizeof(gs_err_proc) == 16);
static_assert(sizeof(gs_err_count_key) == 16);
static_assert(sizeof(gs_err_event) == 72);
#endif

#endif

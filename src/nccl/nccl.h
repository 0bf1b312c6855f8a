/* SPDX-License-Identifier: GPL-2.0 */
/* The NCCL collector's layout, shared by nccl.bpf.c and user space: one record per call of a
 * probed libnccl.so.2 function (collectives, point-to-point, groups, communicator life). */
#ifndef GPUSCOPE_NCCL_H
#define GPUSCOPE_NCCL_H

#include "common/events.h"
#ifdef __cplusplus
#include <stddef.h>
#endif

/* The probed functions; the attach cookie of both probes of a site. */
enum gs_nccl_op {
	GS_NCCL_ALL_REDUCE = 1,
	GS_NCCL_BROADCAST,
	GS_NCCL_BCAST,
	GS_NCCL_REDUCE,
	GS_NCCL_ALL_GATHER,
	GS_NCCL_REDUCE_SCATTER,
	GS_NCCL_ALL_TO_ALL,
	GS_NCCL_GATHER,
	GS_NCCL_SCATTER,
	GS_NCCL_SEND,
	GS_NCCL_RECV,
	GS_NCCL_GROUP_START,
	GS_NCCL_GROUP_END,
	/* communicator life: a gs_nccl_life record each */
	GS_NCCL_INIT_RANK,
	GS_NCCL_INIT_RANK_CONFIG,
	GS_NCCL_INIT_RANK_SCALABLE,
	GS_NCCL_INIT_ALL,
	GS_NCCL_SPLIT,
	GS_NCCL_SHRINK,
	GS_NCCL_FINALIZE,
	GS_NCCL_DESTROY,
	GS_NCCL_ABORT,
	GS_NCCL_CU_DEVICE,       /* ncclCommCuDevice: the communicator's CUDA device */
	GS_NCCL_USER_RANK,       /* ncclCommUserRank: its rank (a split's is known only so) */
	GS_NCCL_COUNT,           /* ncclCommCount: its ranks */
	GS_NCCL_GET_ASYNC_ERROR, /* ncclCommGetAsyncError: only results other than ncclSuccess */
	GS_NCCL_PROC_EXIT,       /* not a function: a process that had called NCCL exited */
	GS_NCCL_OP_COUNT,
};
#define GS_NCCL_FIRST_LIFE GS_NCCL_INIT_RANK

/* Collectives: all ranks of the communicator take part; each gets a sequence number. */
#define GS_NCCL_IS_COLLECTIVE(op) ((op) >= GS_NCCL_ALL_REDUCE && (op) <= GS_NCCL_SCATTER)

#define GS_NCCL_ID_BYTES 128   /* NCCL_UNIQUE_ID_BYTES */
#define GS_NCCL_MAX_INIT_ALL 8 /* ncclCommInitAll: handles and devices read; shrink: ranks */
#define GS_NCCL_NO_SEQ (~0ull)

enum gs_nccl_flag {
	GS_NCCL_READ_FAILED = 1, /* an argument's memory could not be read */
	GS_NCCL_SEQ_UNSEEN = 2,  /* the communicator's init was not seen: seq counts from attach */
};

/* Why records were not delivered: the per-CPU drop counters. */
enum gs_nccl_drop {
	GS_NCCL_DROP_RINGBUF = 0, /* the ring buffer was full */
	GS_NCCL_DROP_STATE = 1,   /* no memory for the thread's state */
	GS_NCCL_DROP_COMMS = 2,   /* the communicator map was full: no sequence number */
	GS_NCCL_DROP_COUNT = 3,
};

/* The communicator map's key: per (process, ncclComm_t handle), the next collective's number. */
struct gs_nccl_comm_key {
	__u32 pid;
	__u32 pad;
	__u64 comm;
};

/* Collectives, send/recv and group calls, at their return. Times are CLOCK_MONOTONIC (the same
 * clock in every process of a host) and the thread's CPU time (sched's sum_exec_runtime). */
struct gs_nccl_call {
	__u32 op; /* enum gs_nccl_op: below GS_NCCL_FIRST_LIFE */
	__u32 pid;
	__u32 tid;
	__s32 ret; /* ncclResult_t */
	__u64 entry_mono_ns;
	__u64 call_ns;             /* entry to return */
	__u64 thread_cpu_entry_ns; /* the calling thread's CPU time at entry */
	__u64 thread_cpu_exit_ns;  /* and at return */
	__u64 comm;                /* the ncclComm_t handle; 0 for group calls */
	__u64 count; /* elements (sendcount for AllGather, recvcount for ReduceScatter) */
	__u64 stream;
	__u64 seq;         /* the communicator's collective number in this process, from 0;
	                     * GS_NCCL_NO_SEQ for send, recv and group calls */
	__s32 datatype;    /* ncclDataType_t; -1 for group calls */
	__s32 redop;       /* ncclRedOp_t; -1 where none */
	__s32 peer;        /* send/recv: the peer; rooted ones: the root; else -1 */
	__u32 group_depth; /* ncclGroupStart calls open on the thread at entry */
	__u32 flags;       /* enum gs_nccl_flag */
	__u32 pad;
	__u64 cgroup_id; /* the caller's cgroup v2 id: its container once it has gone */
};

/* Communicator life and process exit, at the return (exit: at the last thread's exit). */
struct gs_nccl_life {
	__u32 op; /* enum gs_nccl_op: GS_NCCL_FIRST_LIFE and above */
	__u32 pid;
	__u32 tid;
	__s32 ret; /* ncclResult_t; the async error for GS_NCCL_GET_ASYNC_ERROR */
	__u64 entry_mono_ns;
	__u64 call_ns;
	__u64 comm;   /* the handle made (init, split, shrink), or acted on */
	__u64 parent; /* split, shrink: the parent's handle */
	__s32 rank;   /* init: the rank; split: the key; cuDevice, userRank, count: the value */
	__s32 nranks; /* init: nranks; initAll: ndev; shrink: ranks excluded */
	__s32 color;  /* split: the color */
	__u32 flags;  /* enum gs_nccl_flag */
	__u64 init_all_comms[GS_NCCL_MAX_INIT_ALL];
	__s32 ints[GS_NCCL_MAX_INIT_ALL]; /* initAll: devices (-1: devlist NULL, device i);
	                                   * shrink: the ranks excluded (the first 8) */
	__u8 id[GS_NCCL_ID_BYTES];        /* init: the ncclUniqueId (InitRankScalable: the first) */
	char thread[GS_COMM_LEN];         /* the calling thread's name; empty at exit */
	__u64 cgroup_id;
};

#ifdef __cplusplus
static_assert(sizeof(gs_nccl_comm_key) == 16);
static_assert(sizeof(gs_nccl_call) == 112);
static_assert(offsetof(gs_nccl_call, entry_mono_ns) == 16);
static_assert(offsetof(gs_nccl_call, seq) == 72);
static_assert(sizeof(gs_nccl_life) == 312);
static_assert(offsetof(gs_nccl_life, init_all_comms) == 64);
static_assert(offsetof(gs_nccl_life, id) == 160);
#endif

#endif

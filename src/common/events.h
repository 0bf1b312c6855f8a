/* Records the BPF programs hand to userspace. Plain C, fixed layout; see static_asserts. */
#ifndef GPUSCOPE_COMMON_EVENTS_H
#define GPUSCOPE_COMMON_EVENTS_H

#ifdef __BPF__
#include "vmlinux.h"
#else
#include <linux/types.h>
#endif

#define GS_COMM_LEN 16
/* Cgroups a container filter lets through (common/scope_filter.bpf.h). */
#define GS_MAX_SCOPE_CGROUPS 16384

enum gs_phase { GS_PHASE_ENTER = 0, GS_PHASE_EXIT = 1 };

/* Which members of gs_call_args the event carries. BPF sets only the dynamic bits
 * (CLUSTER, CAPTURED, OUT); the rest follow from the API row (gs_fields_of). */
enum gs_field {
	GS_F_SIZE = 1u << 0,
	GS_F_PTR = 1u << 1,
	GS_F_DST = 1u << 2,
	GS_F_SRC = 1u << 3,
	GS_F_KIND = 1u << 4,
	GS_F_STREAM = 1u << 5,
	GS_F_FUNC = 1u << 6,
	GS_F_LAUNCH = 1u << 7, /* grid, block, shared_mem_bytes */
	GS_F_CLUSTER = 1u << 8,
	GS_F_GRAPH = 1u << 9,
	GS_F_EVENT = 1u << 10,
	GS_F_HANDLE = 1u << 11,
	GS_F_DEVICE = 1u << 12,
	GS_F_CAPTURED = 1u << 13, /* launched into a stream under capture: recorded, not run */
	GS_F_OUT = 1u << 14,      /* exit: args.ptr holds the value the out-pointer received */
	GS_F_CTX = 1u << 15,
};

struct gs_call_args {
	__u64 size_bytes;
	__u64 ptr;
	__u64 dst;
	__u64 src;
	__u64 stream;
	__u64 func;
	__u64 graph;
	__u64 event;
	__u64 handle;
	__u32 grid[3];
	__u32 block[3];
	__u32 cluster[3];
	__u32 shared_mem_bytes;
	__u32 kind; /* cudaMemcpyKind */
	__s32 device;
	__u64 ctx; /* CUcontext */
};

struct gs_call_event {
	__u64 ts_boot_ns; /* CLOCK_BOOTTIME */
	__u64 dur_ns;     /* exit only */
	__u64 cgroup_id;
	__u32 pid; /* tgid, host namespace */
	__u32 tid;
	__u32 fields; /* enum gs_field bits */
	__s32 ret;    /* exit only: cudaError_t or CUresult */
	__u16 api;    /* enum gs_api */
	__u8 layer;   /* enum gs_layer */
	__u8 phase;   /* enum gs_phase */
	__u32 reserved;
	char comm[GS_COMM_LEN];   /* process name: filled in by userspace, not BPF */
	char thread[GS_COMM_LEN]; /* calling thread's name */
	struct gs_call_args args;
};

/* Why events were not delivered; index into the per-CPU drop counters. */
enum gs_drop { GS_DROP_RINGBUF = 0, GS_DROP_STATE_FULL = 1, GS_DROP_COUNT = 2 };

#ifndef __BPF__
#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct gs_call_args) == 128);
static_assert(offsetof(struct gs_call_args, grid) == 72);
static_assert(offsetof(struct gs_call_args, shared_mem_bytes) == 108);
static_assert(offsetof(struct gs_call_args, device) == 116);
static_assert(offsetof(struct gs_call_args, ctx) == 120);
static_assert(sizeof(struct gs_call_event) == 208);
static_assert(offsetof(struct gs_call_event, api) == 40);
static_assert(offsetof(struct gs_call_event, comm) == 48);
static_assert(offsetof(struct gs_call_event, args) == 80);
#endif
#endif

#endif

/* gpuscope copies: map and event layouts shared by copies.bpf.c and userspace. */
#ifndef GPUSCOPE_COPIES_H
#define GPUSCOPE_COPIES_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#include "common/cuda_api.h"
#include "common/events.h"

#define GS_CP_MAX_ROWS 16384

/* Where the parameter structs keep what a copy moves (x86-64 and arm64 alike: LP64), checked
 * against the toolkit's headers by copies_test. */
#define GS_CP_RT3D_EXTENT 128   /* struct cudaMemcpy3DParms: extent {width, height, depth} */
#define GS_CP_RT3D_KIND 152     /* ... kind (enum cudaMemcpyKind) */
#define GS_CP_CU2D_SRC_TYPE 16  /* CUDA_MEMCPY2D: srcMemoryType */
#define GS_CP_CU2D_DST_TYPE 72  /* ... dstMemoryType */
#define GS_CP_CU2D_WIDTH 112    /* ... WidthInBytes, then Height */
#define GS_CP_CU3D_SRC_TYPE 32  /* CUDA_MEMCPY3D: srcMemoryType */
#define GS_CP_CU3D_DST_TYPE 120 /* ... dstMemoryType */
#define GS_CP_CU3D_WIDTH 176    /* ... WidthInBytes, then Height and Depth */

struct gs_cp_key {
	__u32 pid;
	__u16 dir;   /* enum gs_copy_dir */
	__u16 layer; /* enum gs_layer: the outermost copy call's */
};

struct gs_cp_val {
	__u64 calls;     /* returned success */
	__u64 bytes;     /* moved or set by those */
	__u64 failed;    /* returned an error: no bytes counted */
	__u64 cgroup_id; /* the first call's cgroup v2 id: its container, after the process has gone */
};

/* A process with rows has exited. */
struct gs_cp_event {
	__u32 pid;
	__u32 pad;
	char comm[GS_COMM_LEN];
};

enum gs_cp_drop {
	GS_CP_DROP_ROWS_FULL, /* calls not counted: row map full */
	GS_CP_DROP_NO_STATE,  /* calls not counted: no per-thread state */
	GS_CP_DROP_EVENTS,    /* exits not reported: ring buffer full */
	GS_CP_DROP_COUNT
};

#ifdef __cplusplus
static_assert(sizeof(gs_cp_key) == 8);
static_assert(sizeof(gs_cp_val) == 32);
static_assert(sizeof(gs_cp_event) == 8 + GS_COMM_LEN);
#endif

#endif

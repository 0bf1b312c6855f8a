/* gpuscope kernels: map and event layouts shared by kernels.bpf.c and userspace. */
#ifndef GPUSCOPE_KERNELS_H
#define GPUSCOPE_KERNELS_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#include "common/cuda_api.h"

#define GS_K_MAX_ROWS 65536
#define GS_K_NAME_LEN 128
#define GS_K_STACK_DEPTH 127   /* user frames kept per sampled launch */
#define GS_K_MAX_STACKS 16384  /* distinct user stacks (--stacks) */
#define GS_K_MAX_SAMPLES 65536 /* distinct (process, row, stack) sample counters (--stacks) */

/* GS_K_HOST: a host function enqueued in a stream (cudaLaunchHostFunc, cuLaunchHostFunc). */
enum gs_k_layer { GS_K_RUNTIME, GS_K_DRIVER, GS_K_GRAPH, GS_K_HOST };

/* The launch programs, one per kind: where the handle and the stream are. */
enum gs_k_site {
	GS_K_CUDA_LAUNCH,    /* cudaLaunchKernel(func, grid, block, args, smem, stream) */
	GS_K_CUDA_LAUNCH_EX, /* cudaLaunchKernelExC(config, func, args) */
	GS_K_CUDA_GRAPH,     /* cudaGraphLaunch(exec, stream) */
	GS_K_CUDA_HOST_FUNC, /* cudaLaunchHostFunc(stream, fn, data) */
	GS_K_CU_LAUNCH,      /* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, ...) */
	GS_K_CU_LAUNCH_EX,   /* cuLaunchKernelEx(config, f, params, extra) */
	GS_K_CU_GRAPH,       /* cuGraphLaunch(exec, stream) */
	GS_K_CU_HOST_FUNC,   /* cuLaunchHostFunc(stream, fn, data) */
};

struct gs_k_key {
	__u32 pid;
	__u32 layer;
	__u64 handle;
};

struct gs_k_val {
	__u64 count;
	__u64 caller; /* return address of the first launch counted: names the module */
	__u64 cgroup_id; /* the first launch's cgroup v2 id: its container, after the process has gone */
	__u64 last_launch_ns; /* CLOCK_MONOTONIC of the latest launch; 0 unless track_last_launch */
};

/* A driver handle and the runtime handle whose launch reached the driver with it. */
struct gs_k_alias_key {
	__u32 pid;
	__u32 pad;
	__u64 drv;
};

/* A naming call's inputs: its kind, what it names from (module, library, kernel or stub), the
 * name's address and the address space (after an exec the same addresses name anew). A call
 * repeated with the same inputs is announced once (PyTorch repeats two every step). */
struct gs_k_named_key {
	__u32 pid;
	__u32 namer;
	__u64 src;
	__u64 name_ptr;
	__u64 mm;
};

/* A sampled launch's row and where it came from (--stacks). The stack map's first frame is the
 * probed entry point, whose caller's frame a frame-pointer walk from the entry skips: `caller`
 * (the return address) is that frame. */
struct gs_k_sample_key {
	__u32 pid;
	__u32 layer;
	__u64 handle;
	__s32 stack_id; /* <0: no user stack taken */
	__u32 pad;
	__u64 caller;
	__u64 py_hash; /* the CPython frame chain (python/pyframes.h); 0: none */
};

enum gs_k_event_type { GS_K_EV_NAME, GS_K_EV_EXIT };

struct gs_k_event {
	__u32 type;
	__u32 pid;
	__u32 namer;
	__u32 pad;
	__u64 handle;   /* what the call handed out */
	__u64 src;      /* __cudaGetKernel: stub address; cuKernelGetFunction: the CUkernel */
	__u64 caller;   /* return address of the naming call */
	__u64 name_ptr; /* the name's address (read again when the copy here is cut); __cudaGetKernel: the handle variable's */
	char name[GS_K_NAME_LEN];
};

enum gs_k_drop {
	GS_K_DROP_ROWS_FULL,
	GS_K_DROP_CAPTURED,
	GS_K_DROP_NO_STATE,
	GS_K_DROP_EVENTS,
	GS_K_DROP_STACKS,       /* sampled launch whose user stack was not kept (stack map full) */
	GS_K_DROP_SAMPLES_FULL, /* sampled launch not kept: sample map full */
	GS_K_DROP_COUNT
};

#ifdef __cplusplus
static_assert(sizeof(gs_k_key) == 16);
static_assert(sizeof(gs_k_val) == 32);
static_assert(sizeof(gs_k_alias_key) == 16);
static_assert(sizeof(gs_k_named_key) == 32);
static_assert(sizeof(gs_k_sample_key) == 40);
static_assert(sizeof(gs_k_event) == 48 + GS_K_NAME_LEN);
#endif

#endif

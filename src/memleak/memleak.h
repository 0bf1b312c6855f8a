/* gpuscope memleak: map and event layouts shared by memleak.bpf.c and userspace.
 * Every per-process map key starts with the pid (tgid, host namespace) as a __u32, so a
 * reader can tell which entries belong to which process without knowing the map. */
#ifndef GPUSCOPE_MEMLEAK_H
#define GPUSCOPE_MEMLEAK_H
#ifdef __cplusplus
#include <linux/types.h>
#endif
#include "common/cuda_api.h"

#define GS_ML_MAX_ALLOCS 131072 /* live allocations, VMM handles and mappings, all processes */
#define GS_ML_MAX_PROCS 8192
#define GS_ML_MAX_FREED 16384 /* recently freed addresses (LRU), for double frees */
#define GS_ML_STACK_DEPTH 32
#define GS_ML_MAX_ERRORS 4096 /* distinct (process, op, layer, error) failure counters */
#define GS_ML_UNMAP_SPAN 8    /* mappings one cuMemUnmap can take down */
#define GS_ML_MAX_CTXS 4096   /* CUDA contexts seen made or retained, all processes */
#define GS_ML_CTX_STACK 4     /* contexts pushed under the current one, per thread */

/* A context as allocations name it: a CUcontext, or the primary context of a device. Primary
 * contexts get this id whatever way they became current (cudaSetDevice, the runtime's own
 * initialisation, a retained CUcontext), so that one reset finds all their memory. The top
 * 16 bits set is a kernel address, never a CUcontext. */
#define GS_ML_PRIMARY_CTX(dev) (0xffff000000000000ULL | (__u32)(dev))
#define GS_ML_IS_PRIMARY_CTX(ctx) (((ctx) >> 48) == 0xffff)

/* CUmemAllocationProp (cuda.h): location.type at 8, location.id at 12; checked against
 * cuda.h by the integration test's fixture build. CU_MEM_LOCATION_TYPE_DEVICE is 1. */
#define GS_ML_PROP_LOCATION_TYPE_OFF 8
#define GS_ML_PROP_LOCATION_ID_OFF 12
#define GS_ML_LOCATION_DEVICE 1

/* What a key's address names: a device or pinned pointer, a VMM physical handle, or the
 * virtual address a handle is mapped at. Frees of one kind never match another. */
enum gs_ml_space { GS_ML_SPACE_ADDR, GS_ML_SPACE_HANDLE, GS_ML_SPACE_MAPPING };

/* gen_ns keeps a pid's lives apart: after an exec the new image may get the old one's
 * addresses before userspace has listed the old image's leaks. */
struct gs_ml_key {
	__u32 pid;
	__u32 space; /* enum gs_ml_space */
	__u64 addr;
	__u64 gen_ns; /* gs_ml_proc.gen_ns of the owning life */
};

/* One live allocation (space ADDR), VMM handle (HANDLE) or VMM mapping (MAPPING). */
struct gs_ml_alloc {
	__u64 size_bytes;
	__u64 ts_boot_ns;   /* CLOCK_BOOTTIME when the allocating call returned */
	__u64 handle;       /* MAPPING: the physical handle mapped there */
	__u16 site;         /* enum gs_ml_site */
	__u8 category;      /* enum gs_ml_category */
	__u8 layer;         /* enum gs_ml_layer */
	__s32 device;       /* CUDA ordinal, -1 when not known */
	__u32 vmm_mappings; /* HANDLE: live mappings of it */
	__u32 vmm_released; /* HANDLE: cuMemRelease has returned success */
	__u64 ctx; /* the context whose end frees it (GS_ML_PRIMARY_CTX or a CUcontext); 0: none known */
};

struct gs_ml_ctx_key {
	__u32 pid;
	__u32 pad;
	__u64 ctx; /* a CUcontext, or GS_ML_PRIMARY_CTX(dev) for a device's primary context */
};

/* A context seen made (cuCtxCreate) or retained (cuDevicePrimaryCtxRetain), or the retain
 * count of a device's primary context. */
struct gs_ml_ctx {
	__u64 gen_ns;  /* gs_ml_proc.gen_ns of the owning life */
	__s32 device;  /* CUDA ordinal */
	__u32 primary; /* a CUcontext that is a device's primary context */
	__u64 retains; /* GS_ML_PRIMARY_CTX keys: cuDevicePrimaryCtxRetain minus Release seen */
};

struct gs_ml_stack {
	__u64 ips[GS_ML_STACK_DEPTH]; /* user return addresses, innermost first; 0 ends */
	__u64 py_hash;                /* the CPython frame chain (python/pyframes.h); 0: none */
};

/* A recently freed address (LRU), remembered to recognise a second free of it. */
struct gs_ml_freed {
	__u64 ts_boot_ns;
};

enum gs_ml_op { GS_ML_OP_ALLOC = 1, GS_ML_OP_FREE = 2 };

/* Failed calls by error code: the summary names them. */
struct gs_ml_err_key {
	__u32 pid;
	__u8 op;    /* enum gs_ml_op */
	__u8 layer; /* enum gs_ml_layer: the code is a cudaError_t or a CUresult */
	__u16 pad;
	__s32 code;
	__u32 pad2;
};

struct gs_ml_err_val {
	__u64 count;
	__u64 gen_ns;
};

/* Per-process counters, updated atomically by the probes. */
struct gs_ml_proc {
	__u64 gen_ns;            /* CLOCK_BOOTTIME when the entry was made: one life of the pid */
	__u64 outstanding_bytes; /* device memory: device, managed and VMM */
	__u64 outstanding_allocs;
	__u64 pinned_bytes; /* pinned host memory */
	__u64 pinned_allocs;
	__u64 allocs_ok;
	__u64 allocs_failed;
	__u64 allocs_untracked; /* succeeded but not recorded: allocation map full */
	__u64 frees_ok;         /* succeeded and released an allocation gpuscope saw */
	__u64 frees_failed;     /* returned an error */
	__u64 frees_untracked;  /* succeeded on an address allocated before gpuscope watched */
	__u64 bad_frees;        /* succeeded on an address freed before or never allocated */
	__u64 double_frees;     /* of bad_frees and frees_failed: the address was freed before */
};

enum gs_ml_event_type {
	GS_ML_EV_EXIT,
	GS_ML_EV_EXEC,
	GS_ML_EV_BAD_FREE,
	GS_ML_EV_UNTRACKED_FREE,
	GS_ML_EV_CTX_RELEASED, /* a context ended holding allocations: they are gone */
};
enum gs_ml_reason { GS_ML_R_NONE, GS_ML_R_DOUBLE_FREE, GS_ML_R_ERROR, GS_ML_R_UNKNOWN_ADDRESS };

struct gs_ml_event {
	__u32 type; /* enum gs_ml_event_type */
	__u32 pid;
	__u64 ts_boot_ns;
	__u64 addr; /* frees: the pointer or handle freed; CTX_RELEASED: the context id */
	union {
		__s32 ret;    /* frees: cudaError_t / CUresult */
		__s32 device; /* CTX_RELEASED: the context's device, -1 when not known */
	};
	__u16 site;
	__u8 reason;   /* enum gs_ml_reason */
	__u8 layer;    /* frees: enum gs_ml_layer, which says how to name ret */
	char comm[16]; /* the process name, which /proc may no longer have */
	/* EXIT/EXEC: read just before the entry was deleted. CTX_RELEASED: what the context's end
	 * released (outstanding_* and pinned_*), the rest zero. */
	struct gs_ml_proc counters;
};

/* Why something was not recorded; index into the per-CPU drop counters. */
enum gs_ml_drop {
	GS_ML_DROP_NO_STATE,    /* no task storage for the calling thread */
	GS_ML_DROP_ALLOCS_FULL, /* allocation map full: counted in allocs_untracked */
	GS_ML_DROP_PROCS_FULL,  /* process map full: the process is not tracked */
	GS_ML_DROP_EVENTS,      /* ring buffer full */
	GS_ML_DROP_STACKS,      /* stack map full or stack unreadable */
	GS_ML_DROP_ERRORS_FULL, /* error-code map full: the failure is counted, its code is not */
	GS_ML_DROP_CTXS_FULL,   /* context map full: that context's device is not known */
	GS_ML_DROP_COUNT
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(gs_ml_key) == 24);
static_assert(sizeof(gs_ml_alloc) == 48);
static_assert(offsetof(gs_ml_alloc, ctx) == 40);
static_assert(sizeof(gs_ml_ctx_key) == 16);
static_assert(sizeof(gs_ml_ctx) == 24);
static_assert(offsetof(gs_ml_alloc, site) == 24);
static_assert(offsetof(gs_ml_alloc, device) == 28);
static_assert(sizeof(gs_ml_stack) == 8 * GS_ML_STACK_DEPTH + 8);
static_assert(sizeof(gs_ml_freed) == 8);
static_assert(sizeof(gs_ml_err_key) == 16);
static_assert(offsetof(gs_ml_err_key, code) == 8);
static_assert(sizeof(gs_ml_err_val) == 16);
static_assert(sizeof(gs_ml_proc) == 13 * 8);
static_assert(offsetof(gs_ml_event, comm) == 32);
static_assert(offsetof(gs_ml_event, counters) == 48);
static_assert(sizeof(gs_ml_event) == 48 + sizeof(gs_ml_proc));
#endif

#endif

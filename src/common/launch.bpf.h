/* SPDX-License-Identifier: GPL-2.0 */
/* Kernel and graph launches: where their arguments are, once for trace and kernels.
 *
 * Argument slots (0-based; a dim3 is 12 bytes and takes two slots, x|y<<32 then z):
 *   cudaLaunchKernel(func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t)
 *   cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
 *   cudaLaunchKernelExC(const cudaLaunchConfig_t *, func, args)
 *   cuLaunchKernelEx(const CUlaunchConfig *, f, params, extra)
 *   cudaGraphLaunch(exec, stream), cuGraphLaunch(exec, stream)
 *   cudaLaunchHostFunc(stream, fn, data), cuLaunchHostFunc(stream, fn, data)
 * The two config structs share a layout: six u32 dims at 0, smem at 24 (size_t in the
 * runtime's, u32 in the driver's; little-endian, so the low word serves both), stream at 32,
 * attrs at 40, numAttrs at 48. Their attribute entries are 72 bytes, id at 0, value at 8. */
#ifndef GPUSCOPE_COMMON_LAUNCH_BPF_H
#define GPUSCOPE_COMMON_LAUNCH_BPF_H

#include "common/arch.bpf.h"
#include "common/cuda_api.h"
#include "common/events.h"

/* cudaLaunchKernel */
#define GS_RT_LAUNCH_FUNC 0
#define GS_RT_LAUNCH_GRID 1  /* 2 slots */
#define GS_RT_LAUNCH_BLOCK 3 /* 2 slots */
#define GS_RT_LAUNCH_SMEM 6
#define GS_RT_LAUNCH_STREAM 7
/* cuLaunchKernel */
#define GS_CU_LAUNCH_FUNC 0
#define GS_CU_LAUNCH_GRID 1  /* gx, gy, gz */
#define GS_CU_LAUNCH_BLOCK 4 /* bx, by, bz */
#define GS_CU_LAUNCH_SMEM 7
#define GS_CU_LAUNCH_STREAM 8
_Static_assert(GS_RT_LAUNCH_STREAM == GS_RT_LAUNCH_SMEM + 1, "read together");
_Static_assert(GS_CU_LAUNCH_SMEM == GS_CU_LAUNCH_BLOCK + 3 &&
                       GS_CU_LAUNCH_STREAM == GS_CU_LAUNCH_SMEM + 1,
               "read together");
/* cudaLaunchKernelExC and cuLaunchKernelEx */
#define GS_LAUNCH_EX_CONFIG 0
#define GS_LAUNCH_EX_FUNC 1
/* cudaGraphLaunch and cuGraphLaunch */
#define GS_GRAPH_LAUNCH_EXEC 0
#define GS_GRAPH_LAUNCH_STREAM 1

/* cudaLaunchConfig_t and CUlaunchConfig */
#define GS_LCFG_DIMS 0 /* gridDim x y z, blockDim x y z: u32 each */
#define GS_LCFG_SMEM 24
#define GS_LCFG_STREAM 32
#define GS_LCFG_ATTRS 40
#define GS_LCFG_NUM_ATTRS 48
#define GS_LCFG_SIZE 56 /* through numAttrs */
/* cudaLaunchAttribute and CUlaunchAttribute */
#define GS_LATTR_SIZE 72
#define GS_LATTR_ID 0
#define GS_LATTR_VALUE 8
#define GS_LATTR_CLUSTER_DIMENSION 4
#define GS_LATTRS_READ 8 /* attributes looked at per launch */

/* A launch by kind: a site-table .special of a kernel launch (GS_SP_RT_LAUNCH ..
 * GS_SP_CU_LAUNCH_EX), or GS_LAUNCH_GRAPH for the GS_ROLE_GRAPH_LAUNCH rows. */
#define GS_LAUNCH_GRAPH 0x80

static __always_inline bool gs_launch_is_ex(const __u8 kind)
{
	return kind == GS_SP_RT_LAUNCH_EX || kind == GS_SP_CU_LAUNCH_EX;
}

/* The kernel handle (or graph exec) a launch names. */
static __always_inline __u64 gs_launch_handle(struct pt_regs *ctx, const __u8 kind)
{
	/* A switch, not a conditional: clang may fold a conditional into one context load at a
	 * computed offset, which the verifier rejects. */
	switch (kind) {
	case GS_SP_RT_LAUNCH_EX:
	case GS_SP_CU_LAUNCH_EX:
		return PT_REGS_PARM2(ctx); /* GS_LAUNCH_EX_FUNC */
	case GS_SP_HOST_FUNC:
		return PT_REGS_PARM2(ctx); /* the host function */
	default:
		return PT_REGS_PARM1(ctx); /* GS_*_LAUNCH_FUNC, GS_GRAPH_LAUNCH_EXEC */
	}
}

static __always_inline __u64 gs_launch_config_stream(__u64 config)
{
	__u64 s = 0;
	bpf_probe_read_user(&s, sizeof(s), (void *)(config + GS_LCFG_STREAM));
	return s;
}

/* The stream a launch goes to; kind must be a constant, so this is one read at most. */
static __always_inline __u64 gs_launch_stream(struct pt_regs *ctx, const __u8 kind)
{
	switch (kind) {
	case GS_SP_RT_LAUNCH:
		return gs_arg(ctx, GS_RT_LAUNCH_STREAM);
	case GS_SP_CU_LAUNCH:
		return gs_arg(ctx, GS_CU_LAUNCH_STREAM);
	case GS_SP_RT_LAUNCH_EX:
	case GS_SP_CU_LAUNCH_EX:
		return gs_launch_config_stream(PT_REGS_PARM1(ctx) /* GS_LAUNCH_EX_CONFIG */);
	case GS_SP_HOST_FUNC:
		return PT_REGS_PARM1(ctx);
	default:
		return gs_arg(ctx, GS_GRAPH_LAUNCH_STREAM);
	}
}

/* Cluster dimensions from a config's attributes, when one of the first few names them. */
static __always_inline void gs_launch_read_cluster(struct gs_call_event *e, __u64 attrs, __u32 n)
{
	for (int i = 0; i < GS_LATTRS_READ; i++) {
		__u32 id = 0;
		if (i >= n)
			break;
		bpf_probe_read_user(&id, sizeof(id),
		                    (void *)(attrs + i * GS_LATTR_SIZE + GS_LATTR_ID));
		if (id == GS_LATTR_CLUSTER_DIMENSION) {
			bpf_probe_read_user(e->args.cluster, sizeof(e->args.cluster),
			                    (void *)(attrs + i * GS_LATTR_SIZE + GS_LATTR_VALUE));
			e->fields |= GS_F_CLUSTER;
		}
	}
}

/* A kernel launch's function, grid, block, shared memory, stream and cluster into e, from the
 * copied registers; special is the row's (GS_SP_RT_LAUNCH .. GS_SP_CU_LAUNCH_EX). */
static __always_inline void gs_launch_decode(const struct gs_args *r, __u8 special,
                                             struct gs_call_event *e)
{
	struct gs_call_args *a = &e->args;
	__u64 cfg, v[5] = {};
	__u32 ex[GS_LCFG_SIZE / 4];

	switch (special) {
	case GS_SP_RT_LAUNCH:
		a->func = gs_arg_at(r, GS_RT_LAUNCH_FUNC);
		cfg = gs_arg_at(r, GS_RT_LAUNCH_GRID);
		a->grid[0] = (__u32)cfg;
		a->grid[1] = cfg >> 32;
		a->grid[2] = (__u32)gs_arg_at(r, GS_RT_LAUNCH_GRID + 1);
		cfg = gs_arg_at(r, GS_RT_LAUNCH_BLOCK);
		a->block[0] = (__u32)cfg;
		a->block[1] = cfg >> 32;
		a->block[2] = (__u32)gs_arg_at(r, GS_RT_LAUNCH_BLOCK + 1);
		/* smem and stream are adjacent: one read where both are on the stack. */
		gs_args_span(r, GS_RT_LAUNCH_SMEM, 2, v);
		a->shared_mem_bytes = (__u32)v[0];
		a->stream = v[1];
		break;
	case GS_SP_CU_LAUNCH:
		a->func = gs_arg_at(r, GS_CU_LAUNCH_FUNC);
		a->grid[0] = gs_arg_at(r, GS_CU_LAUNCH_GRID);
		a->grid[1] = gs_arg_at(r, GS_CU_LAUNCH_GRID + 1);
		a->grid[2] = gs_arg_at(r, GS_CU_LAUNCH_GRID + 2);
		/* bx, by, bz, smem, stream are adjacent: one read for those on the stack. */
		gs_args_span(r, GS_CU_LAUNCH_BLOCK, 5, v);
		a->block[0] = v[0];
		a->block[1] = v[1];
		a->block[2] = v[2];
		a->shared_mem_bytes = v[3];
		a->stream = v[4];
		break;
	case GS_SP_RT_LAUNCH_EX:
	case GS_SP_CU_LAUNCH_EX:
		cfg = gs_arg_at(r, GS_LAUNCH_EX_CONFIG);
		a->func = gs_arg_at(r, GS_LAUNCH_EX_FUNC);
		if (bpf_probe_read_user(ex, sizeof(ex), (void *)cfg))
			return;
		a->grid[0] = ex[GS_LCFG_DIMS / 4 + 0];
		a->grid[1] = ex[GS_LCFG_DIMS / 4 + 1];
		a->grid[2] = ex[GS_LCFG_DIMS / 4 + 2];
		a->block[0] = ex[GS_LCFG_DIMS / 4 + 3];
		a->block[1] = ex[GS_LCFG_DIMS / 4 + 4];
		a->block[2] = ex[GS_LCFG_DIMS / 4 + 5];
		a->shared_mem_bytes = ex[GS_LCFG_SMEM / 4];
		a->stream = ((__u64)ex[GS_LCFG_STREAM / 4 + 1] << 32) | ex[GS_LCFG_STREAM / 4];
		gs_launch_read_cluster(
		        e, ((__u64)ex[GS_LCFG_ATTRS / 4 + 1] << 32) | ex[GS_LCFG_ATTRS / 4],
		        ex[GS_LCFG_NUM_ATTRS / 4]);
		break;
	}
}

#endif

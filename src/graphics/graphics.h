/* SPDX-License-Identifier: GPL-2.0 */
/* The graphics collector's layout, shared by graphics.bpf.c and user space: one event per call
 * of a graphics API entry point that shapes a frame (Vulkan through its loader, EGL, GLX, GL). */
#ifndef GPUSCOPE_GRAPHICS_H
#define GPUSCOPE_GRAPHICS_H

#include "common/events.h"

/* The probed calls; the attach cookie of both probes of a site. */
enum gs_gfx_call {
	GS_GFX_VK_QUEUE_SUBMIT = 1,
	GS_GFX_VK_QUEUE_SUBMIT2,
	GS_GFX_VK_QUEUE_PRESENT,
	GS_GFX_VK_ACQUIRE_IMAGE,
	GS_GFX_VK_WAIT_FOR_FENCES,
	GS_GFX_VK_QUEUE_WAIT_IDLE,
	GS_GFX_VK_DEVICE_WAIT_IDLE,
	GS_GFX_VK_ALLOCATE_MEMORY,
	GS_GFX_VK_FREE_MEMORY,
	GS_GFX_VK_CREATE_DEVICE,
	GS_GFX_VK_DESTROY_DEVICE,
	GS_GFX_EGL_SWAP_BUFFERS,
	GS_GFX_GLX_SWAP_BUFFERS,
	GS_GFX_GL_FINISH,
	GS_GFX_CALL_COUNT,
};

/* The submit infos read per vkQueueSubmit/vkQueueSubmit2 for their command buffer counts;
 * submits past it count as submits without their command buffers (gs_gfx_event.flags). */
#define GS_GFX_MAX_SUBMIT_INFOS 16

enum gs_gfx_flag {
	GS_GFX_FENCE = 1,       /* a submit that signals a fence */
	GS_GFX_INFOS_CUT = 2,   /* more submit infos than GS_GFX_MAX_SUBMIT_INFOS */
	GS_GFX_READ_FAILED = 4, /* an argument's memory could not be read */
};

/* Why events were not delivered: the per-CPU drop counters. */
enum gs_gfx_drop { GS_GFX_DROP_RINGBUF = 0, GS_GFX_DROP_STATE = 1, GS_GFX_DROP_COUNT = 2 };

#define GS_GFX_MAX_PENDING 16384 /* calls in flight (entry seen, return not yet) */

struct gs_gfx_event {
	__u64 start_ns;   /* CLOCK_BOOTTIME at entry */
	__u64 dur_ns;     /* entry to return */
	__u64 object;     /* the queue, device, surface or drawable; the memory's handle */
	__u64 size_bytes; /* vkAllocateMemory: allocationSize */
	__u32 pid;
	__u32 tid;
	__u32 call;        /* enum gs_gfx_call */
	__s32 ret;         /* VkResult; EGLBoolean; 0 for calls that return nothing */
	__u32 count;       /* submit infos; swapchains presented; fences waited for */
	__u32 cmd_buffers; /* command buffers in the submit infos */
	__u32 mem_type;    /* vkAllocateMemory: memoryTypeIndex */
	__u32 flags;       /* enum gs_gfx_flag */
	char thread[GS_COMM_LEN];
};

#ifndef __BPF__
#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct gs_gfx_event) == 80);
static_assert(offsetof(struct gs_gfx_event, pid) == 32);
static_assert(offsetof(struct gs_gfx_event, thread) == 64);
#endif
#endif

#endif

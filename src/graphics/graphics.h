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

/* The functions that hand out the others (the attach cookie of their probes): what they return
 * for the name of a call above is probed too, as that call (docs/frames.md). */
enum gs_gfx_getter {
	GS_GFX_GET_VK_INSTANCE = 1, /* vkGetInstanceProcAddr(instance, pName) */
	GS_GFX_GET_VK_DEVICE,       /* vkGetDeviceProcAddr(device, pName) */
	GS_GFX_GET_EGL,             /* eglGetProcAddress(procname) */
	GS_GFX_GET_GLX,             /* glXGetProcAddress(procName) */
	GS_GFX_GET_GLX_ARB,         /* glXGetProcAddressARB(procName) */
};

/* A function name read at a getter's return: the key of the names map. */
#define GS_GFX_NAME_LEN 32

/* The submit infos read per vkQueueSubmit/vkQueueSubmit2 for their command buffer counts;
 * submits past it count as submits without their command buffers (gs_gfx_event.flags). */
#define GS_GFX_MAX_SUBMIT_INFOS 16

enum gs_gfx_flag {
	GS_GFX_FENCE = 1,       /* a submit that signals a fence */
	GS_GFX_INFOS_CUT = 2,   /* more submit infos than GS_GFX_MAX_SUBMIT_INFOS */
	GS_GFX_READ_FAILED = 4, /* an argument's memory could not be read */
};

/* Why events were not delivered: the per-CPU drop counters. */
enum gs_gfx_drop {
	GS_GFX_DROP_RINGBUF = 0, /* calls: the ring buffer was full */
	GS_GFX_DROP_STATE = 1,   /* calls and fetches: no memory for the thread's state */
	GS_GFX_DROP_FETCH = 2,   /* fetches: their ring buffer was full */
	GS_GFX_DROP_COUNT = 3,
};

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

/* A getter returned a function of a probed call: user space probes it where it lies. */
struct gs_gfx_fetch {
	__u64 fn; /* the pointer returned */
	__u32 pid;
	__u32 call;   /* enum gs_gfx_call of the name asked for */
	__u32 getter; /* enum gs_gfx_getter */
	__u32 pad;
};

#ifndef __BPF__
#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct gs_gfx_fetch) == 24);
static_assert(sizeof(struct gs_gfx_event) == 80);
static_assert(offsetof(struct gs_gfx_event, pid) == 32);
static_assert(offsetof(struct gs_gfx_event, thread) == 64);
#endif
#endif

#endif

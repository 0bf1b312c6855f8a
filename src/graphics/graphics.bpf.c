// SPDX-License-Identifier: GPL-2.0
/* gpuscope graphics: the calls of Vulkan (its loader's exports), EGL, GLX and GL that shape a
 * frame, one event each. A frame is a handful of such calls, not thousands as with CUDA
 * launches: every call goes to user space, which finds frames and what happened inside them.
 * One entry and one return program serve every site; the attach cookie says which call it is.
 * Programs that fetch their functions through vkGet{Instance,Device}ProcAddr, eglGetProcAddress
 * or glXGetProcAddress[ARB] call the driver's functions, not the exports: the getters' returns
 * tell user space where those lie, and it probes them with the same programs. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/arch.bpf.h"
#include "common/scope_filter.bpf.h"
#include "common/maps.bpf.h"
#include "common/call_pair.bpf.h"
#include "graphics/graphics.h"

char LICENSE[] SEC("license") = "GPL";

GS_RINGBUF(gs_gfx_events, 1 << 20);
/* Few (a fetch of a probed call's function, at a program's start): user space is woken at each,
 * to probe the function before it is called. */
GS_RINGBUF(gs_gfx_fetches, 16384);

/* The probed calls' names, to their enum gs_gfx_call: what a getter's return looks up. */
GS_MAP_DEF(gs_gfx_names, BPF_MAP_TYPE_HASH, 64, 0, char[GS_GFX_NAME_LEN], __u32);

GS_DROP_COUNTERS(gs_gfx_drops, GS_GFX_DROP_COUNT)

/* Waking the reader costs more than the probe itself (an IPI and a context switch): records
 * go in silently until a batch has built up, as trace's do; readers also drain on a timer. */
const volatile __u64 wakeup_bytes = 64 * 1024;

/* The entry's state until the return: what the return cannot read any more (out pointers). */
struct gfx_pending {
	__u64 start_ns;
	__u64 object;
	__u64 size_bytes;
	__u64 out_ptr; /* VkDeviceMemory* / VkDevice*: read once the call succeeded */
	__u32 call;
	__u32 count;
	__u32 cmd_buffers;
	__u32 mem_type;
	__u32 flags;
};

/* Per thread. Only the outermost probed call counts: one made inside another is the library's
 * own, not the program's (the loader's exported trampoline reaching the driver's function that
 * another program fetched and so is probed too, a driver's present submitting its blit), so each
 * call is counted once whichever of its functions are probed. */
struct gfx_thread {
	struct gfx_pending call;
	__u64 name;         /* the outermost getter's name argument */
	__u32 getter;       /* its enum gs_gfx_getter */
	__u32 depth;        /* probed calls in progress */
	__u32 getter_depth; /* getters in progress */
};
GS_THREAD_STORAGE(gfx_threads, struct gfx_thread);

/* VkSubmitInfo (72 bytes, commandBufferCount at 40) and VkSubmitInfo2 (64 bytes,
 * commandBufferInfoCount at 32), from vulkan_core.h. */
static __always_inline void count_cmd_buffers(struct gfx_pending *p, const void *infos, __u32 n,
                                              __u32 stride, __u32 offset)
{
	if (n > GS_GFX_MAX_SUBMIT_INFOS) {
		p->flags |= GS_GFX_INFOS_CUT;
		n = GS_GFX_MAX_SUBMIT_INFOS;
	}
	for (__u32 i = 0; i < GS_GFX_MAX_SUBMIT_INFOS; i++) {
		__u32 c = 0;
		if (i >= n)
			break;
		if (bpf_probe_read_user(&c, sizeof(c), infos + (__u64)i * stride + offset)) {
			p->flags |= GS_GFX_READ_FAILED;
			break;
		}
		p->cmd_buffers += c;
	}
}

/* The calling thread's state with one more probed call (or getter) in progress, or NULL
 * when the thread is out of scope, has no state (counted) or is inside such a call already. */
static __always_inline struct gfx_thread *gfx_thread_enter(bool getter)
{
	struct gfx_thread *t;

	if (!in_scope())
		return NULL;
	t = gs_thread_state_new(&gfx_threads);
	if (!t) {
		count_drop(GS_GFX_DROP_STATE);
		return NULL;
	}
	__u32 *depth = getter ? &t->getter_depth : &t->depth;
	return GS_CALL_ENTER(*depth) ? t : NULL;
}

SEC("uprobe")
int gs_gfx_enter(struct pt_regs *ctx)
{
	__u32 call = (__u32)bpf_get_attach_cookie(ctx);
	struct gfx_thread *t = gfx_thread_enter(false);

	if (!t)
		return 0;
	struct gfx_pending *p = &t->call;
	__builtin_memset(p, 0, sizeof(*p));
	p->call = call;
	p->start_ns = bpf_ktime_get_boot_ns();
	switch (call) {
	case GS_GFX_VK_QUEUE_SUBMIT:  /* (queue, submitCount, pSubmits, fence) */
	case GS_GFX_VK_QUEUE_SUBMIT2: /* (queue, submitCount, pSubmits, fence) */
		p->object = PT_REGS_PARM1(ctx);
		p->count = (__u32)PT_REGS_PARM2(ctx);
		if (PT_REGS_PARM4(ctx))
			p->flags |= GS_GFX_FENCE;
		if (call == GS_GFX_VK_QUEUE_SUBMIT)
			count_cmd_buffers(p, (const void *)PT_REGS_PARM3(ctx), p->count, 72, 40);
		else
			count_cmd_buffers(p, (const void *)PT_REGS_PARM3(ctx), p->count, 64, 32);
		break;
	case GS_GFX_VK_QUEUE_PRESENT: { /* (queue, pPresentInfo): swapchainCount at 32 */
		const void *info = (const void *)PT_REGS_PARM2(ctx);
		p->object = PT_REGS_PARM1(ctx);
		if (bpf_probe_read_user(&p->count, sizeof(p->count), info + 32))
			p->flags |= GS_GFX_READ_FAILED;
		break;
	}
	case GS_GFX_VK_WAIT_FOR_FENCES: /* (device, fenceCount, pFences, waitAll, timeout) */
		p->object = PT_REGS_PARM1(ctx);
		p->count = (__u32)PT_REGS_PARM2(ctx);
		break;
	case GS_GFX_VK_ALLOCATE_MEMORY: { /* (device, pAllocateInfo, pAllocator, pMemory) */
		/* VkMemoryAllocateInfo: allocationSize at 16, memoryTypeIndex at 24 */
		const void *info = (const void *)PT_REGS_PARM2(ctx);
		if (bpf_probe_read_user(&p->size_bytes, sizeof(p->size_bytes), info + 16) ||
		    bpf_probe_read_user(&p->mem_type, sizeof(p->mem_type), info + 24))
			p->flags |= GS_GFX_READ_FAILED;
		p->out_ptr = PT_REGS_PARM4(ctx);
		break;
	}
	case GS_GFX_VK_FREE_MEMORY: /* (device, memory, pAllocator) */
		p->object = PT_REGS_PARM2(ctx);
		break;
	case GS_GFX_VK_CREATE_DEVICE: /* (physicalDevice, pCreateInfo, pAllocator, pDevice) */
		p->out_ptr = PT_REGS_PARM4(ctx);
		break;
	case GS_GFX_EGL_SWAP_BUFFERS: /* (display, surface) */
	case GS_GFX_GLX_SWAP_BUFFERS: /* (display, drawable) */
	case GS_GFX_VK_ACQUIRE_IMAGE: /* (device, swapchain, timeout, semaphore, fence, pImageIndex) */
		p->object = PT_REGS_PARM2(ctx);
		break;
	default: /* vkQueueWaitIdle(queue), vkDeviceWaitIdle(device), vkDestroyDevice(device, ...), glFinish() */
		p->object = PT_REGS_PARM1(ctx);
		break;
	}
	return 0;
}

SEC("uretprobe")
int gs_gfx_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct gfx_thread *t = gs_thread_state(&gfx_threads);

	if (!t || !GS_CALL_LEAVE(t->depth))
		return 0;
	struct gfx_pending *p = &t->call;
	__u32 call = p->call;
	struct gs_gfx_event *e = bpf_ringbuf_reserve(&gs_gfx_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_GFX_DROP_RINGBUF);
		return 0;
	}
	e->start_ns = p->start_ns;
	e->dur_ns = bpf_ktime_get_boot_ns() - p->start_ns;
	e->object = p->object;
	e->size_bytes = p->size_bytes;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->call = call;
	e->count = p->count;
	e->cmd_buffers = p->cmd_buffers;
	e->mem_type = p->mem_type;
	e->flags = p->flags;
	switch (call) {
	case GS_GFX_VK_FREE_MEMORY:
	case GS_GFX_VK_DESTROY_DEVICE:
	case GS_GFX_GLX_SWAP_BUFFERS:
	case GS_GFX_GL_FINISH:
		e->ret = 0; /* void */
		break;
	default:
		e->ret = (__s32)PT_REGS_RC(ctx);
		break;
	}
	/* The handle the call made, once it succeeded (VK_SUCCESS). */
	if ((call == GS_GFX_VK_ALLOCATE_MEMORY || call == GS_GFX_VK_CREATE_DEVICE) && e->ret == 0 &&
	    bpf_probe_read_user(&e->object, sizeof(e->object), (const void *)p->out_ptr))
		e->flags |= GS_GFX_READ_FAILED;
	bpf_get_current_comm(e->thread, sizeof(e->thread));
	const __u64 rec = sizeof(*e) + 8 /* record header */;
	__u64 avail = bpf_ringbuf_query(&gs_gfx_events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, avail >= wakeup_bytes && avail < wakeup_bytes + rec
	                              ? BPF_RB_FORCE_WAKEUP
	                              : BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("uprobe")
int gs_gfx_fetch_enter(struct pt_regs *ctx)
{
	__u32 getter = (__u32)bpf_get_attach_cookie(ctx);
	struct gfx_thread *t = gfx_thread_enter(true);

	if (!t)
		return 0;
	/* Both read before choosing: a context access at a computed offset does not verify. */
	__u64 first = PT_REGS_PARM1(ctx), second = PT_REGS_PARM2(ctx);
	t->getter = getter;
	t->name =
	        getter == GS_GFX_GET_VK_INSTANCE || getter == GS_GFX_GET_VK_DEVICE ? second : first;
	return 0;
}

/* The name is read at the return: the getter has read it by then, so its page is in memory. */
SEC("uretprobe")
int gs_gfx_fetch_exit(struct pt_regs *ctx)
{
	struct gfx_thread *t = gs_thread_state(&gfx_threads);
	char name[GS_GFX_NAME_LEN] = {};

	if (!t || !GS_CALL_LEAVE(t->getter_depth))
		return 0;
	__u64 fn = PT_REGS_RC(ctx);
	if (!fn || bpf_probe_read_user_str(name, sizeof(name), (const void *)t->name) <= 0)
		return 0;
	__u32 *call = bpf_map_lookup_elem(&gs_gfx_names, name);
	if (!call)
		return 0;
	struct gs_gfx_fetch *e = bpf_ringbuf_reserve(&gs_gfx_fetches, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_GFX_DROP_FETCH);
		return 0;
	}
	e->fn = fn;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->call = *call;
	e->getter = t->getter;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

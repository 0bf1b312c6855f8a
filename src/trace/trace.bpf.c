// SPDX-License-Identifier: GPL-2.0
/* gpuscope trace: one entry and one exit program for every CUDA API in common/cuda_api.h.
 * The attach cookie is the API's row; the row says where each argument lives. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include "common/cuda_api.h"
#include "common/events.h"
#include "common/arch.bpf.h"
#include "common/capture.bpf.h"
#include "common/launch.bpf.h"
#include "common/scope_filter.bpf.h"
#include "common/call_pair.bpf.h"
#include "common/maps.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool emit_enter = true;
const volatile bool emit_exit = true;

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

/* Per thread and layer: the outermost probed call in flight (common/call_pair.bpf.h). Nested
 * calls of the same layer only bump depth, so each layer reports one event per call. */
struct call_state {
	__u64 start_ns;
	__u64 outp;
	__u64 stream;
	__u32 depth;
	__u16 api;
	__u16 pad;
};

struct thread_state {
	struct call_state layer[GS_LAYER_COUNT];
};

GS_THREAD_STORAGE(calls, struct thread_state);

/* Streams under capture: taken at the begin call's return (when it succeeds) or, with no
 * exit program, at its entry; dropped at the end call's entry. */
GS_CAPTURE_STATE()

GS_RINGBUF(events, 1 << 22);

GS_DROP_COUNTERS(drops, GS_DROP_COUNT)

static __always_inline struct gs_call_event *reserve(__u64 id, __u16 api, __u8 layer, __u8 phase)
{
	struct gs_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_DROP_RINGBUF);
		return NULL;
	}
	/* No memset: every header member is written, and userspace reads only the args
	 * members the API row names. */
	e->ts_boot_ns = bpf_ktime_get_boot_ns();
	e->dur_ns = 0;
	e->fields = 0;
	e->ret = 0;
	e->reserved = 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->api = api;
	e->layer = layer;
	e->phase = phase;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->thread, sizeof(e->thread));
	return e;
}

/* Waking the consumer costs an IPI and a context switch per record, several times the
 * uprobe itself. Records are submitted silently until a batch has built up; the consumer
 * also drains on its poll timeout, so a quiet trickle still shows within that timeout. */
const volatile __u64 wakeup_bytes = 64 * 1024;

static __always_inline void submit(struct gs_call_event *e)
{
	/* Wake only when this record carries the backlog across the threshold: waking on
	 * every record above it would put an IPI on each call while the consumer catches up. */
	const __u64 rec = sizeof(*e) + 8 /* ring buffer record header */;
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, avail >= wakeup_bytes && avail < wakeup_bytes + rec
	                              ? BPF_RB_FORCE_WAKEUP
	                              : BPF_RB_NO_WAKEUP);
}

#define ARG(slot) gs_arg_at(&regs, (slot)-1)
/* gs_enter's copy of an argument that its API row (d) names into the event's args (a). */
#define GS_TAKE_ARG(member, slot)                                                                  \
	do {                                                                                       \
		if (d->slot)                                                                       \
			a->member = ARG(d->slot);                                                  \
	} while (0)

SEC("uprobe")
int gs_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	const struct gs_api_desc *d;
	struct gs_call_event *e;
	struct gs_call_args *a;
	struct gs_args regs;

	if (api >= GS_API_COUNT)
		return 0;
	d = &apis[api];
	if (!in_scope())
		return 0;
	gs_args_load(ctx, &regs);

	if (emit_exit) {
		struct thread_state *ts = gs_thread_state_new(&calls);
		if (!ts) {
			count_drop(GS_DROP_STATE_FULL);
		} else {
			struct call_state *st = &ts->layer[d->layer & 1];
			if (!GS_CALL_ENTER(st->depth))
				return 0;
			st->start_ns = bpf_ktime_get_boot_ns();
			st->outp = d->outp ? ARG(d->outp) : 0;
			st->stream = d->stream ? ARG(d->stream) : 0;
			st->api = api;
		}
	}
	if (d->special == GS_SP_CAPTURE_END)
		gs_capture_end(id >> 32, ARG(d->stream));
	else if (!emit_exit && d->special == GS_SP_CAPTURE_BEGIN)
		gs_capture_begin(id >> 32, ARG(d->stream));
	if (!emit_enter)
		return 0;

	e = reserve(id, api, d->layer, GS_PHASE_ENTER);
	if (!e)
		return 0;
	/* Which members apply follows from the API row, so userspace derives it: setting
	 * flag bits here would give the verifier one state per combination. */
	a = &e->args;
	GS_TAKE_ARG(size_bytes, size);
	GS_TAKE_ARG(ptr, ptr);
	GS_TAKE_ARG(dst, dst);
	GS_TAKE_ARG(src, src);
	GS_TAKE_ARG(kind, kind);
	if (d->kind_fixed)
		a->kind = d->kind_fixed - 1;
	GS_TAKE_ARG(stream, stream);
	GS_TAKE_ARG(event, event);
	GS_TAKE_ARG(graph, graph);
	GS_TAKE_ARG(handle, handle);
	GS_TAKE_ARG(device, device);
	GS_TAKE_ARG(func, func);
	GS_TAKE_ARG(ctx, ctx);
	if (d->special >= GS_SP_RT_LAUNCH && d->special <= GS_SP_CU_LAUNCH_EX) {
		gs_launch_decode(&regs, d->special, e);
		if (gs_is_captured(e->pid, a->stream))
			e->fields |= GS_F_CAPTURED;
	}
	submit(e);
	return 0;
}

SEC("uretprobe")
int gs_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	const struct gs_api_desc *d;
	struct thread_state *ts;
	struct call_state st;
	struct call_state *cur;
	struct gs_call_event *e;
	__u64 v = 0;
	__s32 ret = (__s32)PT_REGS_RC(ctx);

	__u8 layer;

	if (api >= GS_API_COUNT)
		return 0;
	/* Read the row before the helper call: afterwards the verifier no longer knows the
	 * compiler's scaled copy of `api` is bounded. */
	layer = apis[api].layer & 1;
	ts = gs_thread_state(&calls);
	if (!ts)
		return 0;
	cur = &ts->layer[layer];
	if (!GS_CALL_LEAVE(cur->depth))
		return 0;
	st = *cur;
	if (st.api >= GS_API_COUNT)
		return 0;
	d = &apis[st.api];

	if (d->special == GS_SP_CAPTURE_BEGIN && ret == 0)
		gs_capture_begin(id >> 32, st.stream);

	e = reserve(id, st.api, d->layer, GS_PHASE_EXIT);
	if (!e)
		return 0;
	e->ret = ret;
	e->dur_ns = e->ts_boot_ns - st.start_ns;
	if (ret == 0 && st.outp && d->out) {
		bpf_probe_read_user(&v, sizeof(v), (void *)st.outp);
		e->args.ptr = v; /* userspace moves it to the member the row's `out` names */
		e->fields = GS_F_OUT;
	}
	submit(e);
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
/* gpuscope copies: every memory copy and memset per process, direction and layer, counted here
 * (calls and bytes of those that succeeded, failed calls apart) so that no event crosses to
 * userspace per call. Only a thread's outermost copy call counts: the runtime's copies reach the
 * driver's, which would count them twice. An event is sent only when a process with rows exits. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/scope_filter.bpf.h"
#include "common/arch.bpf.h"
#include "common/call_pair.bpf.h"
#include "common/maps.bpf.h"
#include "copies/copies.h"

char LICENSE[] SEC("license") = "GPL";

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

/* Per thread (common/call_pair.bpf.h): the outermost copy in progress, whatever its layer. */
struct copy_state {
	__u64 bytes;
	__u32 depth;
	__u16 dir;
	__u16 layer;
};

GS_THREAD_STORAGE(copy_calls, struct copy_state);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GS_CP_MAX_ROWS);
	__type(key, struct gs_cp_key);
	__type(value, struct gs_cp_val);
} counts SEC(".maps");

/* Processes with rows: only their exits are reported. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} copied SEC(".maps");

GS_RINGBUF(events, 1 << 16);

GS_DROP_COUNTERS(drops, GS_CP_DROP_COUNT)

static __always_inline __u64 user_u64(__u64 base, __u32 off)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(base + off));
	return v;
}

static __always_inline __u32 user_u32(__u64 base, __u32 off)
{
	__u32 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(base + off));
	return v;
}

/* CUmemorytype: 1 host, 2 device, 3 array (device memory), 4 unified (the driver decides). */
static __always_inline __u16 dir_of_types(__u32 src, __u32 dst)
{
	if (src == 4 || dst == 4)
		return GS_DIR_DEFAULT;
	if (src == 1)
		return dst == 1 ? GS_DIR_H2H : GS_DIR_H2D;
	return dst == 1 ? GS_DIR_D2H : GS_DIR_D2D;
}

/* A cudaMemcpyKind; one out of range (the call fails) counts as default. */
static __always_inline __u16 dir_of_kind(__u64 kind)
{
	return kind <= GS_DIR_DEFAULT ? (__u16)kind : GS_DIR_DEFAULT;
}

#define ARG(slot) gs_arg_at(&regs, (slot)-1)

SEC("uprobe")
int gs_cp_enter(struct pt_regs *ctx)
{
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	const struct gs_api_desc *d;
	struct copy_state *st;
	struct gs_args regs;
	__u64 bytes = 0, p;
	__u16 dir = GS_DIR_DEFAULT;

	if (api >= GS_API_COUNT)
		return 0;
	d = &apis[api];
	if (!in_scope())
		return 0;
	st = gs_thread_state_new(&copy_calls);
	if (!st) {
		count_drop(GS_CP_DROP_NO_STATE);
		return 0;
	}
	if (!GS_CALL_ENTER(st->depth))
		return 0;
	gs_args_load(ctx, &regs);
	switch (d->copy) {
	case GS_COPY_LINEAR:
		bytes = ARG(d->size) * (d->elem_bytes ? d->elem_bytes : 1);
		break;
	case GS_COPY_2D:
		bytes = ARG(d->width) * ARG(d->height);
		break;
	case GS_COPY_RT_3D:
		p = ARG(d->params);
		bytes = user_u64(p, GS_CP_RT3D_EXTENT) * user_u64(p, GS_CP_RT3D_EXTENT + 8) *
		        user_u64(p, GS_CP_RT3D_EXTENT + 16);
		dir = dir_of_kind(user_u32(p, GS_CP_RT3D_KIND));
		break;
	case GS_COPY_CU_2D:
		p = ARG(d->params);
		bytes = user_u64(p, GS_CP_CU2D_WIDTH) * user_u64(p, GS_CP_CU2D_WIDTH + 8);
		dir = dir_of_types(user_u32(p, GS_CP_CU2D_SRC_TYPE),
		                   user_u32(p, GS_CP_CU2D_DST_TYPE));
		break;
	case GS_COPY_CU_3D:
		p = ARG(d->params);
		bytes = user_u64(p, GS_CP_CU3D_WIDTH) * user_u64(p, GS_CP_CU3D_WIDTH + 8) *
		        user_u64(p, GS_CP_CU3D_WIDTH + 16);
		dir = dir_of_types(user_u32(p, GS_CP_CU3D_SRC_TYPE),
		                   user_u32(p, GS_CP_CU3D_DST_TYPE));
		break;
	}
	if (d->copy_dir)
		dir = d->copy_dir - 1;
	else if (d->kind_fixed)
		dir = d->kind_fixed - 1;
	else if (d->kind)
		dir = dir_of_kind(ARG(d->kind));
	st->bytes = bytes;
	st->dir = dir;
	st->layer = d->layer;
	return 0;
}

SEC("uretprobe")
int gs_cp_exit(struct pt_regs *ctx)
{
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	struct copy_state *st = gs_thread_state(&copy_calls);
	if (!st || !GS_CALL_LEAVE(st->depth))
		return 0;
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct gs_cp_key k = {.pid = pid, .dir = st->dir, .layer = st->layer};
	__u64 bytes = ret == 0 ? st->bytes : 0;
	struct gs_cp_val *v = bpf_map_lookup_elem(&counts, &k);
	if (!v) {
		struct gs_cp_val nv = {.cgroup_id = bpf_get_current_cgroup_id()};
		__u8 one = 1;
		bpf_map_update_elem(&counts, &k, &nv, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&counts, &k); /* or the one a racing thread made */
		if (!v) {
			count_drop(GS_CP_DROP_ROWS_FULL);
			return 0;
		}
		bpf_map_update_elem(&copied, &pid, &one, BPF_ANY);
	}
	if (ret == 0) {
		__sync_fetch_and_add(&v->calls, 1);
		__sync_fetch_and_add(&v->bytes, bytes);
	} else {
		__sync_fetch_and_add(&v->failed, 1);
	}
	return 0;
}

/* A process exits when its last thread does (signal->live has dropped to zero by now). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_cp_proc_exit, struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, tgid);
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (bpf_map_delete_elem(&copied, &pid) != 0)
		return 0;
	struct gs_cp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_CP_DROP_EVENTS);
		return 0;
	}
	e->pid = pid;
	e->pad = 0;
	BPF_CORE_READ_STR_INTO(&e->comm, p, group_leader,
	                       comm); /* /proc has no name for it by now */
	bpf_ringbuf_submit(e, 0);
	return 0;
}

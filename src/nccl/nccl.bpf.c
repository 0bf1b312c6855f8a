// SPDX-License-Identifier: GPL-2.0
/* gpuscope nccl: every call of libnccl.so.2's collectives, point-to-point, group and
 * communicator functions, one record each through a ring buffer. Collectives are few (tens per
 * training step, each moving megabytes), so a record per call costs nothing that counts, and
 * user space needs each call's arrival time to match ranks by sequence number (the straggler
 * view) — per-CPU counters could not give that. One entry and one return program serve every
 * site; the attach cookie says which function it is. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/arch.bpf.h"
#include "common/scope_filter.bpf.h"
#include "common/maps.bpf.h"
#include "common/call_pair.bpf.h"
#include "nccl/nccl.h"

char LICENSE[] SEC("license") = "GPL";

GS_RINGBUF(gs_nccl_events, 1 << 20);
GS_DROP_COUNTERS(gs_nccl_drops, GS_NCCL_DROP_COUNT)

/* Records go in without waking the reader until a batch has built up; it drains on a timer. */
const volatile __u64 wakeup_bytes = 16 * 1024;

/* Per (process, communicator handle): the next collective's sequence number. Deleted at
 * ncclCommDestroy/Abort, and by user space for a process that exits. */
struct nccl_comm_state {
	__u64 next_seq;
	__u32 flags; /* GS_NCCL_SEQ_UNSEEN: made at a collective, not at an init */
	__u32 pad;
};
GS_MAP_DEF(gs_nccl_comms, BPF_MAP_TYPE_HASH, 8192, 0, struct gs_nccl_comm_key,
           struct nccl_comm_state);

/* Processes that called NCCL: their exit is reported (user space ends their communicators). */
GS_MAP_DEF(gs_nccl_pids, BPF_MAP_TYPE_HASH, 4096, 0, __u32, __u8);

/* The entry's state until the return. */
struct nccl_thread {
	__u64 entry_mono_ns;
	__u64 cpu_entry_ns;
	__u64 comm;
	__u64 count;
	__u64 stream;
	__u64 seq;
	__u64 out_ptr; /* init/split/shrink: the ncclComm_t* made; cuDevice: int*; async: ncclResult_t* */
	__u64 parent;
	__u64 devlist; /* initAll: the device list; shrink: the ranks excluded */
	__s32 datatype;
	__s32 redop;
	__s32 peer;
	__s32 rank;
	__s32 nranks;
	__s32 color;
	__u32 op;
	__u32 flags;
	__u32 group_depth_at_entry;
	__u32 depth;       /* probed calls in progress: only the outermost counts (ncclBcast calls
	                    * ncclBroadcast) */
	__u32 group_depth; /* ncclGroupStart calls not yet ended */
	__u32 pad;
	__u8 id[GS_NCCL_ID_BYTES];
};
GS_THREAD_STORAGE(nccl_threads, struct nccl_thread);

static __always_inline __u64 thread_cpu_ns(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	return BPF_CORE_READ(task, se.sum_exec_runtime);
}

/* The ncclUniqueId passed by value (128 bytes) to ncclCommInitRank[Config], argument 2. */
static __always_inline const void *unique_id_arg(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	/* SysV: an aggregate over 16 bytes goes in memory, here the only stack argument. */
	return (const void *)(gs_stack_pointer(ctx) + GS_STACK_ARGS_OFF);
#else
	/* AAPCS64: the caller's copy, by its address in the argument's register. */
	return (const void *)gs_arg(ctx, 2);
#endif
}

static __always_inline void take_seq(struct nccl_thread *t)
{
	struct gs_nccl_comm_key k = {.pid = bpf_get_current_pid_tgid() >> 32, .comm = t->comm};
	struct nccl_comm_state *s = bpf_map_lookup_elem(&gs_nccl_comms, &k);

	if (!s) {
		struct nccl_comm_state fresh = {.next_seq = 0, .flags = GS_NCCL_SEQ_UNSEEN};
		if (bpf_map_update_elem(&gs_nccl_comms, &k, &fresh, BPF_NOEXIST) &&
		    bpf_map_lookup_elem(&gs_nccl_comms, &k) == NULL) {
			count_drop(GS_NCCL_DROP_COMMS);
			return;
		}
		s = bpf_map_lookup_elem(&gs_nccl_comms, &k);
		if (!s)
			return;
		__u8 one = 1;
		bpf_map_update_elem(&gs_nccl_pids, &k.pid, &one, BPF_ANY);
	}
	t->seq = __sync_fetch_and_add(&s->next_seq, 1);
	t->flags |= s->flags;
}

/* Argument positions (0-based), from nccl.h. */
#define COLL(cnt, dt, op_, root, cm, st)                                                           \
	do {                                                                                       \
		t->count = gs_arg(ctx, cnt);                                                       \
		t->datatype = (__s32)gs_arg(ctx, dt);                                              \
		if ((op_) >= 0)                                                                    \
			t->redop = (__s32)gs_arg(ctx, (op_) >= 0 ? (op_) : 0);                     \
		if ((root) >= 0)                                                                   \
			t->peer = (__s32)gs_arg(ctx, (root) >= 0 ? (root) : 0);                    \
		t->comm = gs_arg(ctx, cm);                                                         \
		t->stream = gs_arg(ctx, st);                                                       \
	} while (0)

SEC("uprobe")
int gs_nccl_enter(struct pt_regs *ctx)
{
	__u32 op = (__u32)bpf_get_attach_cookie(ctx);
	struct nccl_thread *t;

	if (!in_scope())
		return 0;
	t = gs_thread_state_new(&nccl_threads);
	if (!t) {
		count_drop(GS_NCCL_DROP_STATE);
		return 0;
	}
	if (!GS_CALL_ENTER(t->depth))
		return 0;
	t->op = op;
	t->flags = 0;
	t->comm = t->count = t->stream = t->out_ptr = t->parent = t->devlist = 0;
	t->seq = GS_NCCL_NO_SEQ;
	t->datatype = t->redop = t->peer = t->rank = t->nranks = t->color = -1;
	t->group_depth_at_entry = t->group_depth;
	switch (op) {
	case GS_NCCL_ALL_REDUCE: /* (send, recv, count, datatype, op, comm, stream) */
		COLL(2, 3, 4, -1, 5, 6);
		break;
	case GS_NCCL_BROADCAST: /* (send, recv, count, datatype, root, comm, stream) */
	case GS_NCCL_GATHER:    /* (send, recv, count, datatype, root, comm, stream) */
	case GS_NCCL_SCATTER:   /* (send, recv, count, datatype, root, comm, stream) */
		COLL(2, 3, -1, 4, 5, 6);
		break;
	case GS_NCCL_BCAST: /* (buff, count, datatype, root, comm, stream) */
		COLL(1, 2, -1, 3, 4, 5);
		break;
	case GS_NCCL_REDUCE: /* (send, recv, count, datatype, op, root, comm, stream) */
		COLL(2, 3, 4, 5, 6, 7);
		break;
	case GS_NCCL_ALL_GATHER: /* (send, recv, sendcount, datatype, comm, stream) */
	case GS_NCCL_ALL_TO_ALL: /* (send, recv, count, datatype, comm, stream) */
		COLL(2, 3, -1, -1, 4, 5);
		break;
	case GS_NCCL_REDUCE_SCATTER: /* (send, recv, recvcount, datatype, op, comm, stream) */
		COLL(2, 3, 4, -1, 5, 6);
		break;
	case GS_NCCL_SEND: /* (sendbuff, count, datatype, peer, comm, stream) */
	case GS_NCCL_RECV: /* (recvbuff, count, datatype, peer, comm, stream) */
		COLL(1, 2, -1, 3, 4, 5);
		break;
	case GS_NCCL_GROUP_START:
		t->group_depth++;
		break;
	case GS_NCCL_GROUP_END:
		if (t->group_depth)
			t->group_depth--;
		break;
	case GS_NCCL_INIT_RANK:        /* (ncclComm_t*, nranks, ncclUniqueId, rank) */
	case GS_NCCL_INIT_RANK_CONFIG: /* (ncclComm_t*, nranks, ncclUniqueId, rank, config) */
		t->out_ptr = PT_REGS_PARM1(ctx);
		t->nranks = (__s32)PT_REGS_PARM2(ctx);
#if defined(__TARGET_ARCH_x86)
		t->rank = (__s32)PT_REGS_PARM3(ctx); /* the id went to the stack */
#else
		t->rank = (__s32)PT_REGS_PARM4(ctx);
#endif
		if (bpf_probe_read_user(t->id, sizeof(t->id), unique_id_arg(ctx)))
			t->flags |= GS_NCCL_READ_FAILED;
		break;
	case GS_NCCL_INIT_RANK_SCALABLE: { /* (ncclComm_t*, nranks, myrank, nId, ncclUniqueId*, config) */
		t->out_ptr = PT_REGS_PARM1(ctx);
		t->nranks = (__s32)PT_REGS_PARM2(ctx);
		t->rank = (__s32)PT_REGS_PARM3(ctx);
		if (bpf_probe_read_user(t->id, sizeof(t->id), (const void *)PT_REGS_PARM5(ctx)))
			t->flags |= GS_NCCL_READ_FAILED;
		break;
	}
	case GS_NCCL_INIT_ALL: /* (ncclComm_t* comms, ndev, const int* devlist) */
		t->out_ptr = PT_REGS_PARM1(ctx);
		t->nranks = (__s32)PT_REGS_PARM2(ctx);
		t->devlist = PT_REGS_PARM3(ctx);
		break;
	case GS_NCCL_SPLIT: /* (comm, color, key, ncclComm_t* newcomm, config) */
		t->parent = PT_REGS_PARM1(ctx);
		t->color = (__s32)PT_REGS_PARM2(ctx);
		t->rank = (__s32)PT_REGS_PARM3(ctx);
		t->out_ptr = PT_REGS_PARM4(ctx);
		break;
	case GS_NCCL_SHRINK: /* (comm, int* exclude, excludeCount, ncclComm_t* newcomm, config, flags) */
		t->parent = PT_REGS_PARM1(ctx);
		t->devlist = PT_REGS_PARM2(ctx);
		t->nranks = (__s32)PT_REGS_PARM3(ctx);
		t->out_ptr = PT_REGS_PARM4(ctx);
		break;
	case GS_NCCL_CU_DEVICE:       /* (comm, int* device) */
	case GS_NCCL_USER_RANK:       /* (comm, int* rank) */
	case GS_NCCL_COUNT:           /* (comm, int* count) */
	case GS_NCCL_GET_ASYNC_ERROR: /* (comm, ncclResult_t* asyncError) */
		t->comm = PT_REGS_PARM1(ctx);
		t->out_ptr = PT_REGS_PARM2(ctx);
		break;
	default: /* ncclCommFinalize, Destroy, Abort: (comm) */
		t->comm = PT_REGS_PARM1(ctx);
		break;
	}
	if (GS_NCCL_IS_COLLECTIVE(op))
		take_seq(t);
	t->cpu_entry_ns = thread_cpu_ns();
	t->entry_mono_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline void submit(void *e, __u64 size)
{
	__u64 avail = bpf_ringbuf_query(&gs_nccl_events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, avail >= wakeup_bytes && avail < wakeup_bytes + size + 8
	                              ? BPF_RB_FORCE_WAKEUP
	                              : BPF_RB_NO_WAKEUP);
}

static __always_inline void emit_call(struct nccl_thread *t, __u64 now, __u64 pid_tgid, __s32 ret)
{
	struct gs_nccl_call *e = bpf_ringbuf_reserve(&gs_nccl_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_NCCL_DROP_RINGBUF);
		return;
	}
	e->op = t->op;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->ret = ret;
	e->entry_mono_ns = t->entry_mono_ns;
	e->call_ns = now - t->entry_mono_ns;
	e->thread_cpu_entry_ns = t->cpu_entry_ns;
	e->thread_cpu_exit_ns = thread_cpu_ns();
	e->comm = t->comm;
	e->count = t->count;
	e->stream = t->stream;
	e->seq = t->seq;
	e->datatype = t->datatype;
	e->redop = t->redop;
	e->peer = t->peer;
	e->group_depth = t->group_depth_at_entry;
	e->flags = t->flags;
	e->pad = 0;
	e->cgroup_id = bpf_get_current_cgroup_id();
	submit(e, sizeof(*e));
}

static __always_inline void emit_life(struct nccl_thread *t, __u64 now, __u64 pid_tgid, __s32 ret)
{
	struct gs_nccl_life *e = bpf_ringbuf_reserve(&gs_nccl_events, sizeof(*e), 0);
	__u32 op = t->op;

	if (!e) {
		count_drop(GS_NCCL_DROP_RINGBUF);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->op = op;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->ret = ret;
	e->entry_mono_ns = t->entry_mono_ns;
	e->call_ns = now - t->entry_mono_ns;
	e->comm = t->comm;
	e->parent = t->parent;
	e->rank = t->rank;
	e->nranks = t->nranks;
	e->color = t->color;
	e->flags = t->flags;
	bpf_get_current_comm(e->thread, sizeof(e->thread));
	e->cgroup_id = bpf_get_current_cgroup_id();
	switch (op) {
	case GS_NCCL_SHRINK:
		for (int i = 0; i < GS_NCCL_MAX_INIT_ALL; i++) {
			if (i >= t->nranks)
				break;
			if (bpf_probe_read_user(&e->ints[i], 4, (const void *)(t->devlist + 4 * i)))
				e->flags |= GS_NCCL_READ_FAILED;
		}
		if (ret == 0 &&
		    bpf_probe_read_user(&e->comm, sizeof(e->comm), (const void *)t->out_ptr))
			e->flags |= GS_NCCL_READ_FAILED;
		break;
	case GS_NCCL_INIT_RANK:
	case GS_NCCL_INIT_RANK_CONFIG:
	case GS_NCCL_INIT_RANK_SCALABLE:
		__builtin_memcpy(e->id, t->id, sizeof(e->id));
		/* fallthrough */
	case GS_NCCL_SPLIT:
		if (ret == 0 &&
		    bpf_probe_read_user(&e->comm, sizeof(e->comm), (const void *)t->out_ptr))
			e->flags |= GS_NCCL_READ_FAILED;
		break;
	case GS_NCCL_INIT_ALL:
		if (ret != 0)
			break;
		for (int i = 0; i < GS_NCCL_MAX_INIT_ALL; i++) {
			if (i >= t->nranks)
				break;
			if (bpf_probe_read_user(&e->init_all_comms[i], 8,
			                        (const void *)(t->out_ptr + 8 * i)))
				e->flags |= GS_NCCL_READ_FAILED;
			e->ints[i] = -1;
			if (t->devlist &&
			    bpf_probe_read_user(&e->ints[i], 4, (const void *)(t->devlist + 4 * i)))
				e->flags |= GS_NCCL_READ_FAILED;
		}
		break;
	case GS_NCCL_CU_DEVICE:
	case GS_NCCL_USER_RANK:
	case GS_NCCL_COUNT:
		if (ret == 0 &&
		    bpf_probe_read_user(&e->rank, sizeof(e->rank), (const void *)t->out_ptr))
			e->flags |= GS_NCCL_READ_FAILED;
		break;
	case GS_NCCL_GET_ASYNC_ERROR:
		if (bpf_probe_read_user(&e->ret, sizeof(e->ret), (const void *)t->out_ptr))
			e->flags |= GS_NCCL_READ_FAILED;
		break;
	}
	submit(e, sizeof(*e));
}

SEC("uretprobe")
int gs_nccl_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct nccl_thread *t = gs_thread_state(&nccl_threads);

	if (!t || !GS_CALL_LEAVE(t->depth))
		return 0;
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	__u32 op = t->op, pid = pid_tgid >> 32;
	__u8 one = 1;

	if (op < GS_NCCL_FIRST_LIFE) {
		emit_call(t, now, pid_tgid, ret);
		return 0;
	}
	if (op == GS_NCCL_GET_ASYNC_ERROR) {
		__s32 async = 0;
		/* Polled by watchdogs many times a second: only a problem is worth a record. */
		if (ret != 0 ||
		    bpf_probe_read_user(&async, sizeof(async), (const void *)t->out_ptr) ||
		    async == 0 || async == 7 /* ncclInProgress */)
			return 0;
	}
	if (op == GS_NCCL_DESTROY || op == GS_NCCL_ABORT) {
		struct gs_nccl_comm_key k = {.pid = pid, .comm = t->comm};
		bpf_map_delete_elem(&gs_nccl_comms, &k);
	}
	if (ret == 0 && op <= GS_NCCL_SHRINK) {
		bpf_map_update_elem(&gs_nccl_pids, &pid, &one, BPF_ANY);
		/* A fresh communicator counts its collectives from 0; the handle of a destroyed
		 * one may come back. */
		__u64 made = 0;
		if (op != GS_NCCL_INIT_ALL &&
		    !bpf_probe_read_user(&made, sizeof(made), (const void *)t->out_ptr) && made) {
			struct gs_nccl_comm_key k = {.pid = pid, .comm = made};
			struct nccl_comm_state s = {};
			bpf_map_update_elem(&gs_nccl_comms, &k, &s, BPF_ANY);
		}
		for (int i = 0; op == GS_NCCL_INIT_ALL && i < GS_NCCL_MAX_INIT_ALL; i++) {
			if (i >= t->nranks ||
			    bpf_probe_read_user(&made, sizeof(made),
			                        (const void *)(t->out_ptr + 8 * i)))
				break;
			struct gs_nccl_comm_key k = {.pid = pid, .comm = made};
			struct nccl_comm_state s = {};
			bpf_map_update_elem(&gs_nccl_comms, &k, &s, BPF_ANY);
		}
	}
	emit_life(t, now, pid_tgid, ret);
	return 0;
}

/* A process exits when its last thread does (signal->live has dropped to zero by now). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_nccl_proc_exit, struct task_struct *task)
{
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (bpf_map_delete_elem(&gs_nccl_pids, &pid) != 0)
		return 0;
	struct gs_nccl_life *e = bpf_ringbuf_reserve(&gs_nccl_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_NCCL_DROP_RINGBUF);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->op = GS_NCCL_PROC_EXIT;
	e->pid = pid;
	e->entry_mono_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0);
	return 0;
}

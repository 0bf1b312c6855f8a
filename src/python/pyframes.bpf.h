/* SPDX-License-Identifier: GPL-2.0 */
/* The CPython frame walk, for any BPF program that samples or probes user threads: finds the
 * current thread's PyThreadState in a process userspace has described in gs_py_procs, walks its
 * interpreter frames (at most GS_PY_MAX_DEPTH) and keeps the chain, deduplicated, in
 * gs_py_stacks. gs_py_capture() returns the chain's hash (0: none). Userspace side:
 * src/python/pystacks.h. The including object needs vmlinux.h, bpf_helpers.h, bpf_core_read.h. */
#ifndef GPUSCOPE_PYFRAMES_BPF_H
#define GPUSCOPE_PYFRAMES_BPF_H

#include "common/maps.bpf.h"
#include "python/pyframes.h"

GS_HASH(gs_py_procs, GS_PY_MAX_PROCS, __u32, struct gs_py_proc);

GS_LRU_HASH(gs_py_tstates, GS_PY_MAX_TSTATES, __u32, struct gs_py_tstate);

GS_MAP_DEF(gs_py_stacks, BPF_MAP_TYPE_HASH, GS_PY_MAX_STACKS, BPF_F_NO_PREALLOC,
           struct gs_py_stack_key, struct gs_py_stack);

GS_RINGBUF(gs_py_events, 1 << 16);
GS_PERCPU_COUNTERS(gs_py_counters, GS_PY_CNT_COUNT, gs_py_count)

/* Scratch: the chain being built, and the frame header just read (too large for the stack;
 * a map value also takes the per-version field offsets as indexes). */
struct gs_py_scratch {
	struct gs_py_stack stack;
	__u8 win[128];
};

GS_PERCPU_VALUE(gs_py_scratch_buf, struct gs_py_scratch);

/* Bytes of an interpreter frame read at once: every field the walk needs lies below this, in
 * every supported version (the highest is owner at 70). */
#define GS_PY_WIN 72

/* The thread's id in its own pid namespace: what CPython stores as native_thread_id. */
static __always_inline __u32 gs_py_ns_tid(struct task_struct *t)
{
	struct pid *p = BPF_CORE_READ(t, thread_pid);
	unsigned int level = BPF_CORE_READ(p, level);
	struct upid up = {};

	bpf_probe_read_kernel(&up, sizeof(up),
	                      (void *)p + bpf_core_field_offset(struct pid, numbers) +
	                              (__u64)(level & 31) * bpf_core_type_size(struct upid));
	return up.nr;
}

static __always_inline __u64 gs_py_read_ptr(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

struct gs_py_thread_walk {
	__u64 ts;
	__u64 found;
	__u32 ns_tid;
	__u16 next_off, tid_off;
};

static long gs_py_thread_step(__u64 i, void *arg)
{
	struct gs_py_thread_walk *w = arg;
	__u64 ntid = 0;

	if (!w->ts || bpf_probe_read_user(&ntid, sizeof(ntid), (void *)(w->ts + w->tid_off)))
		return 1;
	if ((__u32)ntid == w->ns_tid) {
		w->found = w->ts;
		return 1;
	}
	w->ts = gs_py_read_ptr(w->ts + w->next_off);
	return 0;
}

/* The thread's PyThreadState: remembered per thread after one walk of the interpreter's thread
 * list, and checked on every use (a thread state is freed when its thread ends). A thread that
 * has none (a C++ worker) walks the list again only every 64th time. */
static __always_inline __u64 gs_py_tstate_of(struct gs_py_proc *pp, __u32 pid, __u32 tid,
                                             __u32 ns_tid)
{
	struct gs_py_tstate *c = bpf_map_lookup_elem(&gs_py_tstates, &tid);
	struct gs_py_tstate fresh = {.pid = pid};
	struct gs_py_thread_walk w = {.ns_tid = ns_tid,
	                              .next_off = pp->tstate_next,
	                              .tid_off = pp->tstate_native_thread_id};

	if (c && c->pid == pid) {
		if (!c->addr && (++c->skipped & 63))
			return 0;
		if (c->addr && gs_py_read_ptr(c->addr + pp->tstate_native_thread_id) == ns_tid)
			return c->addr;
	}
	w.ts = gs_py_read_ptr(pp->interp_head_addr);
	if (w.ts)
		w.ts = gs_py_read_ptr(w.ts + pp->interp_threads_head);
	bpf_loop(GS_PY_MAX_THREADS, gs_py_thread_step, &w, 0);
	fresh.addr = w.found;
	bpf_map_update_elem(&gs_py_tstates, &tid, &fresh, BPF_ANY);
	return fresh.addr;
}

static __always_inline __u64 gs_py_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x100000001b3ull; /* FNV-1a's prime */
	return h ^ (h >> 29);
}

struct gs_py_frame_walk {
	struct gs_py_proc p;
	__u64 f, h;
	__u32 depth, flags;
};

/* One interpreter frame: bpf_loop verifies it once, where an unrolled or bounded loop of this
 * body takes the verifier past its instruction budget. */
static long gs_py_frame_step(__u64 i, void *arg)
{
	struct gs_py_frame_walk *w = arg;
	struct gs_py_scratch *sc;
	struct gs_py_frame *fr;
	__u64 code, prev, instr, base, qual;
	__u32 d;
	__u16 o;

	if (!w->f)
		return 1;
	sc = gs_percpu(&gs_py_scratch_buf);
	if (!sc)
		return 1;
	if (bpf_probe_read_user(sc->win, GS_PY_WIN, (void *)w->f)) {
		gs_py_count(GS_PY_CNT_READ_ERR);
		return 1;
	}
	o = w->p.frame_code & 63;
	code = *(__u64 *)(sc->win + o);
	o = w->p.frame_previous & 63;
	prev = *(__u64 *)(sc->win + o);
	o = w->p.frame_instr & 63;
	instr = *(__u64 *)(sc->win + o);
	o = w->p.frame_owner & 127;
	d = w->depth;
	if (sc->win[o] == GS_PY_OWNED_BY_CSTACK) {
		/* The frame below it began a C-level call of the interpreter loop. */
		if (d > 0)
			sc->stack.frames[(d - 1) & (GS_PY_MAX_DEPTH - 1)].tag |= GS_PY_ENTRY;
		w->f = prev;
		return 0;
	}
	if (d >= GS_PY_MAX_DEPTH) {
		w->flags |= GS_PY_TRUNCATED;
		return 1;
	}
	qual = gs_py_read_ptr(code + w->p.code_qualname);
	base = code + w->p.code_adaptive;
	fr = &sc->stack.frames[d & (GS_PY_MAX_DEPTH - 1)];
	fr->code = code;
	fr->lasti = instr > base ? (__u32)((instr - base) / 2) : 0;
	fr->tag = (__u32)(qual >> 3) & ~GS_PY_ENTRY;
	if (w->p.frame_is_entry != GS_PY_NONE) {
		o = w->p.frame_is_entry & 127;
		if (sc->win[o])
			fr->tag |= GS_PY_ENTRY;
	}
	w->h = gs_py_mix(w->h, code);
	w->h = gs_py_mix(w->h, ((__u64)fr->tag << 32) | fr->lasti);
	w->depth = d + 1;
	w->f = prev;
	return 0;
}

/* An exec replaces the interpreter (or ends it): the walk stops for the pid at once, and a notice
 * with hash 0 tells userspace to look at the new image. Attached by capabilities that keep no
 * exec handling of their own. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(gs_py_exec, struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, tgid);
	struct gs_py_new_stack *n;

	if (bpf_map_delete_elem(&gs_py_procs, &pid))
		return 0;
	n = bpf_ringbuf_reserve(&gs_py_events, sizeof(*n), 0);
	if (!n) {
		gs_py_count(GS_PY_CNT_EVENTS_LOST);
		return 0;
	}
	n->key.pid = pid;
	n->key.pad = 0;
	n->key.hash = 0;
	bpf_ringbuf_submit(n, 0);
	return 0;
}

/* Walks the interpreter frames of task t (the current task) and returns the hash of the chain,
 * kept under (tgid, hash) in gs_py_stacks; 0 when t's process is not a described CPython or the
 * thread runs no Python code. */
static __always_inline __u64 gs_py_capture(struct task_struct *t)
{
	__u32 pid = BPF_CORE_READ(t, tgid), tid = BPF_CORE_READ(t, pid);
	struct gs_py_proc *pp = bpf_map_lookup_elem(&gs_py_procs, &pid);
	struct gs_py_frame_walk w = {.h = 0xcbf29ce484222325ull};
	struct gs_py_stack_key key = {.pid = pid};
	struct gs_py_scratch *sc;
	__u64 ts;

	if (!pp)
		return 0;
	gs_py_count(GS_PY_CNT_WALKS);
	ts = gs_py_tstate_of(pp, pid, tid, gs_py_ns_tid(t));
	if (!ts) {
		gs_py_count(GS_PY_CNT_NO_TSTATE);
		return 0;
	}
	w.p = *pp;
	w.f = gs_py_read_ptr(ts + w.p.tstate_frame);
	if (w.f && w.p.cframe_current_frame != GS_PY_NONE)
		w.f = gs_py_read_ptr(w.f + w.p.cframe_current_frame);
	/* Shim frames (3.12+) take turns without taking a slot: room for one per frame. */
	bpf_loop(2 * GS_PY_MAX_DEPTH, gs_py_frame_step, &w, 0);
	if (w.f && w.depth >= GS_PY_MAX_DEPTH)
		w.flags |= GS_PY_TRUNCATED;
	if (!w.depth)
		return 0;
	if (w.flags & GS_PY_TRUNCATED)
		gs_py_count(GS_PY_CNT_TRUNCATED);
	sc = gs_percpu(&gs_py_scratch_buf);
	if (!sc)
		return 0;
	sc->stack.depth = w.depth;
	sc->stack.flags = w.flags;
	key.hash = w.h ? w.h : 1;
	if (bpf_map_lookup_elem(&gs_py_stacks, &key))
		return key.hash;
	if (bpf_map_update_elem(&gs_py_stacks, &key, &sc->stack, BPF_NOEXIST) == 0) {
		struct gs_py_new_stack *n = bpf_ringbuf_reserve(&gs_py_events, sizeof(*n), 0);
		if (n) {
			n->key = key;
			bpf_ringbuf_submit(n, 0);
		} else {
			gs_py_count(GS_PY_CNT_EVENTS_LOST);
		}
	} else if (!bpf_map_lookup_elem(&gs_py_stacks, &key)) {
		gs_py_count(GS_PY_CNT_STACKS_FULL);
		return 0;
	}
	return key.hash;
}

#endif

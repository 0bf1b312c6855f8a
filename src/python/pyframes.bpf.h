/* SPDX-License-Identifier: GPL-2.0 */
/* The CPython frame walk, for any BPF program that samples or probes user threads: finds the
 * current thread's PyThreadState in a process userspace has described in gs_py_procs, walks its
 * interpreter frames (at most GS_PY_MAX_DEPTH) and keeps the chain, deduplicated, in
 * gs_py_stacks. gs_py_capture() returns the chain's hash (0: none). Userspace side:
 * src/python/pystacks.h. The including object needs vmlinux.h, bpf_helpers.h, bpf_core_read.h. */
#ifndef GPUSCOPE_PYFRAMES_BPF_H
#define GPUSCOPE_PYFRAMES_BPF_H

#include "python/pyframes.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GS_PY_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct gs_py_proc);
} gs_py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, GS_PY_MAX_TSTATES);
	__type(key, __u32);
	__type(value, struct gs_py_tstate);
} gs_py_tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, GS_PY_MAX_STACKS);
	__type(key, struct gs_py_stack_key);
	__type(value, struct gs_py_stack);
} gs_py_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} gs_py_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GS_PY_CNT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} gs_py_counters SEC(".maps");

/* Scratch: the chain being built, and the frame header just read (too large for the stack;
 * a map value also takes the per-version field offsets as indexes). */
struct gs_py_scratch {
	struct gs_py_stack stack;
	__u8 win[128];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gs_py_scratch);
} gs_py_scratch_buf SEC(".maps");

/* Bytes of an interpreter frame read at once: every field the walk needs lies below this, in
 * every supported version (the highest is owner at 70). */
#define GS_PY_WIN 72

static __always_inline void gs_py_count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&gs_py_counters, &which);
	if (c)
		*c += 1;
}

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

/* The thread's PyThreadState: remembered per thread after one walk of the interpreter's thread
 * list, and checked on every use (a thread state is freed when its thread ends). A thread that
 * has none (a C++ worker) walks the list again only every 64th time. */
static __always_inline __u64 gs_py_tstate_of(struct gs_py_proc *pp, __u32 pid, __u32 tid, __u32 ns_tid)
{
	struct gs_py_tstate *c = bpf_map_lookup_elem(&gs_py_tstates, &tid);
	struct gs_py_tstate fresh = {.pid = pid};
	__u64 ts, ntid;

	if (c && c->pid == pid) {
		if (!c->addr && (++c->pad & 63))
			return 0;
		if (c->addr && gs_py_read_ptr(c->addr + pp->tstate_native_thread_id) == ns_tid)
			return c->addr;
	}
	ts = gs_py_read_ptr(pp->interp_head_addr);
	if (ts)
		ts = gs_py_read_ptr(ts + pp->interp_threads_head);
	for (int i = 0; i < GS_PY_MAX_THREADS && ts; i++) {
		if (bpf_probe_read_user(&ntid, sizeof(ntid), (void *)(ts + pp->tstate_native_thread_id)))
			break;
		if ((__u32)ntid == ns_tid) {
			fresh.addr = ts;
			break;
		}
		ts = gs_py_read_ptr(ts + pp->tstate_next);
	}
	bpf_map_update_elem(&gs_py_tstates, &tid, &fresh, BPF_ANY);
	return fresh.addr;
}

static __always_inline __u64 gs_py_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x100000001b3ull; /* FNV-1a's prime */
	return h ^ (h >> 29);
}

/* Walks the interpreter frames of task t (the current task) and returns the hash of the chain,
 * kept under (tgid, hash) in gs_py_stacks; 0 when t's process is not a described CPython or the
 * thread runs no Python code. */
static __always_inline __u64 gs_py_capture(struct task_struct *t)
{
	__u32 pid = BPF_CORE_READ(t, tgid), tid = BPF_CORE_READ(t, pid), zero = 0;
	struct gs_py_proc *pp = bpf_map_lookup_elem(&gs_py_procs, &pid);
	struct gs_py_scratch *sc;
	struct gs_py_stack_key key = {.pid = pid};
	__u64 ts, f, h = 0xcbf29ce484222325ull;
	__u32 depth = 0, flags = 0;

	if (!pp)
		return 0;
	gs_py_count(GS_PY_CNT_WALKS);
	ts = gs_py_tstate_of(pp, pid, tid, gs_py_ns_tid(t));
	if (!ts) {
		gs_py_count(GS_PY_CNT_NO_TSTATE);
		return 0;
	}
	sc = bpf_map_lookup_elem(&gs_py_scratch_buf, &zero);
	if (!sc)
		return 0;
	f = gs_py_read_ptr(ts + pp->tstate_frame);
	if (f && pp->cframe_current_frame != GS_PY_NONE)
		f = gs_py_read_ptr(f + pp->cframe_current_frame);

	/* Shim frames (3.12+) take loop turns without taking a slot: room for one per frame. */
	for (int i = 0; i < 2 * GS_PY_MAX_DEPTH && f; i++) {
		__u64 code, prev, instr, base, qual;
		__u16 o;
		__u8 owner;

		if (bpf_probe_read_user(sc->win, GS_PY_WIN, (void *)f)) {
			gs_py_count(GS_PY_CNT_READ_ERR);
			break;
		}
		o = pp->frame_code & 63;
		code = *(__u64 *)(sc->win + o);
		o = pp->frame_previous & 63;
		prev = *(__u64 *)(sc->win + o);
		o = pp->frame_instr & 63;
		instr = *(__u64 *)(sc->win + o);
		o = pp->frame_owner & 127;
		owner = sc->win[o];
		if (owner == GS_PY_OWNED_BY_CSTACK) {
			/* The frame below it began a C-level call of the interpreter loop. */
			if (depth > 0)
				sc->stack.frames[(depth - 1) & (GS_PY_MAX_DEPTH - 1)].tag |= GS_PY_ENTRY;
			f = prev;
			continue;
		}
		if (depth >= GS_PY_MAX_DEPTH) {
			flags |= GS_PY_TRUNCATED;
			break;
		}
		qual = gs_py_read_ptr(code + pp->code_qualname);
		base = code + pp->code_adaptive;
		struct gs_py_frame *fr = &sc->stack.frames[depth & (GS_PY_MAX_DEPTH - 1)];
		fr->code = code;
		fr->lasti = instr > base ? (__u32)((instr - base) / 2) : 0;
		fr->tag = (__u32)(qual >> 3) & ~GS_PY_ENTRY;
		if (pp->frame_is_entry != GS_PY_NONE) {
			o = pp->frame_is_entry & 127;
			if (sc->win[o])
				fr->tag |= GS_PY_ENTRY;
		}
		h = gs_py_mix(h, code);
		h = gs_py_mix(h, ((__u64)fr->tag << 32) | fr->lasti);
		depth++;
		f = prev;
	}
	if (f && !(flags & GS_PY_TRUNCATED) && depth >= GS_PY_MAX_DEPTH)
		flags |= GS_PY_TRUNCATED;
	if (!depth)
		return 0;
	if (flags & GS_PY_TRUNCATED)
		gs_py_count(GS_PY_CNT_TRUNCATED);
	sc->stack.depth = depth;
	sc->stack.flags = flags;
	key.hash = h ? h : 1;
	if (bpf_map_lookup_elem(&gs_py_stacks, &key))
		return key.hash;
	/* Frames past depth are left from earlier walks: clear them so equal chains store equal. */
	for (int i = 0; i < GS_PY_MAX_DEPTH; i++)
		if (i >= depth) {
			sc->stack.frames[i].code = 0;
			sc->stack.frames[i].lasti = 0;
			sc->stack.frames[i].tag = 0;
		}
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

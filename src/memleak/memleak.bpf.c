// SPDX-License-Identifier: GPL-2.0
/* gpuscope memleak: every live GPU allocation per process, kept here in bounded hash maps,
 * so that nothing crosses to userspace per allocation or free. The ring buffer carries only
 * process exits and execs (with the counters read just before they are deleted) and frees
 * that freed nothing gpuscope knew. Userspace lists and deletes the allocations of a
 * process that has gone. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/scope_filter.bpf.h"
#include "memleak/memleak.h"
#include "common/call_pair.bpf.h"
#include "common/maps.bpf.h"
#include "python/pyframes.bpf.h"
#include "common/arch.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool capture_stacks = false;
const volatile bool py_walk = false; /* CPython frames of allocating stacks */

/* CLOCK_BOOTTIME when userspace last attached probes to a newly found object: a process
 * that started before that may have allocated where gpuscope did not see it. */
volatile __u64 watch_since_ns = 0;
/* CLOCK_BOOTTIME when gpuscope started watching: a process started since then had every
 * runtime call seen (libraries it maps later are probed before their first call). */
volatile __u64 session_start_ns = 0;

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

/* A context call in flight, one per layer: the runtime's context calls reach the driver's,
 * and both are followed. */
struct ctx_call {
	__u64 ctx;  /* the CUcontext argument */
	__u64 outp; /* where the CUcontext out value goes */
	__s32 dev;  /* the device argument, -1 when none */
	__u16 site;
	__u16 depth;
};

/* Per thread (common/call_pair.bpf.h): the outermost probed memory call in flight (a runtime
 * call that reaches the driver bumps depth at the driver probe and is handled once, when the
 * runtime call returns), and the thread's current context, as the context calls leave it. The context
 * is looked up here, when it changes, so an allocation costs no map lookup for it. */
struct thread_state {
	__u64 arg[4];
	__u32 depth;
	__u32 site;
	__u64 cur_ctx; /* GS_ML_PRIMARY_CTX(dev) or a CUcontext; 0: none known */
	__s32 cur_dev; /* its device (when cur_ctx is set), -1 when not known */
	__u32 nstack;
	__u64 stack_ctx[GS_ML_CTX_STACK]; /* contexts pushed under cur_ctx, innermost last */
	__s32 stack_dev[GS_ML_CTX_STACK];
	struct ctx_call cx[GS_LAYER_COUNT];
};

GS_THREAD_STORAGE(ml_threads, struct thread_state);

GS_HASH(ml_allocs, GS_ML_MAX_ALLOCS, struct gs_ml_key, struct gs_ml_alloc);

/* Sized to GS_ML_MAX_ALLOCS by userspace with --stacks. */
GS_MAP_DEF(ml_stacks, BPF_MAP_TYPE_HASH, 1, BPF_F_NO_PREALLOC, struct gs_ml_key,
           struct gs_ml_stack);

GS_HASH(ml_procs, GS_ML_MAX_PROCS, __u32, struct gs_ml_proc);

GS_LRU_HASH(ml_freed, GS_ML_MAX_FREED, struct gs_ml_key, struct gs_ml_freed);

GS_HASH(ml_errors, GS_ML_MAX_ERRORS, struct gs_ml_err_key, struct gs_ml_err_val);

GS_HASH(ml_ctxs, GS_ML_MAX_CTXS, struct gs_ml_ctx_key, struct gs_ml_ctx);

GS_RINGBUF(ml_events, 1 << 18);

GS_DROP_COUNTERS(ml_drops, GS_ML_DROP_COUNT)

/* Scratch: too large for the BPF stack. */
GS_PERCPU_VALUE(ml_stack_buf, struct gs_ml_stack);
GS_PERCPU_VALUE(ml_proc_buf, struct gs_ml_proc);

static __always_inline struct gs_ml_proc *get_proc(__u32 pid)
{
	struct gs_ml_proc *p = bpf_map_lookup_elem(&ml_procs, &pid);
	if (p)
		return p;
	struct gs_ml_proc *np = gs_percpu(&ml_proc_buf);
	if (!np)
		return NULL;
	__builtin_memset(np, 0, sizeof(*np));
	np->gen_ns = bpf_ktime_get_boot_ns();
	if (bpf_map_update_elem(&ml_procs, &pid, np, BPF_NOEXIST) != 0) {
		p = bpf_map_lookup_elem(&ml_procs, &pid); /* another thread made it first */
		if (!p)
			count_drop(GS_ML_DROP_PROCS_FULL);
		return p;
	}
	return bpf_map_lookup_elem(&ml_procs, &pid);
}

static __always_inline void count_error(struct gs_ml_proc *p, __u32 pid, __u8 op, __u8 layer,
                                        __s32 code)
{
	struct gs_ml_err_key k = {.pid = pid, .op = op, .layer = layer, .code = code};
	struct gs_ml_err_val *v = bpf_map_lookup_elem(&ml_errors, &k);
	if (v && v->gen_ns == p->gen_ns) {
		__sync_fetch_and_add(&v->count, 1);
		return;
	}
	struct gs_ml_err_val nv = {.count = 1, .gen_ns = p->gen_ns};
	if (bpf_map_update_elem(&ml_errors, &k, &nv, v ? BPF_EXIST : BPF_NOEXIST) != 0) {
		v = bpf_map_lookup_elem(&ml_errors, &k);
		if (v)
			__sync_fetch_and_add(&v->count, 1);
		else
			count_drop(GS_ML_DROP_ERRORS_FULL);
	}
}

static __always_inline void account(struct gs_ml_proc *p, __u8 category, __s64 bytes, __s64 allocs)
{
	if (category == GS_MEM_PINNED) {
		__sync_fetch_and_add(&p->pinned_bytes, bytes);
		__sync_fetch_and_add(&p->pinned_allocs, allocs);
	} else {
		__sync_fetch_and_add(&p->outstanding_bytes, bytes);
		__sync_fetch_and_add(&p->outstanding_allocs, allocs);
	}
}

static __always_inline void emit_free(__u32 type, __u32 pid, __u64 addr, __s32 ret, __u32 site,
                                      __u8 reason, __u8 layer)
{
	struct gs_ml_event *e = bpf_ringbuf_reserve(&ml_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_ML_DROP_EVENTS);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->pid = pid;
	e->ts_boot_ns = bpf_ktime_get_boot_ns();
	e->addr = addr;
	e->ret = ret;
	e->site = site;
	e->reason = reason;
	e->layer = layer;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	BPF_CORE_READ_STR_INTO(&e->comm, t, group_leader,
	                       comm); /* the process may be gone when it is read */
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void save_stack(struct pt_regs *ctx, struct gs_ml_key *k)
{
	struct gs_ml_stack *s = gs_percpu(&ml_stack_buf);
	if (!s)
		return;
	long n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
	if (n <= 0) {
		count_drop(GS_ML_DROP_STACKS);
		return;
	}
	__u64 i = (__u64)n / 8;
	if (i < GS_ML_STACK_DEPTH)
		s->ips[i] = 0;
	s->py_hash = py_walk ? gs_py_capture(bpf_get_current_task_btf()) : 0;
	if (bpf_map_update_elem(&ml_stacks, k, s, BPF_ANY) != 0)
		count_drop(GS_ML_DROP_STACKS);
}

/* Records a new allocation (or VMM handle); a stale entry from a missed free is replaced. */
static __always_inline void record(struct pt_regs *ctx, struct gs_ml_proc *p, struct gs_ml_key *k,
                                   struct gs_ml_alloc *a)
{
	if (bpf_map_update_elem(&ml_allocs, k, a, BPF_NOEXIST) != 0) {
		struct gs_ml_alloc *old = bpf_map_lookup_elem(&ml_allocs, k);
		if (!old) {
			__sync_fetch_and_add(&p->allocs_untracked, 1);
			count_drop(GS_ML_DROP_ALLOCS_FULL);
			return;
		}
		account(p, old->category, -(__s64)old->size_bytes, -1);
		if (bpf_map_update_elem(&ml_allocs, k, a, BPF_ANY) != 0) {
			__sync_fetch_and_add(&p->allocs_untracked, 1);
			return;
		}
	}
	account(p, a->category, a->size_bytes, 1);
	if (capture_stacks)
		save_stack(ctx, k);
}

static __always_inline void forget(struct gs_ml_proc *p, struct gs_ml_key *k, struct gs_ml_alloc *a)
{
	/* Deleting decides: of two threads freeing the same address, one accounts for it. */
	__u64 size = a->size_bytes;
	__u8 cat = a->category;
	if (bpf_map_delete_elem(&ml_allocs, k) != 0)
		return;
	account(p, cat, -(__s64)size, -1);
	if (capture_stacks)
		bpf_map_delete_elem(&ml_stacks, k);
	struct gs_ml_freed f = {.ts_boot_ns = bpf_ktime_get_boot_ns()};
	bpf_map_update_elem(&ml_freed, k, &f, BPF_ANY);
}

static __always_inline bool started_before_watch(void)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(t, group_leader, start_boottime) < watch_since_ns;
}

static __always_inline void on_free(struct gs_ml_proc *p, __u32 pid, __u32 site, __u8 layer,
                                    __u32 space, __u64 ptr, __s32 ret)
{
	struct gs_ml_key k = {.pid = pid, .space = space, .addr = ptr, .gen_ns = p->gen_ns};
	struct gs_ml_alloc *a = bpf_map_lookup_elem(&ml_allocs, &k);
	bool freed_before = false;
	if (!a) {
		struct gs_ml_freed *f = bpf_map_lookup_elem(&ml_freed, &k);
		freed_before = f != NULL;
	}
	if (ret != 0) {
		__sync_fetch_and_add(&p->frees_failed, 1);
		count_error(p, pid, GS_ML_OP_FREE, layer, ret);
		if (freed_before)
			__sync_fetch_and_add(&p->double_frees, 1);
		emit_free(GS_ML_EV_BAD_FREE, pid, ptr, ret, site,
		          freed_before ? GS_ML_R_DOUBLE_FREE : GS_ML_R_ERROR, layer);
		return;
	}
	if (a && space == GS_ML_SPACE_HANDLE && a->vmm_released) {
		a = NULL; /* released before and still mapped: a second release */
		freed_before = true;
	}
	if (a) {
		__sync_fetch_and_add(&p->frees_ok, 1);
		if (space == GS_ML_SPACE_HANDLE) {
			/* The memory stays held while the handle is mapped. */
			a->vmm_released = 1;
			if (a->vmm_mappings > 0)
				return;
		}
		forget(p, &k, a);
		return;
	}
	if (freed_before) {
		__sync_fetch_and_add(&p->bad_frees, 1);
		__sync_fetch_and_add(&p->double_frees, 1);
		emit_free(GS_ML_EV_BAD_FREE, pid, ptr, ret, site, GS_ML_R_DOUBLE_FREE, layer);
	} else if (p->allocs_untracked > 0 || started_before_watch()) {
		__sync_fetch_and_add(&p->frees_untracked, 1);
		emit_free(GS_ML_EV_UNTRACKED_FREE, pid, ptr, ret, site, GS_ML_R_NONE, layer);
	} else {
		__sync_fetch_and_add(&p->bad_frees, 1);
		emit_free(GS_ML_EV_BAD_FREE, pid, ptr, ret, site, GS_ML_R_UNKNOWN_ADDRESS, layer);
	}
}

static __always_inline void on_unmap(struct gs_ml_proc *p, __u32 pid, __u64 va, __u64 size)
{
	__u64 end = va + size;
	for (int i = 0; i < GS_ML_UNMAP_SPAN && va < end; i++) {
		struct gs_ml_key mk = {
		        .pid = pid, .space = GS_ML_SPACE_MAPPING, .addr = va, .gen_ns = p->gen_ns};
		struct gs_ml_alloc *m = bpf_map_lookup_elem(&ml_allocs, &mk);
		if (!m)
			return;
		__u64 handle = m->handle, msize = m->size_bytes;
		if (bpf_map_delete_elem(&ml_allocs, &mk) != 0)
			return;
		struct gs_ml_key hk = {.pid = pid,
		                       .space = GS_ML_SPACE_HANDLE,
		                       .addr = handle,
		                       .gen_ns = p->gen_ns};
		struct gs_ml_alloc *h = bpf_map_lookup_elem(&ml_allocs, &hk);
		if (h) {
			if (h->vmm_mappings > 0)
				__sync_fetch_and_add(&h->vmm_mappings, -1);
			if (h->vmm_released && h->vmm_mappings == 0)
				forget(p, &hk, h);
		}
		if (!msize)
			return;
		va += msize;
	}
}

/* ---- contexts ---- */

struct release_match {
	__u32 pid;
	__u32 pad;
	__u64 gen_ns;
	__u64 ctx;
};

struct release_acc {
	__u64 bytes, allocs, pinned_bytes, pinned_allocs;
};

/* The sums live in a map value, not on the stack: the verifier follows stack values through
 * every callback iteration, and counts it can follow never converge. */
GS_PERCPU_VALUE(ml_release_buf, struct release_acc);

static long release_one(struct bpf_map *map, struct gs_ml_key *k, struct gs_ml_alloc *a,
                        struct release_match *m)
{
	if (k->pid != m->pid || k->gen_ns != m->gen_ns || k->space != GS_ML_SPACE_ADDR ||
	    a->ctx != m->ctx)
		return 0;
	struct gs_ml_key key = *k;
	__u64 size = a->size_bytes;
	bool pinned = a->category == GS_MEM_PINNED;
	struct release_acc *r = gs_percpu(&ml_release_buf);
	if (!r)
		return 1;
	if (bpf_map_delete_elem(&ml_allocs, &key) != 0)
		return 0; /* a free won the race: it accounted for it */
	if (capture_stacks)
		bpf_map_delete_elem(&ml_stacks, &key);
	if (pinned) {
		r->pinned_bytes += size;
		r->pinned_allocs++;
	} else {
		r->bytes += size;
		r->allocs++;
	}
	return 0;
}

/* A context ended: its allocations are gone without a free. They leave the map and the
 * counters now, so the exit report lists only what was still held, and userspace hears of
 * them once. Contexts end rarely, so walking the allocation map here is cheap overall. */
static __always_inline void release_ctx(struct gs_ml_proc *p, __u32 pid, __u64 ctx_id, __s32 dev,
                                        __u32 site, __u8 layer)
{
	struct release_match m = {.pid = pid, .gen_ns = p->gen_ns, .ctx = ctx_id};
	struct release_acc *r = gs_percpu(&ml_release_buf);
	if (!r)
		return;
	__builtin_memset(r, 0, sizeof(*r));
	bpf_for_each_map_elem(&ml_allocs, release_one, &m, 0);
	r = gs_percpu(&ml_release_buf);
	if (!r || (!r->allocs && !r->pinned_allocs))
		return;
	struct release_acc sum = *r;
	account(p, GS_MEM_DEVICE, -(__s64)sum.bytes, -(__s64)sum.allocs);
	account(p, GS_MEM_PINNED, -(__s64)sum.pinned_bytes, -(__s64)sum.pinned_allocs);
	struct gs_ml_event *e = bpf_ringbuf_reserve(&ml_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_ML_DROP_EVENTS);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = GS_ML_EV_CTX_RELEASED;
	e->pid = pid;
	e->ts_boot_ns = bpf_ktime_get_boot_ns();
	e->addr = ctx_id;
	e->device = dev;
	e->site = site;
	e->layer = layer;
	e->counters.gen_ns = p->gen_ns;
	e->counters.outstanding_bytes = sum.bytes;
	e->counters.outstanding_allocs = sum.allocs;
	e->counters.pinned_bytes = sum.pinned_bytes;
	e->counters.pinned_allocs = sum.pinned_allocs;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	BPF_CORE_READ_STR_INTO(&e->comm, t, group_leader, comm);
	bpf_ringbuf_submit(e, 0);
}

/* The id allocations use for a CUcontext (primary contexts by device), and its device. */
static __always_inline void ctx_lookup(__u32 pid, __u64 gen_ns, __u64 c, __u64 *id, __s32 *dev)
{
	*id = c;
	*dev = -1;
	if (!c)
		return;
	struct gs_ml_ctx_key k = {.pid = pid, .ctx = c};
	struct gs_ml_ctx *v = bpf_map_lookup_elem(&ml_ctxs, &k);
	if (!v || v->gen_ns != gen_ns)
		return;
	*dev = v->device;
	if (v->primary)
		*id = GS_ML_PRIMARY_CTX(v->device);
}

static __always_inline void ctx_remember(__u32 pid, __u64 gen_ns, __u64 c, __s32 dev, __u32 primary)
{
	struct gs_ml_ctx_key k = {.pid = pid, .ctx = c};
	struct gs_ml_ctx v = {.gen_ns = gen_ns, .device = dev, .primary = primary};
	if (c && bpf_map_update_elem(&ml_ctxs, &k, &v, BPF_ANY) != 0)
		count_drop(GS_ML_DROP_CTXS_FULL);
}

static __always_inline void ctx_push(struct thread_state *st, __u64 id, __s32 dev)
{
	__u32 n = st->nstack;
	if (n < GS_ML_CTX_STACK) {
		st->stack_ctx[n] = st->cur_ctx;
		st->stack_dev[n] = st->cur_dev;
		st->nstack = n + 1;
	}
	st->cur_ctx = id;
	st->cur_dev = dev;
}

static __always_inline void ctx_pop(struct thread_state *st)
{
	__u32 n = st->nstack;
	if (n == 0 || n > GS_ML_CTX_STACK) {
		st->cur_ctx = 0;
		return;
	}
	n--;
	st->nstack = n;
	st->cur_ctx = st->stack_ctx[n];
	st->cur_dev = st->stack_dev[n];
}

/* The runtime binds a context to the thread before its first call does anything: the one
 * current, or the primary context of its default device 0. Only known for processes
 * watched since they started: cudaSetDevice may have come before. */
static __always_inline void runtime_binds(struct thread_state *st)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	if (!st->cur_ctx && session_start_ns &&
	    BPF_CORE_READ(t, group_leader, start_boottime) >= session_start_ns) {
		st->cur_ctx = GS_ML_PRIMARY_CTX(0);
		st->cur_dev = 0;
	}
}

static __always_inline int ctx_exit(struct pt_regs *ctx, struct thread_state *st, __u32 layer)
{
	struct ctx_call *c = &st->cx[layer & 1];
	if (!GS_CALL_LEAVE(c->depth))
		return 0;
	__u32 site = c->site;
	if (site >= GS_API_COUNT || (__s32)PT_REGS_RC(ctx) != 0)
		return 0;
	__u8 op = apis[site].ctx_op;
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct gs_ml_proc *p = get_proc(pid);
	if (!p)
		return 0;
	/* A driver call made by a runtime context call: the runtime call says what ends. */
	bool nested = layer == GS_LAYER_DRIVER && st->cx[GS_LAYER_RUNTIME].depth > 0;
	__u64 out = 0, id;
	__s32 dev;

	switch (op) {
	case GS_CTX_CREATE:
		bpf_probe_read_user(&out, sizeof(out), (void *)c->outp);
		ctx_remember(pid, p->gen_ns, out, c->dev, 0);
		ctx_push(st, out, c->dev);
		break;
	case GS_CTX_DESTROY: {
		ctx_lookup(pid, p->gen_ns, c->ctx, &id, &dev);
		if (!GS_ML_IS_PRIMARY_CTX(id))
			release_ctx(p, pid, id, dev, site, layer);
		struct gs_ml_ctx_key k = {.pid = pid, .ctx = c->ctx};
		bpf_map_delete_elem(&ml_ctxs, &k);
		if (st->cur_ctx == id)
			ctx_pop(st);
		break;
	}
	case GS_CTX_PRIMARY_RETAIN: {
		bpf_probe_read_user(&out, sizeof(out), (void *)c->outp);
		ctx_remember(pid, p->gen_ns, out, c->dev, 1);
		/* CUDA 13's runtime makes the primary context current (cuCtxSetCurrent) before it
		 * retains it, so the thread's context is known as primary only now. */
		if (out && st->cur_ctx == out) {
			st->cur_ctx = GS_ML_PRIMARY_CTX(c->dev);
			st->cur_dev = c->dev;
		}
		struct gs_ml_ctx_key k = {.pid = pid, .ctx = GS_ML_PRIMARY_CTX(c->dev)};
		struct gs_ml_ctx *v = bpf_map_lookup_elem(&ml_ctxs, &k);
		if (v && v->gen_ns == p->gen_ns) {
			v->retains++;
		} else {
			struct gs_ml_ctx nv = {.gen_ns = p->gen_ns, .device = c->dev, .retains = 1};
			if (bpf_map_update_elem(&ml_ctxs, &k, &nv, BPF_ANY) != 0)
				count_drop(GS_ML_DROP_CTXS_FULL);
		}
		break;
	}
	case GS_CTX_PRIMARY_RELEASE: {
		/* Only retains seen here count: one made out of sight keeps the context alive. */
		struct gs_ml_ctx_key k = {.pid = pid, .ctx = GS_ML_PRIMARY_CTX(c->dev)};
		struct gs_ml_ctx *v = bpf_map_lookup_elem(&ml_ctxs, &k);
		if (v && v->gen_ns == p->gen_ns && v->retains > 0 && --v->retains == 0 && !nested)
			release_ctx(p, pid, GS_ML_PRIMARY_CTX(c->dev), c->dev, site, layer);
		break;
	}
	case GS_CTX_PRIMARY_RESET:
		if (!nested)
			release_ctx(p, pid, GS_ML_PRIMARY_CTX(c->dev), c->dev, site, layer);
		break;
	case GS_CTX_SET_CURRENT:
		ctx_lookup(pid, p->gen_ns, c->ctx, &id, &dev);
		st->cur_ctx = id;
		st->cur_dev = dev;
		break;
	case GS_CTX_PUSH:
		ctx_lookup(pid, p->gen_ns, c->ctx, &id, &dev);
		ctx_push(st, id, dev);
		break;
	case GS_CTX_POP:
		ctx_pop(st);
		break;
	case GS_CTX_RT_SET_DEVICE:
		st->cur_ctx = GS_ML_PRIMARY_CTX(c->dev);
		st->cur_dev = c->dev;
		break;
	case GS_CTX_RT_DEVICE_RESET:
		/* With a non-primary context current, cudaDeviceReset frees no memory (its docs). */
		if (GS_ML_IS_PRIMARY_CTX(c->ctx))
			release_ctx(p, pid, c->ctx, c->dev, site, layer);
		break;
	}
	return 0;
}

SEC("uprobe")
int ml_enter(struct pt_regs *ctx)
{
	__u64 site = bpf_get_attach_cookie(ctx);
	if (site >= GS_API_COUNT || !in_scope())
		return 0;
	struct thread_state *st = gs_thread_state_new(&ml_threads);
	if (!st) {
		count_drop(GS_ML_DROP_NO_STATE);
		return 0;
	}
	const struct gs_api_desc *d = &apis[site];
	if (d->roles & GS_ROLE_CONTEXT) {
		struct ctx_call *c = &st->cx[d->layer & 1];
		if (!GS_CALL_ENTER(c->depth))
			return 0;
		struct gs_args regs;
		gs_args_load(ctx, &regs);
		c->site = site;
		c->ctx = d->ctx ? gs_arg_at(&regs, d->ctx - 1) : 0;
		c->outp = d->outp ? gs_arg_at(&regs, d->outp - 1) : 0;
		c->dev = d->device ? (__s32)gs_arg_at(&regs, d->device - 1) : -1;
		if (d->ctx_op == GS_CTX_RT_DEVICE_RESET) {
			/* The device it resets is the one current now: the runtime's own calls may
			 * unbind the context before it returns. */
			runtime_binds(st);
			c->ctx = st->cur_ctx;
			c->dev = st->cur_ctx ? st->cur_dev : -1;
		}
		return 0;
	}
	if (!GS_CALL_ENTER(st->depth))
		return 0;
	st->site = site;
	st->arg[0] = PT_REGS_PARM1(ctx);
	st->arg[1] = PT_REGS_PARM2(ctx);
	st->arg[2] = PT_REGS_PARM3(ctx);
	st->arg[3] = PT_REGS_PARM4(ctx);
	return 0;
}

SEC("uretprobe")
int ml_exit(struct pt_regs *ctx)
{
	__u64 row = bpf_get_attach_cookie(ctx);
	if (row >= GS_API_COUNT)
		return 0;
	/* Read the row before the helper call: afterwards the verifier no longer knows the
	 * compiler's copy of `row` is bounded. */
	bool ctx_row = apis[row].roles & GS_ROLE_CONTEXT;
	__u32 row_layer = apis[row].layer & 1;
	struct thread_state *st = gs_thread_state(&ml_threads);
	if (!st)
		return 0;
	if (ctx_row)
		return ctx_exit(ctx, st, row_layer);
	if (!GS_CALL_LEAVE(st->depth))
		return 0;
	__u32 site = st->site;
	if (site >= GS_API_COUNT)
		return 0;
	const struct gs_api_desc *d = &apis[site];
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	struct gs_ml_proc *p = get_proc(pid);
	if (!p)
		return 0;
	if (d->layer == GS_LAYER_RUNTIME && ret == 0)
		runtime_binds(st);

	switch (d->mem_op) {
	case GS_MEM_ALLOC:
	case GS_MEM_ALLOC_PITCH:
	case GS_MEM_VMM_CREATE: {
		if (ret != 0) {
			__sync_fetch_and_add(&p->allocs_failed, 1);
			count_error(p, pid, GS_ML_OP_ALLOC, d->layer, ret);
			return 0;
		}
		__sync_fetch_and_add(&p->allocs_ok, 1);
		/* Stream-ordered memory comes from a pool, which outlives contexts (cudaDeviceReset's docs). */
		bool pooled = site == GS_API_CUDA_MALLOC_ASYNC ||
		              site == GS_API_CUDA_MALLOC_FROM_POOL_ASYNC ||
		              site == GS_API_CU_MEM_ALLOC_ASYNC ||
		              site == GS_API_CU_MEM_ALLOC_FROM_POOL_ASYNC;
		struct gs_ml_alloc a = {
		        .ts_boot_ns = bpf_ktime_get_boot_ns(),
		        .site = site,
		        .category = d->mem_cat,
		        .layer = d->layer,
		        .device = st->cur_ctx ? st->cur_dev : -1,
		        .ctx = pooled || d->mem_op == GS_MEM_VMM_CREATE ? 0 : st->cur_ctx};
		struct gs_ml_key k = {.pid = pid, .space = GS_ML_SPACE_ADDR, .gen_ns = p->gen_ns};
		bpf_probe_read_user(&k.addr, sizeof(k.addr), (void *)st->arg[0]);
		a.size_bytes = st->arg[1];
		if (d->mem_op == GS_MEM_ALLOC_PITCH) {
			__u64 pitch = 0;
			bpf_probe_read_user(&pitch, sizeof(pitch), (void *)st->arg[1]);
			a.size_bytes = pitch * st->arg[3];
		} else if (d->mem_op == GS_MEM_VMM_CREATE) {
			__s32 loc[2] = {};
			k.space = GS_ML_SPACE_HANDLE;
			a.device = -1;
			if (bpf_probe_read_user(
			            loc, sizeof(loc),
			            (void *)(st->arg[2] + GS_ML_PROP_LOCATION_TYPE_OFF)) == 0 &&
			    loc[0] == GS_ML_LOCATION_DEVICE)
				a.device = loc[1];
		}
		record(ctx, p, &k, &a);
		return 0;
	}
	case GS_MEM_FREE:
		if (st->arg[0] == 0 && ret == 0)
			return 0; /* freeing NULL is a no-op (and cudaFree(0) the usual way to make a context) */
		on_free(p, pid, site, d->layer, GS_ML_SPACE_ADDR, st->arg[0], ret);
		return 0;
	case GS_MEM_VMM_RELEASE:
		on_free(p, pid, site, d->layer, GS_ML_SPACE_HANDLE, st->arg[0], ret);
		return 0;
	case GS_MEM_VMM_MAP: {
		if (ret != 0)
			return 0;
		/* cuMemMap(ptr, size, offset, handle, flags) */
		struct gs_ml_key mk = {.pid = pid,
		                       .space = GS_ML_SPACE_MAPPING,
		                       .addr = st->arg[0],
		                       .gen_ns = p->gen_ns};
		struct gs_ml_alloc m = {.size_bytes = st->arg[1],
		                        .ts_boot_ns = bpf_ktime_get_boot_ns(),
		                        .handle = st->arg[3],
		                        .site = site,
		                        .category = GS_MEM_VMM,
		                        .layer = d->layer,
		                        .device = -1};
		if (bpf_map_update_elem(&ml_allocs, &mk, &m, BPF_ANY) != 0) {
			count_drop(GS_ML_DROP_ALLOCS_FULL);
			return 0;
		}
		struct gs_ml_key hk = {.pid = pid,
		                       .space = GS_ML_SPACE_HANDLE,
		                       .addr = st->arg[3],
		                       .gen_ns = p->gen_ns};
		struct gs_ml_alloc *h = bpf_map_lookup_elem(&ml_allocs, &hk);
		if (h)
			__sync_fetch_and_add(&h->vmm_mappings, 1);
		return 0;
	}
	case GS_MEM_VMM_UNMAP:
		if (ret == 0)
			on_unmap(p, pid, st->arg[0], st->arg[1]);
		return 0;
	}
	return 0;
}

/* Hands the process's counters to userspace and drops its entry; the allocations stay
 * for userspace to list and delete. If the ring buffer is full the entry stays, and
 * userspace's sweep finds the process gone. */
static __always_inline int report_proc(struct task_struct *task, __u32 pid, __u32 type)
{
	struct gs_ml_proc *p = bpf_map_lookup_elem(&ml_procs, &pid);
	if (!p)
		return 0;
	struct gs_ml_event *e = bpf_ringbuf_reserve(&ml_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_ML_DROP_EVENTS);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->pid = pid;
	e->ts_boot_ns = bpf_ktime_get_boot_ns();
	__builtin_memcpy(&e->counters, p, sizeof(e->counters));
	BPF_CORE_READ_STR_INTO(&e->comm, task, group_leader, comm);
	if (bpf_map_delete_elem(&ml_procs, &pid) != 0) {
		bpf_ringbuf_discard(e, 0); /* the other exiting thread reports it */
		return 0;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* A process exits when its last thread does (signal->live has dropped to zero by now). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(ml_proc_exit, struct task_struct *task)
{
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	__u32 pid = BPF_CORE_READ(task, tgid);
	return report_proc(task, pid, GS_ML_EV_EXIT);
}

/* An exec drops the old image's contexts and memory: its state ends here. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(ml_proc_exec, struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, tgid);
	return report_proc(task, pid, GS_ML_EV_EXEC);
}

// SPDX-License-Identifier: GPL-2.0
/* gpuscope kernels: launch counts per (process, layer, handle), kept here so that no event
 * crosses to userspace per launch. Events are sent only when a handle gets a name and when
 * a process that launched something exits. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/scope_filter.bpf.h"
#include "common/arch.bpf.h"
#include "common/capture.bpf.h"
#include "common/launch.bpf.h"
#include "kernels/kernels.h"
#include "common/call_pair.bpf.h"
#include "common/maps.bpf.h"
#include "python/pyframes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct namer_slot {
	__u64 outp, src, caller, name_ptr;
	__u32 active, pad;
};

/* Per thread (common/call_pair.bpf.h): the runtime launch in progress (its nested driver launch
 * is not counted again) and the naming calls in progress, one slot per kind since they can nest. */
struct thread_state {
	__u32 rt_depth, teach;
	__u64 rt_handle;
	struct namer_slot slot[4];
	char name[2][GS_K_NAME_LEN];
};

GS_THREAD_STORAGE(threads, struct thread_state);

GS_HASH(counts, GS_K_MAX_ROWS, struct gs_k_key, struct gs_k_val);

GS_LRU_HASH(aliases, 16384, struct gs_k_alias_key, __u64);

/* Naming calls announced, with the handle each returned; one evicted is only announced again. */
GS_LRU_HASH(announced, 4096, struct gs_k_named_key, __u64);

/* Processes with rows: only their exits are reported. */
GS_HASH(launched, 8192, __u32, __u8);

/* Streams under capture, taken at the begin call's entry: launches read their stream only
 * while one is (gs_capture_any). */
GS_CAPTURE_STATE()

GS_RINGBUF(events, 1 << 18);

GS_DROP_COUNTERS(drops, GS_K_DROP_COUNT)

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

#include "latency/latency_time.bpf.h"

/* Set by a latency collector that hands its launch rows to these programs (the agent): the rows
 * timed, and one launch timed in lat_sample (0: none). Writable, so that it can come after load. */
__u32 lat_sample = 0;
__u8 lat_rows[GS_API_COUNT];

/* Counting at the driver layer alone: no runtime probes are attached, so a driver launch
 * never asks whether it is nested in one. */
const volatile bool driver_only = false;

/* Each row keeps the time of its latest launch (errors: the kernels since a process's last
 * successful synchronization). Off, the verifier drops the stores. */
const volatile bool track_last_launch = false;

/* --stacks: every stack_every-th launch of a process, and the first launch of each row, takes its
 * user stack (and its CPython frames with py_walk). Off, the verifier drops all of it. */
const volatile bool stacks_on = false;
const volatile bool py_walk = false;
const volatile __u32 stack_every = 64;

/* Per process: launches counted since its first one, the sampling stride's clock. */
GS_HASH(stack_ticks, 8192, __u32, __u64);

GS_STACK_TRACE(stacks, GS_K_MAX_STACKS, GS_K_STACK_DEPTH);

GS_HASH(samples, GS_K_MAX_SAMPLES, struct gs_k_sample_key, __u64);

/* A counted launch of row k; `first`: the row was created by it, so a kernel launched once is
 * still seen at its site. BPF cannot tell a stack new without taking it, so that is the rule: the
 * stride's launches and each row's first. */
static __always_inline void sample_launch(struct pt_regs *ctx, struct task_struct *task,
                                          const struct gs_k_key *k, bool first)
{
	__u64 zero = 0, one = 1, n = 0, *c;
	__u64 *tick = bpf_map_lookup_elem(&stack_ticks, &k->pid);

	if (!tick) {
		bpf_map_update_elem(&stack_ticks, &k->pid, &zero, BPF_NOEXIST);
		tick = bpf_map_lookup_elem(&stack_ticks, &k->pid);
	}
	if (tick)
		n = __sync_fetch_and_add(tick, 1);
	if (!first && (!tick || (stack_every > 1 && n % stack_every)))
		return;
	struct gs_k_sample_key sk = {.pid = k->pid,
	                             .layer = k->layer,
	                             .handle = k->handle,
	                             .caller = gs_return_address(ctx)};
	long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (id < 0)
		count_drop(GS_K_DROP_STACKS);
	sk.stack_id = id < 0 ? -1 : (__s32)id;
	if (py_walk)
		sk.py_hash = gs_py_capture(task);
	c = bpf_map_lookup_elem(&samples, &sk);
	if (c) {
		__sync_fetch_and_add(c, 1);
	} else if (bpf_map_update_elem(&samples, &sk, &one, BPF_NOEXIST)) {
		c = bpf_map_lookup_elem(&samples, &sk);
		if (c)
			__sync_fetch_and_add(c, 1);
		else
			count_drop(GS_K_DROP_SAMPLES_FULL);
	}
}

/* The namer kind of the row a naming probe is attached at (its cookie). */
static __always_inline __u32 namer_of(struct pt_regs *ctx)
{
	__u64 row = bpf_get_attach_cookie(ctx);
	return row < GS_API_COUNT ? apis[row].namer & 3 : 0;
}

/* The launch kind (common/launch.bpf.h) of a launch program's site. */
static __always_inline __u8 site_kind(const enum gs_k_site site)
{
	switch (site) {
	case GS_K_CUDA_LAUNCH:
		return GS_SP_RT_LAUNCH;
	case GS_K_CUDA_LAUNCH_EX:
		return GS_SP_RT_LAUNCH_EX;
	case GS_K_CU_LAUNCH:
		return GS_SP_CU_LAUNCH;
	case GS_K_CU_LAUNCH_EX:
		return GS_SP_CU_LAUNCH_EX;
	case GS_K_CUDA_HOST_FUNC:
	case GS_K_CU_HOST_FUNC:
		return GS_SP_HOST_FUNC;
	default:
		return GS_LAUNCH_GRAPH;
	}
}

/* One program per launch site kind, so that the site is a constant here rather than a
 * cookie read and branches on every launch. `scoped`: in_scope() where the caller has asked it
 * already, else -1. */
static __always_inline int launch_scoped(struct pt_regs *ctx, const enum gs_k_site site, int scoped)
{
	const bool runtime = site <= GS_K_CUDA_HOST_FUNC;
	__u64 handle = gs_launch_handle(ctx, site_kind(site));
	struct task_struct *task =
	        bpf_get_current_task_btf(); /* inlined; its tgid is a plain load */
	struct thread_state *st;

	if (runtime) {
		if (!(scoped < 0 ? in_scope() : scoped))
			return 0;
		st = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!st) {
			count_drop(GS_K_DROP_NO_STATE);
			return 0;
		}
		if (!GS_CALL_ENTER(st->rt_depth))
			return 0;
		st->rt_handle = handle;
		st->teach = 0;
	} else {
		/* A driver launch inside a runtime one is the same launch: this check comes first.
		 * A thread with no task storage at all (driver-only code such as XLA's) skips
		 * the helper call. */
		st = !driver_only && task->bpf_storage ? bpf_task_storage_get(&threads, task, 0, 0)
		                                       : NULL;
		if (st && st->rt_depth) {
			/* Already counted at the runtime layer; keep what it teaches about names. */
			if (st->teach && (site == GS_K_CU_LAUNCH || site == GS_K_CU_LAUNCH_EX) &&
			    st->rt_handle != handle) {
				struct gs_k_alias_key ak = {.pid = task->tgid, .drv = handle};
				bpf_map_update_elem(&aliases, &ak, &st->rt_handle, BPF_ANY);
			}
			st->teach = 0;
			return 0;
		}
		if (!(scoped < 0 ? in_scope() : scoped))
			return 0;
	}
	__u32 pid = task->tgid;

	if (gs_capture_any() && gs_capture_lookup(pid, gs_launch_stream(ctx, site_kind(site)))) {
		count_drop(GS_K_DROP_CAPTURED);
		return 0;
	}

	struct gs_k_key k = {.pid = pid, .handle = handle};
	if (site == GS_K_CUDA_GRAPH || site == GS_K_CU_GRAPH)
		k.layer = GS_K_GRAPH;
	else if (site == GS_K_CUDA_HOST_FUNC || site == GS_K_CU_HOST_FUNC)
		k.layer = GS_K_HOST;
	else
		k.layer = runtime ? GS_K_RUNTIME : GS_K_DRIVER;
	struct gs_k_val *v = bpf_map_lookup_elem(&counts, &k);
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		if (track_last_launch)
			v->last_launch_ns = bpf_ktime_get_ns();
		if (stacks_on)
			sample_launch(ctx, task, &k, false);
		return 0;
	}
	struct gs_k_val nv = {.count = 1,
	                      .caller = gs_return_address(ctx),
	                      .cgroup_id = bpf_get_current_cgroup_id()};
	if (track_last_launch)
		nv.last_launch_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&counts, &k, &nv, BPF_NOEXIST)) {
		v = bpf_map_lookup_elem(&counts, &k); /* lost a race to create it */
		if (v) {
			__sync_fetch_and_add(&v->count, 1);
			if (track_last_launch)
				v->last_launch_ns = nv.last_launch_ns;
			if (stacks_on)
				sample_launch(ctx, task, &k, false);
		} else {
			count_drop(GS_K_DROP_ROWS_FULL);
		}
		return 0;
	}
	if (stacks_on)
		sample_launch(ctx, task, &k, true);
	__u8 one = 1;
	bpf_map_update_elem(&launched, &pid, &one, BPF_ANY);
	/* A handle's first launch teaches its driver alias; later ones skip the map update. */
	if (runtime)
		st->teach = 1;
	return 0;
}

static __always_inline int launch(struct pt_regs *ctx, const enum gs_k_site site)
{
	return launch_scoped(ctx, site, -1);
}

#define GS_K_LAUNCH_PROG(prog, site)                                                               \
	SEC("uprobe")                                                                              \
	int prog(struct pt_regs *ctx)                                                              \
	{                                                                                          \
		return launch(ctx, site);                                                          \
	}
GS_K_LAUNCH_PROG(gs_k_cuda_launch, GS_K_CUDA_LAUNCH)
GS_K_LAUNCH_PROG(gs_k_cuda_launch_ex, GS_K_CUDA_LAUNCH_EX)
GS_K_LAUNCH_PROG(gs_k_cuda_graph, GS_K_CUDA_GRAPH)
GS_K_LAUNCH_PROG(gs_k_cu_launch, GS_K_CU_LAUNCH)
GS_K_LAUNCH_PROG(gs_k_cu_launch_ex, GS_K_CU_LAUNCH_EX)
GS_K_LAUNCH_PROG(gs_k_cu_graph, GS_K_CU_GRAPH)
GS_K_LAUNCH_PROG(gs_k_cuda_host_func, GS_K_CUDA_HOST_FUNC)
GS_K_LAUNCH_PROG(gs_k_cu_host_func, GS_K_CU_HOST_FUNC)

/* The driver's launch programs that also time the launch for latency, as uprobe sessions
 * (kernel 6.12+): one trap and one program per launch serve both collectors, and only a timed
 * launch takes the return probe. */
#define GS_K_TIMED_LAUNCH_PROG(prog, site)                                                         \
	SEC("uprobe")                                                                              \
	int prog(struct pt_regs *ctx)                                                              \
	{                                                                                          \
		if (bpf_session_is_return()) {                                                     \
			lat_leave(ctx);                                                            \
			return 0;                                                                  \
		}                                                                                  \
		bool scoped = in_scope(); /* asked once for both collectors */                     \
		launch_scoped(ctx, site, scoped);                                                  \
		__u32 row = (__u32)bpf_get_attach_cookie(ctx);                                     \
		__u32 sample = lat_sample;                                                         \
		if (!sample || row >= GS_API_COUNT || !lat_rows[row])                              \
			return 1;                                                                  \
		return lat_enter_scoped(row, true, sample, scoped);                                \
	}
GS_K_TIMED_LAUNCH_PROG(gs_k_cu_launch_timed, GS_K_CU_LAUNCH)
GS_K_TIMED_LAUNCH_PROG(gs_k_cu_launch_ex_timed, GS_K_CU_LAUNCH_EX)
GS_K_TIMED_LAUNCH_PROG(gs_k_cu_graph_timed, GS_K_CU_GRAPH)
GS_K_TIMED_LAUNCH_PROG(gs_k_cu_host_func_timed, GS_K_CU_HOST_FUNC)

SEC("uretprobe")
int gs_k_launch_exit(struct pt_regs *ctx)
{
	struct thread_state *st = gs_thread_state(&threads);
	if (st)
		GS_CALL_LEAVE(st->rt_depth);
	return 0;
}

/* The row says begin or end; the stream is the first argument on both layers. */
SEC("uprobe")
int gs_k_capture(struct pt_regs *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u64 stream = PT_REGS_PARM1(ctx);
	__u64 row = bpf_get_attach_cookie(ctx);
	if (row >= GS_API_COUNT)
		return 0;
	if (apis[row].special == GS_SP_CAPTURE_BEGIN)
		gs_capture_begin(pid, stream);
	else
		gs_capture_end(pid, stream);
	return 0;
}

static __always_inline __u64 address_space(void)
{
	return (__u64)bpf_get_current_task_btf()->mm;
}

/* The entry half of a naming call. Returns 1 when its return need not run: with a session, a
 * call whose (source, name) was announced already names nothing new (a handle that changed
 * anyway is named by its first launch, as one named before gpuscope started is). */
static __always_inline int name_enter(struct pt_regs *ctx, bool session)
{
	__u32 namer = namer_of(ctx);
	if (!in_scope())
		return 1;
	__u64 src = PT_REGS_PARM2(ctx);
	__u64 p1 = PT_REGS_PARM1(ctx), p3 = PT_REGS_PARM3(ctx);
	/* Both read at fixed offsets: the verifier refuses a context load the compiler would merge
	 * into one at a variable offset. */
	asm volatile("" : "+r"(p1), "+r"(p3));
	/* cuKernelGetFunction takes two arguments: a third register would make every call new. */
	__u64 name_ptr = namer == GS_NAMER_GET_KERNEL            ? p1
	                 : namer == GS_NAMER_KERNEL_GET_FUNCTION ? 0
	                                                         : p3;
	if (session) {
		struct gs_k_named_key nk = {.pid = bpf_get_current_pid_tgid() >> 32,
		                            .namer = namer,
		                            .src = src,
		                            .name_ptr = name_ptr,
		                            .mm = address_space()};
		if (bpf_map_lookup_elem(&announced, &nk))
			return 1;
	}
	struct thread_state *st = gs_thread_state_new(&threads);
	if (!st) {
		count_drop(GS_K_DROP_NO_STATE);
		return 1;
	}
	struct namer_slot *s = &st->slot[namer];
	s->outp = p1;
	s->src = src;
	s->caller = gs_return_address(ctx);
	s->name_ptr = name_ptr;
	s->active = 1;
	if (namer <= GS_NAMER_LIBRARY_GET_KERNEL)
		bpf_probe_read_user_str(st->name[namer & 1], GS_K_NAME_LEN, (void *)p3);
	return 0;
}

static __always_inline void name_exit(struct pt_regs *ctx)
{
	__u32 namer = namer_of(ctx);
	struct thread_state *st = gs_thread_state(&threads);
	if (!st)
		return;
	struct namer_slot *s = &st->slot[namer];
	if (!s->active)
		return;
	s->active = 0;
	if (PT_REGS_RC(ctx) != 0)
		return;
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u64 handle = 0;
	bpf_probe_read_user(&handle, sizeof(handle), (void *)s->outp);
	struct gs_k_named_key nk = {.pid = pid,
	                            .namer = namer,
	                            .src = s->src,
	                            .name_ptr = s->name_ptr,
	                            .mm = address_space()};
	__u64 *was = bpf_map_lookup_elem(&announced, &nk);
	if (was && *was == handle)
		return;
	struct gs_k_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_K_DROP_EVENTS);
		return;
	}
	bpf_map_update_elem(&announced, &nk, &handle, BPF_ANY);
	e->type = GS_K_EV_NAME;
	e->pid = pid;
	/* Its names are forgotten when it exits. */
	__u8 one = 1;
	bpf_map_update_elem(&launched, &pid, &one, BPF_ANY);
	e->namer = namer;
	e->pad = 0;
	e->handle = handle;
	e->src = s->src;
	e->caller = s->caller;
	e->name_ptr = s->name_ptr;
	e->name[0] = 0;
	if (namer <= GS_NAMER_LIBRARY_GET_KERNEL)
		bpf_probe_read_kernel_str(e->name, GS_K_NAME_LEN, st->name[namer & 1]);
	bpf_ringbuf_submit(e, 0);
}

SEC("uprobe")
int gs_k_name_enter(struct pt_regs *ctx)
{
	name_enter(ctx, false);
	return 0;
}

SEC("uretprobe")
int gs_k_name_exit(struct pt_regs *ctx)
{
	name_exit(ctx);
	return 0;
}

/* Kernel 6.12+ (BPF_TRACE_UPROBE_SESSION): a naming call announced already takes no return
 * probe (PyTorch makes two naming calls a step). */
SEC("uprobe")
int gs_k_name_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return()) {
		name_exit(ctx);
		return 0;
	}
	return name_enter(ctx, true);
}

/* A process exits when its last thread does (signal->live has dropped to zero by now). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_k_proc_exit, struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, tgid);
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (bpf_map_delete_elem(&launched, &pid) != 0)
		return 0;
	struct gs_k_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_K_DROP_EVENTS);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = GS_K_EV_EXIT;
	e->pid = pid;
	BPF_CORE_READ_STR_INTO(&e->name, p, group_leader,
	                       comm); /* /proc has no name for it by now */
	bpf_ringbuf_submit(e, 0);
	return 0;
}

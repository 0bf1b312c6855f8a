// SPDX-License-Identifier: GPL-2.0
/* gpuscope starvation: on-CPU time of threads whose process holds GPU memory while every one of
 * its GPUs has been idle for at least min_idle_ns. GPU state comes from the bridge's pinned maps
 * (../shared/bridge-contract.md), handed to this object with bpf_map__reuse_fd before load.
 * Two hooks: tp_btf sched_switch closes and opens on-CPU slices; a cpu-clock perf event closes
 * the running slice of a thread that never leaves its CPU and keeps the stack it was sampled in. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "bridge/bridge_pins.bpf.h" /* its maps, replaced by the pinned ones before load */
#include "common/maps.bpf.h"
#include "starvation/starvation.h"
#include "python/pyframes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 min_gpu_mem_bytes = 1;
const volatile __u64 min_idle_ns = 1000000000ull;
const volatile __u64 stale_ns = 300000000ull;
const volatile bool switch_ustack = false; /* stack at a starving switch-out */
const volatile bool switch_kstack = false;
const volatile bool sample_ustack = false; /* stacks of starving cpu-clock samples */
const volatile bool sample_kstack = false;
const volatile bool py_walk = false; /* CPython frames of sampled stacks */

/* The device "last active" latch: boot time of the newest busy sample seen per device. It only
 * moves forward; userspace starts it at load time, so idleness is counted from then at most. */
__u64 last_active_ns[GPU_MAX_DEVICES];
/* The bridge tick last folded into the latch. */
__u64 seen_update_ns;
/* Written by userspace: which tgids the bridge lists (a prefilter; gpu_per_pid decides). */
__u64 gpu_tgid_bits[GS_S_TGID_WORDS];
/* Written by userspace: 1 while the sched_switch hook is attached (always, or while a GPU of a
 * listed process nears min_idle_ns idle). While 0 the samplers only fold ticks into the latch:
 * with no switch hook to end a slice, one a sampler opened could span time off the CPU. */
__u32 slices_on = 1;

/* Our own state. */
GS_PERCPU_VALUE(cpu_state, struct gs_s_cpu);

GS_HASH(threads, GS_S_MAX_THREADS, __u32, struct gs_s_thread);

GS_HASH(samples, GS_S_MAX_SAMPLE_KEYS, struct gs_s_sample_key, __u64);

GS_STACK_TRACE(stacks, GS_S_MAX_STACKS, GS_S_STACK_DEPTH);

GS_PERCPU_COUNTERS(counters, GS_S_CNT_COUNT, count)

/* Folds the bridge's newest tick into the latch, once per tick. Two CPUs may both see a new tick
 * and fold it; they write the same values. */
static __always_inline void fold_tick(struct gpu_meta *m, __u64 update_ns)
{
	__u32 n = m->n_devices;
	__s64 offset = m->clock_offset_ns;

	/* After a gap in the bridge's data what the GPUs did is unknown: idleness counts again
	 * from the tick that ends the gap. */
	bool gap = seen_update_ns && update_ns - seen_update_ns > stale_ns;

	count(GS_S_CNT_LATCH_TICKS);
	for (__u32 d = 0; d < GPU_MAX_DEVICES; d++) {
		struct gpu_device_metrics *dm;
		__u64 t;
		if (d >= n)
			break;
		if (gap && update_ns > last_active_ns[d])
			last_active_ns[d] = update_ns;
		dm = bpf_map_lookup_elem(&gpu_device, &d);
		if (!dm || !dm->sm_util_pct || !dm->timestamp_ns)
			continue;
		t = dm->timestamp_ns - (__u64)offset; /* CLOCK_REALTIME -> CLOCK_BOOTTIME */
		if (t > last_active_ns[d])
			last_active_ns[d] = t;
	}
	/* Last, so that no CPU takes the tick as folded (and caches a verdict) before the latch is. */
	seen_update_ns = update_ns;
}

/* The bridge's meta, its newest tick folded into the latch. No clock read: most switches are
 * of threads no GPU process owns, and reading the clock costs more than the rest together. */
static __always_inline struct gpu_meta *meta(void)
{
	__u32 zero = 0;
	struct gpu_meta *m = bpf_map_lookup_elem(&gpu_meta, &zero);
	__u64 upd;
	if (!m)
		return NULL;
	upd = m->last_update_boottime_ns;
	if (upd != seen_update_ns)
		fold_tick(m, upd);
	return m;
}

/* Bridge data older than stale_ns gives no verdict. */
static __always_inline bool fresh(struct gpu_meta *m, __u64 now)
{
	__u64 upd = m->last_update_boottime_ns;
	return upd && (__s64)(now - upd) <= (__s64)stale_ns;
}

static __always_inline bool listed(__u32 tgid)
{
	return gpu_tgid_bits[(tgid / 64) % GS_S_TGID_WORDS] & (1ull << (tgid % 64));
}

/* Whether process tgid holds at least min_gpu_mem_bytes on some device, and the newest
 * last-active time over those devices. The per-CPU cache c answers for the rest of a tick. */
static __always_inline bool gpu_of(struct gs_s_cpu *c, struct gpu_meta *m, __u32 tgid,
                                   __u64 *newest)
{
	__u32 n_devices = m->n_devices;
	__u64 tick = m->last_update_boottime_ns;
	struct gpu_pid_metrics_aggregated *pp;
	bool any = false;

	if (c->tgid == tgid && c->seen_update_ns == tick) {
		*newest = c->newest_active_ns;
		return c->holds_gpu;
	}
	*newest = 0;
	if (!listed(tgid))
		goto out;
	pp = bpf_map_lookup_elem(&gpu_per_pid, &tgid);
	if (!pp || pp->used_gpu_memory_total < min_gpu_mem_bytes)
		goto out;
	if (pp->gpu_device_primary != GPU_DEVICE_SEVERAL) {
		__u32 d = pp->gpu_device_primary;
		if (d < GPU_MAX_DEVICES) {
			*newest = last_active_ns[d];
			any = true;
		}
		goto out;
	}
	/* On several devices: starved only when all of them are idle. */
	for (__u32 d = 0; d < GPU_MAX_DEVICES; d++) {
		__u64 key = ((__u64)tgid << 32) | d;
		struct gpu_pid_metrics *pd;
		if (d >= n_devices)
			break;
		pd = bpf_map_lookup_elem(&gpu_per_pid_per_device, &key);
		if (!pd || pd->used_gpu_memory < min_gpu_mem_bytes)
			continue;
		any = true;
		if (last_active_ns[d] > *newest)
			*newest = last_active_ns[d];
	}
out:
	c->tgid = tgid;
	c->seen_update_ns = tick;
	c->newest_active_ns = *newest;
	c->holds_gpu = any;
	return any;
}

static __always_inline struct gs_s_thread *thread_of(struct task_struct *t, __u32 tgid, __u32 tid)
{
	struct gs_s_thread *st = bpf_map_lookup_elem(&threads, &tid);
	struct gs_s_thread fresh = {};

	if (st && st->pid == tgid)
		return st;
	/* New, or a reused tid: counters restart, and userspace sees the pid change. */
	fresh.pid = tgid;
	fresh.tid = tid;
	fresh.switch_ustack_id = -1;
	fresh.switch_kstack_id = -1;
	bpf_probe_read_kernel_str(fresh.thread, sizeof fresh.thread, t->comm);
	BPF_CORE_READ_STR_INTO(&fresh.comm, t, group_leader, comm);
	if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) {
		count(GS_S_CNT_NO_THREAD);
		return NULL;
	}
	return bpf_map_lookup_elem(&threads, &tid);
}

static __always_inline __s32 stack_id(void *ctx, __u64 flags)
{
	long id = bpf_get_stackid(ctx, &stacks, flags);
	/* -EFAULT is an empty stack (a sample in user mode has no kernel part), not a loss. */
	if (id < 0 && id != -14)
		count(GS_S_CNT_STACK_ERR);
	return id < 0 ? -1 : (__s32)id;
}

/* Adds the starving part of the slice [start, now] of task t: the part after every device its
 * process holds memory on had been idle min_idle_ns. Returns its row, or NULL. */
static __always_inline struct gs_s_thread *account(struct gs_s_cpu *c, struct task_struct *t,
                                                   struct gpu_meta *m, __u64 start, __u64 now)
{
	__u32 tgid = t->tgid, tid = t->pid;
	__u64 newest, since, from;
	struct gs_s_thread *st;

	if (!gpu_of(c, m, tgid, &newest))
		return NULL;
	since = newest + min_idle_ns;
	from = start > since ? start : since;
	if (now <= from)
		return NULL;
	st = thread_of(t, tgid, tid);
	if (!st)
		return NULL;
	st->cpu_time_ns += now - from;
	st->hit_count++;
	st->idle_ns = now > newest ? now - newest : 0;
	st->last_hit_ns = now;
	return st;
}

/* prev is still current here, so a user stack read now is prev's. */
SEC("tp_btf/sched_switch")
int BPF_PROG(gs_s_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct gpu_meta *m = meta();
	struct gs_s_cpu *c = gs_percpu(&cpu_state);
	__u32 tgid;
	__u64 now = 0, newest;

	if (!m || !c)
		return 0;
	if (c->tid) {
		if (c->tid == prev->pid) {
			now = bpf_ktime_get_boot_ns();
			if (fresh(m, now)) {
				struct gs_s_thread *st = account(c, prev, m, c->start_ns, now);
				if (st && switch_ustack)
					st->switch_ustack_id = stack_id(ctx, BPF_F_USER_STACK);
				if (st && switch_kstack)
					st->switch_kstack_id = stack_id(ctx, 0);
			}
		}
		c->tid = 0;
	}
	tgid = next->tgid;
	if (!next->pid || !gpu_of(c, m, tgid, &newest))
		return 0;
	if (!now)
		now = bpf_ktime_get_boot_ns();
	if (!fresh(m, now))
		return 0;
	c->tid = next->pid;
	c->start_ns = now;
	return 0;
}

SEC("perf_event")
int gs_s_sample(struct bpf_perf_event_data *ctx)
{
	struct gpu_meta *m = meta(); /* also on idle CPUs: the latch must see every tick */
	struct task_struct *t = bpf_get_current_task_btf();
	struct gs_s_sample_key key = {};
	__u32 tid = t->pid;
	struct gs_s_cpu *c = gs_percpu(&cpu_state);
	struct gs_s_thread *st;
	__u64 now, start, one = 1, *cnt;

	if (!m || !c || !tid)
		return 0;
	count(GS_S_CNT_SAMPLES);
	if (!slices_on)
		return 0;
	if (c->tid != tid) {
		/* Running since before we attached, and not switched since: count from now. */
		if (!gpu_of(c, m, t->tgid, &now))
			return 0;
		now = bpf_ktime_get_boot_ns();
		if (fresh(m, now))
			c->tid = tid, c->start_ns = now;
		return 0;
	}
	now = bpf_ktime_get_boot_ns();
	start = c->start_ns;
	c->start_ns = now;
	if (!fresh(m, now))
		return 0;
	st = account(c, t, m, start, now);
	if (!st)
		return 0;
	st->samples++;
	if (!sample_ustack && !sample_kstack)
		return 0;
	key.pid = st->pid;
	key.tid = st->tid;
	key.ustack_id = sample_ustack ? stack_id(ctx, BPF_F_USER_STACK) : -1;
	key.kstack_id = sample_kstack ? stack_id(ctx, 0) : -1;
	if (py_walk)
		key.py_hash = gs_py_capture(t);
	cnt = bpf_map_lookup_elem(&samples, &key);
	if (cnt) {
		__sync_fetch_and_add(cnt, 1);
	} else if (bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST)) {
		cnt = bpf_map_lookup_elem(&samples, &key);
		if (cnt)
			__sync_fetch_and_add(cnt, 1);
		else
			count(GS_S_CNT_NO_SAMPLE_KEY);
	}
	return 0;
}

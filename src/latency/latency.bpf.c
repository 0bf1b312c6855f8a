// SPDX-License-Identifier: GPL-2.0
/* gpuscope latency: per-API log2 latency histograms and return-code counts, aggregated
 * here so that no event crosses to userspace per call. Same probe sites and nesting rule
 * as trace: the attach cookie is the API row, and only a layer's outermost call counts. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/cuda_api.h"
#include "common/events.h"
#include "common/scope_filter.bpf.h"
#include "latency/latency.h"
#include "common/call_pair.bpf.h"
#include "common/log2_hist.bpf.h"
#include "common/maps.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool per_process = false;

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

struct call_state {
	__u64 start_ns;
	__u32 depth;
	__u32 api;
};

/* Per thread, one slot per layer (common/call_pair.bpf.h). */
GS_THREAD_STORAGE(calls, struct call_state[GS_LAYER_COUNT]);

/* Not preallocated: a 528-byte value per CPU per entry would cost hundreds of MB up front
 * on a large host; entries are made once per (API, process) and then only updated. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 2048);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct gs_lat_key);
	__type(value, struct gs_lat_stats);
} stats SEC(".maps");

/* Zeroed template for a new stats entry: too large for the BPF stack. */
GS_PERCPU_VALUE(zero_stats, struct gs_lat_stats);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct gs_lat_ret_key);
	__type(value, __u64);
} rets SEC(".maps");

GS_DROP_COUNTERS(drops, GS_LAT_DROP_COUNT)

static __always_inline void add(void *map, const void *key, __u64 v)
{
	__u64 *n = bpf_map_lookup_elem(map, key);
	if (n) {
		*n += v;
		return;
	}
	if (bpf_map_update_elem(map, key, &v, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(map, key); /* lost a race to create it */
		if (n)
			*n += v;
		else
			count_drop(GS_LAT_DROP_HIST_FULL);
	}
}

/* Per row: every entry the probe took, and why it was not timed. What a probe costs but
 * never reports shows here (gpuscope latency -v, the agent's gpuscope_api_probe_hits_total). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GS_API_COUNT);
	__type(key, __u32);
	__type(value, struct gs_lat_site);
} sites SEC(".maps");

/* Time one outermost call of a GS_ROLE_LAUNCH row in this many, at random (1: all). Only a session
 * spares the others their return probe, so userspace sets it above 1 only then. */
const volatile __u32 launch_sample = 1;

extern bool bpf_session_is_return(void) __ksym __weak;

static __always_inline struct gs_lat_site *site_of(__u32 api)
{
	return bpf_map_lookup_elem(&sites, &api);
}

/* The entry half. Returns 0 when the call is timed (its return must run), 1 when not: a
 * session then skips the return probe. */
static __always_inline int enter(__u32 api, bool session)
{
	if (api >= GS_API_COUNT)
		return 1;
	__u32 layer = apis[api].layer & 1;
	bool launch = apis[api].roles & GS_ROLE_LAUNCH;
	/* Read while the verifier still knows api's bound: the compiler would sink the loads. */
	asm volatile("" ::: "memory");
	struct gs_lat_site *site = site_of(api);
	if (site)
		site->entries += 1;
	if (!in_scope()) {
		if (site)
			site->filtered += 1;
		return 1;
	}
	struct call_state *st = gs_thread_state_new(&calls);
	if (!st) {
		count_drop(GS_LAT_DROP_STATE_FULL);
		return 1;
	}
	st += layer;
	if (st->depth > 0) {
		if (site)
			site->nested += 1;
		/* A session skips a nested call's return, which must then leave the depth alone. */
		if (session)
			return 1;
	} else if (session && launch_sample > 1 && launch) {
		/* Random, not every Nth: a step's launches come in a fixed order, and a fixed stride
		 * would never time the ones at some positions. Unsampled launches leave no state,
		 * so no return has to undo it. */
		if (bpf_get_prandom_u32() % launch_sample) {
			if (site)
				site->unsampled += 1;
			return 1;
		}
	}
	if (!GS_CALL_ENTER(st->depth))
		return 0;
	st->api = api;
	st->start_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline void record(__u32 api, __u64 dur, __s32 ret)
{
	__u32 pid = per_process ? bpf_get_current_pid_tgid() >> 32 : 0;
	struct gs_lat_key k = {.pid = pid, .api = api};
	struct gs_lat_stats *s = bpf_map_lookup_elem(&stats, &k);
	if (!s) {
		struct gs_lat_stats *z = gs_percpu(&zero_stats);
		if (z)
			bpf_map_update_elem(&stats, &k, z, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, &k);
		if (!s) {
			count_drop(GS_LAT_DROP_HIST_FULL);
			return;
		}
	}
	gs_hist_add(s->buckets, GS_LAT_BUCKETS, dur);
	if (dur > s->max_ns)
		s->max_ns = dur;
	if (ret == 0) {
		s->ret_zero += 1;
		return;
	}
	struct gs_lat_ret_key rk = {.pid = pid, .api = api, .ret = ret};
	add(&rets, &rk, 1);
}

/* The return half: only the outermost call of its layer is timed. */
static __always_inline void leave(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	if (api >= GS_API_COUNT)
		return;
	__u32 layer = apis[api].layer & 1;
	struct call_state *st = gs_thread_state(&calls);
	if (!st)
		return;
	st += layer;
	if (!GS_CALL_LEAVE(st->depth))
		return;
	record(st->api, now - st->start_ns, ret);
}

SEC("uprobe")
int gs_lat_enter(struct pt_regs *ctx)
{
	enter((__u32)bpf_get_attach_cookie(ctx), false);
	return 0;
}

SEC("uretprobe")
int gs_lat_exit(struct pt_regs *ctx)
{
	leave(ctx);
	return 0;
}

/* Kernel 6.12+: one program at entry and return (BPF_TRACE_UPROBE_SESSION), and only the
 * calls it times take the return probe: nested, filtered and unsampled calls cost one trap. */
SEC("uprobe")
int gs_lat_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return()) {
		leave(ctx);
		return 0;
	}
	return enter((__u32)bpf_get_attach_cookie(ctx), true);
}

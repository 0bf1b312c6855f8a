/* SPDX-License-Identifier: GPL-2.0 */
/* Latency's maps and its entry and return halves, in one header so that a program of another
 * object can time calls into the same maps: the agent's kernels launch programs time the
 * launches latency asks for, which then take one program and one trap, not two programs
 * (latency_collector.h: LaunchTimingHost). The including object defines apis[] first. */
#ifndef GPUSCOPE_LATENCY_TIME_BPF_H
#define GPUSCOPE_LATENCY_TIME_BPF_H

#include "common/call_pair.bpf.h"
#include "common/log2_hist.bpf.h"
#include "common/maps.bpf.h"
#include "common/scope_filter.bpf.h"
#include "latency/latency.h"

const volatile bool lat_per_process = false;

struct lat_call_state {
	__u64 start_ns;
	__u32 depth;
	__u32 api;
};

/* Per thread, one slot per layer (common/call_pair.bpf.h). */
GS_THREAD_STORAGE(lat_calls, struct lat_call_state[GS_LAYER_COUNT]);

/* Not preallocated: a 528-byte value per CPU per entry would cost hundreds of MB up front
 * on a large host; entries are made once per (API, process) and then only updated. */
GS_MAP_DEF(lat_stats, BPF_MAP_TYPE_PERCPU_HASH, 2048, BPF_F_NO_PREALLOC, struct gs_lat_key,
           struct gs_lat_stats);

/* Zeroed template for a new stats entry: too large for the BPF stack. */
GS_PERCPU_VALUE(lat_zero_stats, struct gs_lat_stats);

GS_MAP_DEF(lat_rets, BPF_MAP_TYPE_PERCPU_HASH, 4096, 0, struct gs_lat_ret_key, __u64);

GS_PERCPU_COUNTERS(lat_drops, GS_LAT_DROP_COUNT, lat_count_drop)

/* Per row: every entry the probe took, and why it was not timed. What a probe costs but
 * never reports shows here (gpuscope latency -v, the agent's gpuscope_api_probe_hits_total). */
GS_MAP_DEF(lat_sites, BPF_MAP_TYPE_PERCPU_ARRAY, GS_API_COUNT, 0, __u32, struct gs_lat_site);

extern bool bpf_session_is_return(void) __ksym __weak;

static __always_inline void lat_add(void *map, const void *key, __u64 v)
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
			lat_count_drop(GS_LAT_DROP_HIST_FULL);
	}
}

/* The entry half, for a call whose scope (in_scope) is `scoped`. Returns 0 when the call is
 * timed (its return must run), 1 when not: a session then skips the return probe. A launch row
 * is timed once in `sample` outermost calls, at random; only a session spares the others their
 * return probe, so sample > 1 only then. */
static __always_inline int lat_enter_scoped(__u32 api, bool session, __u32 sample, bool scoped)
{
	if (api >= GS_API_COUNT)
		return 1;
	__u32 layer = apis[api].layer & 1;
	bool launch = apis[api].roles & GS_ROLE_LAUNCH;
	/* Read while the verifier still knows api's bound: the compiler would sink the loads. */
	asm volatile("" ::: "memory");
	struct gs_lat_site *site = bpf_map_lookup_elem(&lat_sites, &api);
	if (site)
		site->entries += 1;
	if (!scoped) {
		if (site)
			site->filtered += 1;
		return 1;
	}
	/* The sample is drawn before the thread's state is looked up, so that an untimed launch
	 * costs no lookup: random, not every Nth, because a step's launches come in a fixed order
	 * and a fixed stride would never time some positions. A nested launch left untimed here
	 * counts as unsampled. */
	if (session && sample > 1 && launch && bpf_get_prandom_u32() % sample) {
		if (site)
			site->unsampled += 1;
		return 1;
	}
	struct lat_call_state *st = gs_thread_state_new(&lat_calls);
	if (!st) {
		lat_count_drop(GS_LAT_DROP_STATE_FULL);
		return 1;
	}
	st += layer;
	if (st->depth > 0) {
		if (site)
			site->nested += 1;
		/* A session skips a nested call's return, which must then leave the depth alone. */
		if (session)
			return 1;
	}
	if (!GS_CALL_ENTER(st->depth))
		return 0;
	st->api = api;
	st->start_ns = bpf_ktime_get_ns();
	return 0;
}

/* As lat_enter_scoped, asking the scope (-c, cgroups) itself. */
static __always_inline int lat_enter(__u32 api, bool session, __u32 sample)
{
	return lat_enter_scoped(api, session, sample, in_scope());
}

static __always_inline void lat_record(__u32 api, __u64 dur, __s32 ret)
{
	__u32 pid = lat_per_process ? bpf_get_current_pid_tgid() >> 32 : 0;
	struct gs_lat_key k = {.pid = pid, .api = api};
	struct gs_lat_stats *s = bpf_map_lookup_elem(&lat_stats, &k);
	if (!s) {
		struct gs_lat_stats *z = gs_percpu(&lat_zero_stats);
		if (z)
			bpf_map_update_elem(&lat_stats, &k, z, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&lat_stats, &k);
		if (!s) {
			lat_count_drop(GS_LAT_DROP_HIST_FULL);
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
	lat_add(&lat_rets, &rk, 1);
}

/* The return half: only the outermost call of its layer is timed. */
static __always_inline void lat_leave(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	if (api >= GS_API_COUNT)
		return;
	__u32 layer = apis[api].layer & 1;
	struct lat_call_state *st = gs_thread_state(&lat_calls);
	if (!st)
		return;
	st += layer;
	if (!GS_CALL_LEAVE(st->depth))
		return;
	lat_record(st->api, now - st->start_ns, ret);
}

#endif

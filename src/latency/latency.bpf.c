// SPDX-License-Identifier: GPL-2.0
/* gpuscope latency: per-API log2 latency histograms and return-code counts, aggregated
 * here so that no event crosses to userspace per call. Same probe sites and nesting rule
 * as trace: the attach cookie is the API row, and only a layer's outermost call counts.
 * The maps and both halves are in latency_time.bpf.h, which the agent's launch programs share. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/cuda_api.h"
#include "common/events.h"

char LICENSE[] SEC("license") = "GPL";

static const struct gs_api_desc apis[GS_API_COUNT] = GS_API_DESC_TABLE;

#include "latency/latency_time.bpf.h"

/* Time one outermost call of a GS_ROLE_LAUNCH row in this many (1: all); above 1 only with a
 * session. */
const volatile __u32 launch_sample = 1;

SEC("uprobe")
int gs_lat_enter(struct pt_regs *ctx)
{
	lat_enter((__u32)bpf_get_attach_cookie(ctx), false, 1);
	return 0;
}

SEC("uretprobe")
int gs_lat_exit(struct pt_regs *ctx)
{
	lat_leave(ctx);
	return 0;
}

/* Kernel 6.12+: one program at entry and return (BPF_TRACE_UPROBE_SESSION), and only the
 * calls it times take the return probe: nested, filtered and unsampled calls cost one trap. */
SEC("uprobe")
int gs_lat_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return()) {
		lat_leave(ctx);
		return 0;
	}
	return lat_enter((__u32)bpf_get_attach_cookie(ctx), true, launch_sample);
}

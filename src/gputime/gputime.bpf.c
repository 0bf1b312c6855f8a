// SPDX-License-Identifier: GPL-2.0
/* gpuscope GPU time: one uprobe per buffer that libgpuscope-cupti.so hands over, never one
 * per kernel. The records are copied, GS_GT_CHUNK at a time, into the ring buffer; what
 * cannot be copied is counted by reason. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/arch.bpf.h"
#include "common/scope_filter.bpf.h"
#include "common/maps.bpf.h"
#include "gputime/gputime.h"

char LICENSE[] SEC("license") = "GPL";

GS_RINGBUF(gs_gt_events, 1 << 23);

GS_DROP_COUNTERS(gs_gt_drops, GS_GT_DROP_COUNT)

/* void gpuscope_cupti_buffer(const struct gs_gt_record *recs, uint32_t n,
 *                            const struct gs_gt_batch *batch) */
SEC("uprobe")
int gs_gt_buffer(struct pt_regs *ctx)
{
	const struct gs_gt_record *recs = (const void *)PT_REGS_PARM1(ctx);
	__u32 n = (__u32)PT_REGS_PARM2(ctx);
	const void *batch = (const void *)PT_REGS_PARM3(ctx);
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	if (!in_scope())
		return 0;
	if (n > GS_GT_BATCH_MAX) {
		gs_counter_add(&gs_gt_drops, GS_GT_DROP_TOO_MANY, n - GS_GT_BATCH_MAX);
		n = GS_GT_BATCH_MAX;
	}
	for (__u32 i = 0; i < GS_GT_BATCH_MAX / GS_GT_CHUNK; i++) {
		__u32 done = i * GS_GT_CHUNK;
		if (done >= n)
			break;
		__u32 cnt = n - done;
		if (cnt > GS_GT_CHUNK)
			cnt = GS_GT_CHUNK;
		struct gs_gt_chunk *c = bpf_ringbuf_reserve(&gs_gt_events, sizeof(*c), 0);
		if (!c) {
			gs_counter_add(&gs_gt_drops, GS_GT_DROP_RINGBUF, cnt);
			continue;
		}
		c->type = GS_GT_EV_RECORDS;
		c->pid = pid;
		c->n = cnt;
		c->reserved = 0;
		/* The compiler knows cnt <= GS_GT_CHUNK; the verifier must see the bound too. */
		__u64 bytes = (__u64)cnt * sizeof(c->recs[0]);
		asm volatile("" : "+r"(bytes));
		if (bytes > sizeof(c->recs))
			bytes = sizeof(c->recs);
		if (bpf_probe_read_user(&c->batch, sizeof(c->batch), batch) ||
		    bpf_probe_read_user(c->recs, bytes, recs + done)) {
			gs_counter_add(&gs_gt_drops, GS_GT_DROP_READ, cnt);
			bpf_ringbuf_discard(c, 0);
			continue;
		}
		bpf_ringbuf_submit(c, 0);
	}
	return 0;
}

/* void gpuscope_cupti_name(uint32_t id, const char *name, uint32_t len) */
SEC("uprobe")
int gs_gt_name(struct pt_regs *ctx)
{
	if (!in_scope())
		return 0;
	struct gs_gt_name *e = bpf_ringbuf_reserve(&gs_gt_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_GT_DROP_NAME);
		return 0;
	}
	e->type = GS_GT_EV_NAME;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->id = (__u32)PT_REGS_PARM1(ctx);
	long len =
	        bpf_probe_read_user_str(e->name, sizeof(e->name), (const void *)PT_REGS_PARM2(ctx));
	if (len <= 0) {
		count_drop(GS_GT_DROP_NAME);
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	e->len = (__u32)len - 1;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

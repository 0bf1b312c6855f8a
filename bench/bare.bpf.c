// SPDX-License-Identifier: GPL-2.0
/* The floor: programs that only count, attached to the same sites as gpuscope's. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

__u64 enter_hits = 0;
__u64 exit_hits = 0;

SEC("uprobe")
int bare_enter(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&enter_hits, 1);
	return 0;
}

/* The same count through the other ways gpuscope attaches (kernels_overhead --floor-attach):
 * one uprobe_multi link, or a uprobe session whose entry declines the return. They load as plain
 * uprobe programs unless a bench prepares them so, which a kernel without them still takes. */
SEC("uprobe")
int bare_multi(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&enter_hits, 1);
	return 0;
}

SEC("uprobe")
int bare_session(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&enter_hits, 1);
	return 1;
}

SEC("uretprobe")
int bare_exit(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&exit_hits, 1);
	return 0;
}

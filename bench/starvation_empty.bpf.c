// SPDX-License-Identifier: GPL-2.0
// The baseline of starvation_overhead: the same tracepoint, a program that does nothing.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(gs_s_empty_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
// pyframes_overhead: two cpu-clock samplers on the same Python thread, one taking the user
// stack as starvation's sampler does, the other the same plus the CPython walk. The kernel's
// run-time statistics give each one's cost per sample in the same run.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "python/pyframes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} bench_stacks SEC(".maps");

__u64 bench_hashes; /* chains seen by the walk (non-zero hashes) */

SEC("perf_event")
int py_bench_native(struct bpf_perf_event_data *ctx)
{
	bpf_get_stackid(ctx, &bench_stacks, BPF_F_USER_STACK);
	return 0;
}

SEC("perf_event")
int py_bench_walk(struct bpf_perf_event_data *ctx)
{
	bpf_get_stackid(ctx, &bench_stacks, BPF_F_USER_STACK);
	if (gs_py_capture(bpf_get_current_task_btf()))
		__sync_fetch_and_add(&bench_hashes, 1);
	return 0;
}

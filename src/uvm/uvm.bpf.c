// SPDX-License-Identifier: GPL-2.0
/* gpuscope uvm: fault servicing and thrashing in the nvidia-uvm module. kprobes first;
 * fentry (with the module's BTF) where kprobes are missing. Userspace attaches each program
 * to the name /proc/kallsyms gives, so compiler suffixes such as .isra.0 match. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "uvm/uvm.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GS_UVM_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* thrashing address */
	__type(value, struct gs_uvm_thrash_val);
} thrashing SEC(".maps");

static __always_inline void bump(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &which);
	if (n)
		*n += 1;
}

static __always_inline void thrash(__u64 address)
{
	struct gs_uvm_thrash_val *v = bpf_map_lookup_elem(&thrashing, &address);
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bump(GS_UVM_THRASHING);
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		v->last_pid = pid;
		return;
	}
	struct gs_uvm_thrash_val fresh = {.count = 1, .last_pid = pid};
	bpf_map_update_elem(&thrashing, &address, &fresh, BPF_NOEXIST);
}

SEC("kprobe")
int gs_uvm_replayable(struct pt_regs *ctx)
{
	bump(GS_UVM_REPLAYABLE);
	return 0;
}

SEC("kprobe")
int gs_uvm_non_replayable(struct pt_regs *ctx)
{
	bump(GS_UVM_NON_REPLAYABLE);
	return 0;
}

/* uvm_tools_record_thrashing(uvm_va_space_t *va_space, NvU64 address, size_t region_size, ...) */
SEC("kprobe")
int BPF_KPROBE(gs_uvm_thrashing, void *va_space, __u64 address)
{
	thrash(address);
	return 0;
}

/* fentry twins: the attach target is set from userspace before load. */
SEC("fentry")
int BPF_PROG(gs_uvm_replayable_fentry)
{
	bump(GS_UVM_REPLAYABLE);
	return 0;
}

SEC("fentry")
int BPF_PROG(gs_uvm_non_replayable_fentry)
{
	bump(GS_UVM_NON_REPLAYABLE);
	return 0;
}

SEC("fentry")
int BPF_PROG(gs_uvm_thrashing_fentry, void *va_space, __u64 address)
{
	thrash(address);
	return 0;
}

/* Loaded on its own to learn whether this kernel lets fentry programs load at all. */
SEC("fentry/do_nanosleep")
int BPF_PROG(gs_uvm_fentry_probe)
{
	return 0;
}

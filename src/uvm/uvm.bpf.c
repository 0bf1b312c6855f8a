// SPDX-License-Identifier: GPL-2.0
/* gpuscope uvm: fault servicing and thrashing in the nvidia-uvm module. kprobes first;
 * fentry (with the module's BTF) where kprobes are missing. Userspace attaches each program
 * to the name /proc/kallsyms gives, so compiler suffixes such as .isra.0 match. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "common/maps.bpf.h"
#include "uvm/uvm.h"

char LICENSE[] SEC("license") = "GPL";

GS_PERCPU_COUNTERS(counters, GS_UVM_COUNTERS, bump)

/* key: thrashing address */
GS_LRU_HASH(thrashing, 8192, __u64, struct gs_uvm_thrash_val);

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

/* Each hook twice: a kprobe (prog), and its fentry twin (fentry_prog), whose attach target
 * userspace sets before load. The arguments after `body` are the hooked function's. */
#define GS_UVM_HOOK(prog, fentry_prog, body, args...)                                              \
	SEC("kprobe")                                                                              \
	int BPF_KPROBE(prog, ##args)                                                               \
	{                                                                                          \
		body;                                                                              \
		return 0;                                                                          \
	}                                                                                          \
	SEC("fentry")                                                                              \
	int BPF_PROG(fentry_prog, ##args)                                                          \
	{                                                                                          \
		body;                                                                              \
		return 0;                                                                          \
	}

GS_UVM_HOOK(gs_uvm_replayable, gs_uvm_replayable_fentry, bump(GS_UVM_REPLAYABLE))
GS_UVM_HOOK(gs_uvm_non_replayable, gs_uvm_non_replayable_fentry, bump(GS_UVM_NON_REPLAYABLE))
/* uvm_tools_record_thrashing(uvm_va_space_t *va_space, NvU64 address, size_t region_size, ...) */
GS_UVM_HOOK(gs_uvm_thrashing, gs_uvm_thrashing_fentry, thrash(address), void *va_space,
            __u64 address)

/* Loaded on its own to learn whether this kernel lets fentry programs load at all. */
SEC("fentry/do_nanosleep")
int BPF_PROG(gs_uvm_fentry_probe)
{
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
/* Sizes and offsets of the bridge's map values (bridge_maps.h, ours_* here) as clang -target bpf
 * lays them out; the layout test compares them with the C++ compiler's, read from this object's
 * .rodata. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bridge/bridge_pins.bpf.h"
#include "bridge/layout_fields.h"

#define S(s, size) sizeof(struct ours_##s),
#define F(s, f, off) __builtin_offsetof(struct ours_##s, f),
const volatile __u32 layout[] = {GPU_BRIDGE_LAYOUT(S, F)};

__u64 seen_update_ns;

/* A consumer's read of the freshness signal, so the verifier sees the types in use. */
SEC("raw_tp/sys_enter")
int read_meta(void *ctx)
{
	__u32 k = 0;
	struct gpu_meta *m = bpf_map_lookup_elem(&gpu_meta, &k);
	if (m)
		seen_update_ns = m->last_update_boottime_ns;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

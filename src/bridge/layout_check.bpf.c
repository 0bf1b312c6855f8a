// Sizes and offsets of the bridge's map values as clang -target bpf lays them out; the
// layout test compares them with the C++ compiler's, read from this object's .rodata.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bridge/bridge_maps.h"
#include "bridge/layout_fields.h"

#define S(s) sizeof(struct s),
#define F(s, f) __builtin_offsetof(struct s, f),
const volatile __u32 layout[] = {GPU_BRIDGE_LAYOUT(S, F)};

// A consumer's read of the freshness signal, so the verifier sees the types in use.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct gpu_meta);
} gpu_meta SEC(".maps");

__u64 seen_update_ns;

SEC("raw_tp/sys_enter")
int read_meta(void* ctx) {
  __u32 k = 0;
  struct gpu_meta* m = bpf_map_lookup_elem(&gpu_meta, &k);
  if (m) seen_update_ns = m->last_update_boottime_ns;
  return 0;
}

char LICENSE[] SEC("license") = "GPL";

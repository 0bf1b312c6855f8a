// A BPF consumer of the bridge declared as Inspektor Gadget's gadgets declare it: pinned by
// name, so libbpf opens the pins under the object's pin_root_path, or refuses to load when a
// pin's type, sizes or entries differ. One run copies what it finds into .bss.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bridge_ig_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gpu_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpu_meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct gpu_device_metrics);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpu_device SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gpu_pid_metrics_aggregated);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpu_per_pid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct gpu_pid_metrics);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpu_per_pid_per_device SEC(".maps");

#define N 4
__u32 want_pid[N];     // input: pids to read
__u64 want_pid_dev[N]; // input: (pid << 32) | device keys to read

struct gpu_meta meta_seen;
struct gpu_device_metrics device_seen[2];
struct gpu_pid_metrics_aggregated pid_seen[N];
struct gpu_pid_metrics pid_dev_seen[N];
__u32 found; // bit i: pid_seen[i]; bit 8 + i: pid_dev_seen[i]

SEC("raw_tp/sys_enter")
int read_bridge(void *ctx)
{
	__u32 k = 0;
	struct gpu_meta *m = bpf_map_lookup_elem(&gpu_meta, &k);
	if (m)
		meta_seen = *m;
	for (__u32 d = 0; d < 2; d++) {
		struct gpu_device_metrics *v = bpf_map_lookup_elem(&gpu_device, &d);
		if (v)
			device_seen[d] = *v;
	}
	for (int i = 0; i < N; i++) {
		struct gpu_pid_metrics_aggregated *a =
		        bpf_map_lookup_elem(&gpu_per_pid, &want_pid[i]);
		if (a)
			pid_seen[i] = *a, found |= 1u << i;
		struct gpu_pid_metrics *p =
		        bpf_map_lookup_elem(&gpu_per_pid_per_device, &want_pid_dev[i]);
		if (p)
			pid_dev_seen[i] = *p, found |= 1u << (8 + i);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

// The bridge's four maps, created from this object so that they carry BTF: `bpftool map dump`
// then prints every field by name. No programs; the bridge pins the maps itself.
// The value types carry Inspektor Gadget's struct and field names (its include/gadget/gpu_types.h),
// so a dump reads the same on either bridge. bridge_maps.h keeps our names (units in them); the
// asserts below hold the two declarations to one byte layout.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define gpu_meta ours_gpu_meta
#define gpu_device_metrics ours_gpu_device_metrics
#include "bridge/bridge_maps.h"
#undef gpu_meta
#undef gpu_device_metrics

struct gpu_meta {
  __u32 schema_version;
  __u32 n_devices;
  __u64 last_update_boottime_ns; /* CLOCK_BOOTTIME of the last tick */
  __u32 helper_pid;
  __u32 _reserved; /* gpuscope writes its poll interval in ms here */
  __s64 clock_offset_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME */
};

struct gpu_device_metrics {
  __u64 timestamp_ns;
  __u32 sm_util_pct;
  __u32 mem_util_pct;
  __u64 mem_total; /* bytes */
  __u64 mem_used; /* bytes */
  __u64 mem_reserved; /* bytes */
  __u32 temp_c;
  __u32 power_mw;
  __u32 sm_clock_mhz;
  __u32 mem_clock_mhz;
  __u64 throttle_reasons;
  __u64 pcie_tx_kbps;
  __u64 pcie_rx_kbps;
  __u32 enc_util_pct;
  __u32 dec_util_pct;
  __u64 nvlink_tx_kbps;
  __u64 nvlink_rx_kbps;
  __u64 ecc_corrected_total;
  __u64 ecc_uncorrected_total;
  __u32 fan_speed_pct;
  __u32 compute_mode;
};

struct gpu_pid_metrics {
  __u64 timestamp_ns;
  __u64 used_gpu_memory; /* bytes */
  __u32 sm_util_pct;
  __u32 mem_util_pct;
  __u32 enc_util_pct;
  __u32 dec_util_pct;
  __u8 gpu_device;
  __u8 mig_instance;
  __u16 _pad;
};

struct gpu_pid_metrics_aggregated {
  __u64 timestamp_ns;
  __u64 used_gpu_memory_total; /* bytes */
  __u32 sm_util_pct_max;
  __u32 mem_util_pct_max;
  __u8 gpu_device_primary;
  __u8 device_count;
  __u16 _pad;
};

#define SAME(a, b, fa, fb)                                                                   \
  _Static_assert(__builtin_offsetof(struct a, fa) == __builtin_offsetof(struct b, fb) &&  \
                     sizeof(((struct a*)0)->fa) == sizeof(((struct b*)0)->fb),              \
                 #b "." #fb)
_Static_assert(sizeof(struct gpu_meta) == sizeof(struct ours_gpu_meta), "gpu_meta");
SAME(ours_gpu_meta, gpu_meta, schema_version, schema_version);
SAME(ours_gpu_meta, gpu_meta, n_devices, n_devices);
SAME(ours_gpu_meta, gpu_meta, last_update_boottime_ns, last_update_boottime_ns);
SAME(ours_gpu_meta, gpu_meta, helper_pid, helper_pid);
SAME(ours_gpu_meta, gpu_meta, poll_interval_ms, _reserved);
SAME(ours_gpu_meta, gpu_meta, clock_offset_ns, clock_offset_ns);
_Static_assert(sizeof(struct gpu_device_metrics) == sizeof(struct ours_gpu_device_metrics), "gpu_device_metrics");
#define DEV(fa, fb) SAME(ours_gpu_device_metrics, gpu_device_metrics, fa, fb)
DEV(timestamp_ns, timestamp_ns);
DEV(sm_util_pct, sm_util_pct);
DEV(mem_util_pct, mem_util_pct);
DEV(mem_total_bytes, mem_total);
DEV(mem_used_bytes, mem_used);
DEV(mem_reserved_bytes, mem_reserved);
DEV(temp_c, temp_c);
DEV(power_mw, power_mw);
DEV(sm_clock_mhz, sm_clock_mhz);
DEV(mem_clock_mhz, mem_clock_mhz);
DEV(throttle_reasons, throttle_reasons);
DEV(pcie_tx_kbps, pcie_tx_kbps);
DEV(pcie_rx_kbps, pcie_rx_kbps);
DEV(enc_util_pct, enc_util_pct);
DEV(dec_util_pct, dec_util_pct);
DEV(nvlink_tx_kbps, nvlink_tx_kbps);
DEV(nvlink_rx_kbps, nvlink_rx_kbps);
DEV(ecc_corrected_total, ecc_corrected_total);
DEV(ecc_uncorrected_total, ecc_uncorrected_total);
DEV(fan_speed_pct, fan_speed_pct);
DEV(compute_mode, compute_mode);
_Static_assert(sizeof(struct gpu_pid_metrics) == sizeof(struct gpu_pid_device), "gpu_pid_metrics");
#define PD(fa, fb) SAME(gpu_pid_device, gpu_pid_metrics, fa, fb)
PD(timestamp_ns, timestamp_ns);
PD(used_gpu_memory_bytes, used_gpu_memory);
PD(sm_util_pct, sm_util_pct);
PD(mem_util_pct, mem_util_pct);
PD(enc_util_pct, enc_util_pct);
PD(dec_util_pct, dec_util_pct);
PD(gpu_device, gpu_device);
PD(mig_instance, mig_instance);
PD(pad, _pad);
_Static_assert(sizeof(struct gpu_pid_metrics_aggregated) == sizeof(struct gpu_pid), "gpu_pid_metrics_aggregated");
#define AG(fa, fb) SAME(gpu_pid, gpu_pid_metrics_aggregated, fa, fb)
AG(timestamp_ns, timestamp_ns);
AG(used_gpu_memory_total_bytes, used_gpu_memory_total);
AG(sm_util_pct_max, sm_util_pct_max);
AG(mem_util_pct_max, mem_util_pct_max);
AG(gpu_device_primary, gpu_device_primary);
AG(device_count, device_count);
AG(pad, _pad);

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct gpu_meta);
} gpu_meta SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, GPU_MAX_DEVICES);
  __type(key, __u32);
  __type(value, struct gpu_device_metrics);
} gpu_device SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, GPU_BRIDGE_MAX_PIDS);
  __type(key, __u32); /* host pid */
  __type(value, struct gpu_pid_metrics_aggregated);
} gpu_per_pid SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, GPU_BRIDGE_MAX_PID_DEVICES);
  __type(key, __u64); /* (pid << 32) | device */
  __type(value, struct gpu_pid_metrics);
} gpu_per_pid_per_device SEC(".maps");

char LICENSE[] SEC("license") = "GPL";

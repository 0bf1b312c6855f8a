/* SPDX-License-Identifier: GPL-2.0 */
/* The GPU bridge's four pinned maps (../shared/bridge-contract.md), declared once for every BPF
 * object that holds them: the bridge's own (pins.bpf.c: the bridge creates the maps from it and
 * pins them), the layout check (layout_check.bpf.c), and the consumers (starvation.bpf.c), which
 * take the pinned maps with bpf_map__reuse_fd before load. Names, types, keys, values and entries
 * are a public interface, compatible with Inspektor Gadget's gpu-ebpf-bridge: they never change
 * (a change is a new schema version).
 *
 * The value types carry Inspektor Gadget's struct and field names (its include/gadget/gpu_types.h):
 * the pins' BTF comes from here, so `bpftool map dump` prints them as on their bridge, and our
 * consumers read the fields by the names theirs do. bridge_maps.h keeps our names (units in
 * them) for C++; here its structs are ours_gpu_meta, ours_gpu_device_metrics, ours_gpu_pid and
 * ours_gpu_pid_device, and the asserts below hold the two declarations to one byte layout.
 * The including object needs vmlinux.h and bpf_helpers.h. */
#ifndef GPUSCOPE_BRIDGE_PINS_BPF_H
#define GPUSCOPE_BRIDGE_PINS_BPF_H

#include "common/maps.bpf.h"

#define gpu_meta ours_gpu_meta
#define gpu_device_metrics ours_gpu_device_metrics
#define gpu_pid ours_gpu_pid
#define gpu_pid_device ours_gpu_pid_device
#include "bridge/bridge_maps.h"
#undef gpu_meta
#undef gpu_device_metrics
#undef gpu_pid
#undef gpu_pid_device

struct gpu_meta {
	__u32 schema_version;
	__u32 n_devices;
	__u64 last_update_boottime_ns; /* CLOCK_BOOTTIME of the last tick */
	__u32 helper_pid;
	__u32 _reserved;       /* gpuscope writes its poll interval in ms here */
	__s64 clock_offset_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME */
};

struct gpu_device_metrics {
	__u64 timestamp_ns; /* CLOCK_REALTIME of the sample */
	__u32 sm_util_pct;
	__u32 mem_util_pct;
	__u64 mem_total;    /* bytes */
	__u64 mem_used;     /* bytes */
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

/* Ours: gpu_pid_device. */
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

/* Ours: gpu_pid. */
struct gpu_pid_metrics_aggregated {
	__u64 timestamp_ns;
	__u64 used_gpu_memory_total; /* bytes */
	__u32 sm_util_pct_max;
	__u32 mem_util_pct_max;
	__u8 gpu_device_primary; /* GPU_DEVICE_SEVERAL when on more than one device */
	__u8 device_count;
	__u16 _pad;
};

/* Each field of ours (a) at the offset and size of theirs (b). */
#define GPU_BRIDGE_SAME(a, b, fa, fb)                                                              \
	_Static_assert(__builtin_offsetof(struct a, fa) == __builtin_offsetof(struct b, fb) &&     \
	                       sizeof(((struct a *)0)->fa) == sizeof(((struct b *)0)->fb),         \
	               #b "." #fb)
#define GPU_BRIDGE_META(fa, fb) GPU_BRIDGE_SAME(ours_gpu_meta, gpu_meta, fa, fb)
#define GPU_BRIDGE_DEV(fa, fb) GPU_BRIDGE_SAME(ours_gpu_device_metrics, gpu_device_metrics, fa, fb)
#define GPU_BRIDGE_PD(fa, fb) GPU_BRIDGE_SAME(ours_gpu_pid_device, gpu_pid_metrics, fa, fb)
#define GPU_BRIDGE_AG(fa, fb) GPU_BRIDGE_SAME(ours_gpu_pid, gpu_pid_metrics_aggregated, fa, fb)
_Static_assert(sizeof(struct gpu_meta) == sizeof(struct ours_gpu_meta), "gpu_meta");
GPU_BRIDGE_META(schema_version, schema_version);
GPU_BRIDGE_META(n_devices, n_devices);
GPU_BRIDGE_META(last_update_boottime_ns, last_update_boottime_ns);
GPU_BRIDGE_META(helper_pid, helper_pid);
GPU_BRIDGE_META(poll_interval_ms, _reserved);
GPU_BRIDGE_META(clock_offset_ns, clock_offset_ns);
_Static_assert(sizeof(struct gpu_device_metrics) == sizeof(struct ours_gpu_device_metrics),
               "gpu_device_metrics");
GPU_BRIDGE_DEV(timestamp_ns, timestamp_ns);
GPU_BRIDGE_DEV(sm_util_pct, sm_util_pct);
GPU_BRIDGE_DEV(mem_util_pct, mem_util_pct);
GPU_BRIDGE_DEV(mem_total_bytes, mem_total);
GPU_BRIDGE_DEV(mem_used_bytes, mem_used);
GPU_BRIDGE_DEV(mem_reserved_bytes, mem_reserved);
GPU_BRIDGE_DEV(temp_c, temp_c);
GPU_BRIDGE_DEV(power_mw, power_mw);
GPU_BRIDGE_DEV(sm_clock_mhz, sm_clock_mhz);
GPU_BRIDGE_DEV(mem_clock_mhz, mem_clock_mhz);
GPU_BRIDGE_DEV(throttle_reasons, throttle_reasons);
GPU_BRIDGE_DEV(pcie_tx_kbps, pcie_tx_kbps);
GPU_BRIDGE_DEV(pcie_rx_kbps, pcie_rx_kbps);
GPU_BRIDGE_DEV(enc_util_pct, enc_util_pct);
GPU_BRIDGE_DEV(dec_util_pct, dec_util_pct);
GPU_BRIDGE_DEV(nvlink_tx_kbps, nvlink_tx_kbps);
GPU_BRIDGE_DEV(nvlink_rx_kbps, nvlink_rx_kbps);
GPU_BRIDGE_DEV(ecc_corrected_total, ecc_corrected_total);
GPU_BRIDGE_DEV(ecc_uncorrected_total, ecc_uncorrected_total);
GPU_BRIDGE_DEV(fan_speed_pct, fan_speed_pct);
GPU_BRIDGE_DEV(compute_mode, compute_mode);
_Static_assert(sizeof(struct gpu_pid_metrics) == sizeof(struct ours_gpu_pid_device),
               "gpu_pid_metrics");
GPU_BRIDGE_PD(timestamp_ns, timestamp_ns);
GPU_BRIDGE_PD(used_gpu_memory_bytes, used_gpu_memory);
GPU_BRIDGE_PD(sm_util_pct, sm_util_pct);
GPU_BRIDGE_PD(mem_util_pct, mem_util_pct);
GPU_BRIDGE_PD(enc_util_pct, enc_util_pct);
GPU_BRIDGE_PD(dec_util_pct, dec_util_pct);
GPU_BRIDGE_PD(gpu_device, gpu_device);
GPU_BRIDGE_PD(mig_instance, mig_instance);
GPU_BRIDGE_PD(kinds, _pad);
_Static_assert(sizeof(struct gpu_pid_metrics_aggregated) == sizeof(struct ours_gpu_pid),
               "gpu_pid_metrics_aggregated");
GPU_BRIDGE_AG(timestamp_ns, timestamp_ns);
GPU_BRIDGE_AG(used_gpu_memory_total_bytes, used_gpu_memory_total);
GPU_BRIDGE_AG(sm_util_pct_max, sm_util_pct_max);
GPU_BRIDGE_AG(mem_util_pct_max, mem_util_pct_max);
GPU_BRIDGE_AG(gpu_device_primary, gpu_device_primary);
GPU_BRIDGE_AG(device_count, device_count);
GPU_BRIDGE_AG(pad, _pad);

/* GPU_PIN_META: the freshness signal and the clock offset (key: always 0). */
GS_ARRAY(gpu_meta, 1, __u32, struct gpu_meta);

/* GPU_PIN_DEVICE, by device index */
GS_ARRAY(gpu_device, GPU_MAX_DEVICES, __u32, struct gpu_device_metrics);

/* GPU_PIN_PER_PID, by host pid */
GS_LRU_HASH(gpu_per_pid, GPU_BRIDGE_MAX_PIDS, __u32, struct gpu_pid_metrics_aggregated);

/* GPU_PIN_PER_PID_PER_DEVICE, by (pid << 32) | device */
GS_LRU_HASH(gpu_per_pid_per_device, GPU_BRIDGE_MAX_PID_DEVICES, __u64, struct gpu_pid_metrics);

#endif

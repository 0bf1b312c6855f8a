/* The GPU bridge's pinned maps, schema version 1 (../shared/bridge-contract.md).
 * Byte-compatible with Inspektor Gadget's gpu-ebpf-bridge: a public interface, so a field
 * changes only with a new schema version. Included by BPF programs (after vmlinux.h) and C++. */
#ifndef GPUSCOPE_BRIDGE_MAPS_H
#define GPUSCOPE_BRIDGE_MAPS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define GPU_BRIDGE_SCHEMA_VERSION 1
#define GPU_MAX_DEVICES 16
/* Inspektor Gadget's consumers declare the per-pid maps with 4096 entries and LIBBPF_PIN_BY_NAME;
 * libbpf reuses a pin only when max_entries matches, so any other size locks them out. */
#define GPU_BRIDGE_MAX_PIDS 4096
#define GPU_BRIDGE_MAX_PID_DEVICES 4096
#define GPU_DEVICE_SEVERAL 0xFF

/* Pinned names under the pin directory. */
#define GPU_PIN_META "gpu_meta"
#define GPU_PIN_DEVICE "gpu_device"
#define GPU_PIN_PER_PID "gpu_per_pid"
#define GPU_PIN_PER_PID_PER_DEVICE "gpu_per_pid_per_device"

/* gpu_meta: ARRAY, key u32 0, 1 entry. */
struct gpu_meta {
	__u32 schema_version;
	__u32 n_devices;
	__u64 last_update_boottime_ns; /* freshness: CLOCK_BOOTTIME of the last tick */
	__u32 helper_pid;
	__u32 poll_interval_ms; /* reserved in the contract; Inspektor Gadget writes 0 */
	__s64 clock_offset_ns;  /* CLOCK_REALTIME - CLOCK_BOOTTIME */
};

/* gpu_device: ARRAY, key u32 device index, GPU_MAX_DEVICES entries. */
struct gpu_device_metrics {
	__u64 timestamp_ns; /* CLOCK_REALTIME of the sample */
	__u32 sm_util_pct;
	__u32 mem_util_pct;
	__u64 mem_total_bytes;
	__u64 mem_used_bytes;
	__u64 mem_reserved_bytes;
	__u32 temp_c;
	__u32 power_mw;
	__u32 sm_clock_mhz;
	__u32 mem_clock_mhz;
	__u64 throttle_reasons; /* NVML clock-event reasons bitmask */
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

/* gpu_per_pid_per_device: LRU_HASH, key u64 (pid << 32) | device. */
#define GPU_PROC_COMPUTE 1  /* in NVML's compute process list */
#define GPU_PROC_GRAPHICS 2 /* in NVML's graphics process list */

struct gpu_pid_device {
	__u64 timestamp_ns;
	__u64 used_gpu_memory_bytes;
	__u32 sm_util_pct;
	__u32 mem_util_pct;
	__u32 enc_util_pct;
	__u32 dec_util_pct;
	__u8 gpu_device;
	__u8 mig_instance;
	/* Ours, in the contract's pad (Inspektor Gadget writes 0): the kinds of context the process
	 * has on the device, GPU_PROC_COMPUTE | GPU_PROC_GRAPHICS; 0 from a bridge that does not say. */
	__u16 kinds;
	__u32 reserved; /* explicit tail padding, written 0 */
};

/* gpu_per_pid: LRU_HASH, key u32 host pid. */
struct gpu_pid {
	__u64 timestamp_ns;
	__u64 used_gpu_memory_total_bytes;
	__u32 sm_util_pct_max;
	__u32 mem_util_pct_max;
	__u8 gpu_device_primary; /* GPU_DEVICE_SEVERAL when on more than one device */
	__u8 device_count;
	__u16 pad;
	__u32 reserved; /* explicit tail padding, written 0 */
};

#ifdef __cplusplus
/* The contract's sizes and offsets (layout_fields.h), checked at compile time. */
#include <cstddef>
#include "bridge/layout_fields.h"
#define GPU_BRIDGE_SIZE(s, size) static_assert(sizeof(s) == (size), #s);
#define GPU_BRIDGE_AT(s, f, off) static_assert(offsetof(s, f) == (off), #s "." #f);
GPU_BRIDGE_LAYOUT(GPU_BRIDGE_SIZE, GPU_BRIDGE_AT)
#undef GPU_BRIDGE_SIZE
#undef GPU_BRIDGE_AT
#endif

#endif

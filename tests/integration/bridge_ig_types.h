/* A consumer's view of the bridge, written the way Inspektor Gadget publishes it
 * (include/gadget/gpu_types.h and gpu_bridge_maps.h in inspektor-gadget): its four struct
 * names and field names, and its map declarations with LIBBPF_PIN_BY_NAME and 4096-entry
 * per-pid maps. Deliberately not sharing a line with src/bridge: the test proves that a program
 * written against their header alone reads our pins. */
#ifndef BRIDGE_IG_TYPES_H
#define BRIDGE_IG_TYPES_H

struct gpu_meta {
	__u32 schema_version;
	__u32 n_devices;
	__u64 last_update_boottime_ns;
	__u32 helper_pid;
	__u32 _reserved;
	__s64 clock_offset_ns;
};

struct gpu_device_metrics {
	__u64 timestamp_ns;
	__u32 sm_util_pct;
	__u32 mem_util_pct;
	__u64 mem_total;
	__u64 mem_used;
	__u64 mem_reserved;
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
	__u64 used_gpu_memory;
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
	__u64 used_gpu_memory_total;
	__u32 sm_util_pct_max;
	__u32 mem_util_pct_max;
	__u8 gpu_device_primary;
	__u8 device_count;
	__u16 _pad;
};

#endif

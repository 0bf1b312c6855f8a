/* Every size and field offset of bridge_maps.h, in one list: the BPF layout check and the
 * C++ test expand it the same way, so the two compilers' layouts are compared entry by entry. */
#ifndef GPUSCOPE_BRIDGE_LAYOUT_FIELDS_H
#define GPUSCOPE_BRIDGE_LAYOUT_FIELDS_H
#define GPU_BRIDGE_LAYOUT(S, F)                                                                  \
  S(gpu_meta) F(gpu_meta, schema_version) F(gpu_meta, n_devices)                                 \
  F(gpu_meta, last_update_boottime_ns) F(gpu_meta, helper_pid) F(gpu_meta, poll_interval_ms)     \
  F(gpu_meta, clock_offset_ns)                                                                   \
  S(gpu_device_metrics) F(gpu_device_metrics, timestamp_ns) F(gpu_device_metrics, sm_util_pct)   \
  F(gpu_device_metrics, mem_util_pct) F(gpu_device_metrics, mem_total_bytes)                     \
  F(gpu_device_metrics, mem_used_bytes) F(gpu_device_metrics, mem_reserved_bytes)                \
  F(gpu_device_metrics, temp_c) F(gpu_device_metrics, power_mw) F(gpu_device_metrics, sm_clock_mhz) \
  F(gpu_device_metrics, mem_clock_mhz) F(gpu_device_metrics, throttle_reasons)                   \
  F(gpu_device_metrics, pcie_tx_kbps) F(gpu_device_metrics, pcie_rx_kbps)                        \
  F(gpu_device_metrics, enc_util_pct) F(gpu_device_metrics, dec_util_pct)                        \
  F(gpu_device_metrics, nvlink_tx_kbps) F(gpu_device_metrics, nvlink_rx_kbps)                    \
  F(gpu_device_metrics, ecc_corrected_total) F(gpu_device_metrics, ecc_uncorrected_total)        \
  F(gpu_device_metrics, fan_speed_pct) F(gpu_device_metrics, compute_mode)                       \
  S(gpu_pid_device) F(gpu_pid_device, timestamp_ns) F(gpu_pid_device, used_gpu_memory_bytes)     \
  F(gpu_pid_device, sm_util_pct) F(gpu_pid_device, mem_util_pct) F(gpu_pid_device, enc_util_pct) \
  F(gpu_pid_device, dec_util_pct) F(gpu_pid_device, gpu_device) F(gpu_pid_device, mig_instance)  \
  F(gpu_pid_device, pad) F(gpu_pid_device, reserved)                                             \
  S(gpu_pid) F(gpu_pid, timestamp_ns) F(gpu_pid, used_gpu_memory_total_bytes)                    \
  F(gpu_pid, sm_util_pct_max) F(gpu_pid, mem_util_pct_max) F(gpu_pid, gpu_device_primary)        \
  F(gpu_pid, device_count) F(gpu_pid, pad) F(gpu_pid, reserved)
#endif

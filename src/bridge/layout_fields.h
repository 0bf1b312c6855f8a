/* Every size and field offset of bridge_maps.h, in one list, with the values the contract
 * (../shared/bridge-contract.md) fixes: S(struct, size) and F(struct, field, offset).
 * bridge_maps.h expands it into static_asserts for C++; the BPF layout check (layout_check.bpf.c)
 * and its test expand it the same way, so the two compilers' layouts are compared entry by entry.
 */
#ifndef GPUSCOPE_BRIDGE_LAYOUT_FIELDS_H
#define GPUSCOPE_BRIDGE_LAYOUT_FIELDS_H
/* Formatting would not keep this table of X-macro calls a table. */
/* clang-format off */
#define GPU_BRIDGE_LAYOUT(S, F)                                                                        \
  S(gpu_meta, 32)                                                                                      \
  F(gpu_meta, schema_version, 0) F(gpu_meta, n_devices, 4) F(gpu_meta, last_update_boottime_ns, 8)     \
  F(gpu_meta, helper_pid, 16) F(gpu_meta, poll_interval_ms, 20) F(gpu_meta, clock_offset_ns, 24)       \
  S(gpu_device_metrics, 128)                                                                           \
  F(gpu_device_metrics, timestamp_ns, 0) F(gpu_device_metrics, sm_util_pct, 8)                         \
  F(gpu_device_metrics, mem_util_pct, 12) F(gpu_device_metrics, mem_total_bytes, 16)                   \
  F(gpu_device_metrics, mem_used_bytes, 24) F(gpu_device_metrics, mem_reserved_bytes, 32)              \
  F(gpu_device_metrics, temp_c, 40) F(gpu_device_metrics, power_mw, 44)                                \
  F(gpu_device_metrics, sm_clock_mhz, 48) F(gpu_device_metrics, mem_clock_mhz, 52)                     \
  F(gpu_device_metrics, throttle_reasons, 56) F(gpu_device_metrics, pcie_tx_kbps, 64)                  \
  F(gpu_device_metrics, pcie_rx_kbps, 72) F(gpu_device_metrics, enc_util_pct, 80)                      \
  F(gpu_device_metrics, dec_util_pct, 84) F(gpu_device_metrics, nvlink_tx_kbps, 88)                    \
  F(gpu_device_metrics, nvlink_rx_kbps, 96) F(gpu_device_metrics, ecc_corrected_total, 104)            \
  F(gpu_device_metrics, ecc_uncorrected_total, 112) F(gpu_device_metrics, fan_speed_pct, 120)          \
  F(gpu_device_metrics, compute_mode, 124)                                                             \
  S(gpu_pid_device, 40)                                                                                \
  F(gpu_pid_device, timestamp_ns, 0) F(gpu_pid_device, used_gpu_memory_bytes, 8)                       \
  F(gpu_pid_device, sm_util_pct, 16) F(gpu_pid_device, mem_util_pct, 20)                               \
  F(gpu_pid_device, enc_util_pct, 24) F(gpu_pid_device, dec_util_pct, 28)                              \
  F(gpu_pid_device, gpu_device, 32) F(gpu_pid_device, mig_instance, 33) F(gpu_pid_device, kinds, 34)     \
  F(gpu_pid_device, reserved, 36)                                                                      \
  S(gpu_pid, 32)                                                                                       \
  F(gpu_pid, timestamp_ns, 0) F(gpu_pid, used_gpu_memory_total_bytes, 8) F(gpu_pid, sm_util_pct_max, 16) \
  F(gpu_pid, mem_util_pct_max, 20) F(gpu_pid, gpu_device_primary, 24) F(gpu_pid, device_count, 25)     \
  F(gpu_pid, pad, 26) F(gpu_pid, reserved, 28)
/* clang-format on */
#endif

#include "cmd/agent/devices.h"

namespace gpuscope {

void add_device_metrics(PromSet& m, const std::vector<DeviceSample>& devs, const std::string& hostname, double age_s) {
  using T = PromSet::Type;
  struct G {
    const char* name;
    T type;
    const char* help;
    double (*get)(const gpu_device_metrics&);
  };
  static const G gauges[] = {
      {"gpuscope_gpu_utilization_ratio", T::gauge, "GPU (SM) utilization, 0-1 (NVML)",
       [](auto& d) { return d.sm_util_pct / 100.0; }},
      {"gpuscope_gpu_memory_utilization_ratio", T::gauge, "Memory controller utilization, 0-1",
       [](auto& d) { return d.mem_util_pct / 100.0; }},
      {"gpuscope_gpu_memory_total_bytes", T::gauge, "Device memory", [](auto& d) { return double(d.mem_total_bytes); }},
      {"gpuscope_gpu_memory_used_bytes", T::gauge, "Device memory used",
       [](auto& d) { return double(d.mem_used_bytes); }},
      {"gpuscope_gpu_memory_reserved_bytes", T::gauge, "Device memory reserved by the driver",
       [](auto& d) { return double(d.mem_reserved_bytes); }},
      {"gpuscope_gpu_temperature_celsius", T::gauge, "GPU temperature", [](auto& d) { return double(d.temp_c); }},
      {"gpuscope_gpu_power_watts", T::gauge, "Power draw", [](auto& d) { return d.power_mw / 1000.0; }},
      {"gpuscope_gpu_sm_clock_hertz", T::gauge, "SM clock", [](auto& d) { return d.sm_clock_mhz * 1e6; }},
      {"gpuscope_gpu_memory_clock_hertz", T::gauge, "Memory clock", [](auto& d) { return d.mem_clock_mhz * 1e6; }},
      {"gpuscope_gpu_clock_event_reasons", T::gauge,
       "NVML clock event (throttle) reasons, the bitmask as a number (nvmlClocksEventReason*)",
       [](auto& d) { return double(d.throttle_reasons); }},
      // NVML reports PCIe throughput in KB/s.
      {"gpuscope_gpu_pcie_tx_bytes_per_second", T::gauge, "PCIe transmit throughput",
       [](auto& d) { return d.pcie_tx_kbps * 1024.0; }},
      {"gpuscope_gpu_pcie_rx_bytes_per_second", T::gauge, "PCIe receive throughput",
       [](auto& d) { return d.pcie_rx_kbps * 1024.0; }},
      {"gpuscope_gpu_encoder_utilization_ratio", T::gauge, "Video encoder utilization, 0-1",
       [](auto& d) { return d.enc_util_pct / 100.0; }},
      {"gpuscope_gpu_decoder_utilization_ratio", T::gauge, "Video decoder utilization, 0-1",
       [](auto& d) { return d.dec_util_pct / 100.0; }},
      {"gpuscope_gpu_fan_speed_ratio", T::gauge, "Fan speed, 0-1", [](auto& d) { return d.fan_speed_pct / 100.0; }},
      {"gpuscope_gpu_ecc_corrected_errors_total", T::counter, "Corrected ECC errors (volatile)",
       [](auto& d) { return double(d.ecc_corrected_total); }},
      {"gpuscope_gpu_ecc_uncorrected_errors_total", T::counter, "Uncorrected ECC errors (volatile)",
       [](auto& d) { return double(d.ecc_uncorrected_total); }},
  };
  for (auto& g : gauges) {
    m.family(g.name, g.type, g.help);
    for (auto& s : devs)
      m.add(g.name, {{"gpu", std::to_string(s.gpu)}, {"UUID", s.uuid}, {"modelName", s.model}, {"Hostname", hostname}},
            g.get(s.m));
  }
  m.family("gpuscope_bridge_update_age_seconds", T::gauge, "Seconds since the bridge last updated its maps");
  m.add("gpuscope_bridge_update_age_seconds", {}, age_s);
}

}  // namespace gpuscope

#include "cmd/agent/devices.h"

#include <bpf/bpf.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/loadable.h"
#include "core/fd.h"
#include "core/map_walk.h"
#include "core/system.h"

namespace gpuscope {

namespace {

constexpr double kStaleS = 10;  // a bridge that has not ticked for this long is taken as gone

using NvmlDevice = void*;

uint64_t boottime_ns() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

BridgeReader::BridgeReader(std::string pin_dir, const std::string& nvml) : dir_(std::move(pin_dir)) {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  host_ = h;
  if (!nvml.empty()) gs_dlopen_checked(nvml.c_str(), RTLD_NOW | RTLD_LOCAL, &nvml_, nullptr, 0);
}

BridgeReader::~BridgeReader() {
  if (nvml_) dlclose(nvml_);
}

std::vector<DeviceSample> BridgeReader::read(double* age_s) {
  std::string meta_pin = dir_ + "/" + GPU_PIN_META, dev_pin = dir_ + "/" + GPU_PIN_DEVICE;
  Fd meta(bpf_obj_get(meta_pin.c_str()));
  if (meta.get() < 0)
    throw std::runtime_error("no bridge running: " + meta_pin + ": " + strerror(errno) + " (start gpuscope bridge)");
  Fd dev(bpf_obj_get(dev_pin.c_str()));
  if (dev.get() < 0) throw std::runtime_error(dev_pin + ": " + strerror(errno));
  gpu_meta gm{};
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(meta.get(), &zero, &gm) != 0) throw std::runtime_error("cannot read " + meta_pin);
  if (gm.schema_version != GPU_BRIDGE_SCHEMA_VERSION)
    throw std::runtime_error("bridge schema " + std::to_string(gm.schema_version) + ", expected " +
                             std::to_string(GPU_BRIDGE_SCHEMA_VERSION));
  double age = (static_cast<double>(boottime_ns()) - static_cast<double>(gm.last_update_boottime_ns)) / 1e9;
  if (age_s) *age_s = age;
  if (age > kStaleS)
    throw std::runtime_error(dir_ +
                             ": the bridge's maps are stale (no update for over 10 s): is gpuscope bridge "
                             "still running?");
  if (nvml_ && names_.empty()) {
    auto init = reinterpret_cast<int (*)()>(dlsym(nvml_, "nvmlInit_v2"));
    auto handle = reinterpret_cast<int (*)(unsigned, NvmlDevice*)>(dlsym(nvml_, "nvmlDeviceGetHandleByIndex_v2"));
    auto uuid = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned)>(dlsym(nvml_, "nvmlDeviceGetUUID"));
    auto name = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned)>(dlsym(nvml_, "nvmlDeviceGetName"));
    if (init && handle && init() == 0)
      for (unsigned i = 0; i < gm.n_devices && i < GPU_MAX_DEVICES; i++) {
        NvmlDevice d = nullptr;
        char u[96] = {}, n[96] = {};
        if (handle(i, &d) == 0) {
          if (uuid) uuid(d, u, sizeof u - 1);
          if (name) name(d, n, sizeof n - 1);
        }
        names_.push_back({u, n});
      }
  }
  std::vector<DeviceSample> out;
  for (uint32_t i = 0; i < gm.n_devices && i < GPU_MAX_DEVICES; i++) {
    DeviceSample s;
    s.gpu = i;
    if (bpf_map_lookup_elem(dev.get(), &i, &s.m) != 0) continue;
    if (i < names_.size()) std::tie(s.uuid, s.model) = names_[i];
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ProcessGpuSample> BridgeReader::read_processes() const {
  std::vector<ProcessGpuSample> out;
  Fd fd(bpf_obj_get((dir_ + "/" + GPU_PIN_PER_PID_PER_DEVICE).c_str()));
  if (fd.get() < 0) return out;
  for_each_entry<uint64_t, gpu_pid_device>(fd.get(), [&](uint64_t key, const gpu_pid_device& v) {
    const auto pid = static_cast<uint32_t>(key >> 32);
    // The bridge drops a process that left at its next tick: until then it is not listed here.
    std::string comm = proc_comm(static_cast<pid_t>(pid));
    if (!comm.empty()) out.push_back({pid, std::move(comm), static_cast<unsigned>(key & 0xffffffffu), v});
  });
  return out;
}

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

#include "bridge/reader.h"

#include <bpf/bpf.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "common/loadable.h"
#include "core/clock.h"
#include "core/map_walk.h"
#include "core/system.h"

namespace gpuscope {

namespace {

constexpr double kStaleS = 10;  // read(): a bridge that has not ticked for this long is taken as gone

constexpr bpf_map_type kTypes[BridgePins::kCount] = {BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_LRU_HASH,
                                                     BPF_MAP_TYPE_LRU_HASH};
constexpr uint32_t kKeySizes[BridgePins::kCount] = {4, 4, 4, 8};
constexpr uint32_t kValueSizes[BridgePins::kCount] = {sizeof(gpu_meta), sizeof(gpu_device_metrics), sizeof(gpu_pid),
                                                      sizeof(gpu_pid_device)};

// The map's id when it has the contract's layout for `map`; 0 otherwise.
uint32_t layout_id(int fd, int map) {
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return 0;
  bool ok = info.type == static_cast<uint32_t>(kTypes[map]) && info.key_size == kKeySizes[map] &&
            info.value_size == kValueSizes[map] && (map != BridgePins::kDevice || info.max_entries >= GPU_MAX_DEVICES);
  return ok ? info.id : 0;
}

bool lookup_meta(int fd, gpu_meta* m) {
  uint32_t zero = 0;
  return bpf_map_lookup_elem(fd, &zero, m) == 0;
}

using NvmlDevice = void*;

}  // namespace

uint64_t bridge_age_ms(const gpu_meta& m) {
  uint64_t now = boottime_ns();
  return now > m.last_update_boottime_ns ? (now - m.last_update_boottime_ns) / 1000000 : 0;
}

bool BridgePins::same(const BridgePins& o) const { return ok == o.ok && std::equal(ids, ids + kCount, o.ids); }

BridgeReader::BridgeReader(std::string pin_dir, const std::string& nvml) : dir_(std::move(pin_dir)) {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  host_ = h;
  if (!nvml.empty()) gs_dlopen_checked(nvml.c_str(), RTLD_NOW | RTLD_LOCAL, &nvml_, nullptr, 0);
}

BridgeReader::~BridgeReader() {
  if (nvml_) dlclose(nvml_);
}

void BridgeReader::read_names(uint32_t n_devices) {
  auto init = reinterpret_cast<int (*)()>(dlsym(nvml_, "nvmlInit_v2"));
  auto handle = reinterpret_cast<int (*)(unsigned, NvmlDevice*)>(dlsym(nvml_, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned)>(dlsym(nvml_, "nvmlDeviceGetUUID"));
  auto name = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned)>(dlsym(nvml_, "nvmlDeviceGetName"));
  if (!init || !handle || init() != 0) return;
  for (unsigned i = 0; i < n_devices && i < GPU_MAX_DEVICES; i++) {
    NvmlDevice d = nullptr;
    char u[96] = {}, n[96] = {};
    if (handle(i, &d) == 0) {
      if (uuid) uuid(d, u, sizeof u - 1);
      if (name) name(d, n, sizeof n - 1);
    }
    names_.push_back({u, n});
  }
}

std::vector<DeviceSample> BridgeReader::devices(int dev_fd, uint32_t n_devices) const {
  std::vector<DeviceSample> out;
  for (uint32_t i = 0; i < n_devices && i < GPU_MAX_DEVICES; i++) {
    DeviceSample s;
    s.gpu = i;
    if (bpf_map_lookup_elem(dev_fd, &i, &s.m) != 0) continue;
    if (i < names_.size()) std::tie(s.uuid, s.model) = names_[i];
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<DeviceSample> BridgeReader::read(double* age_s) {
  std::string meta_pin = pin(BridgePins::kMeta), dev_pin = pin(BridgePins::kDevice);
  Fd meta(bpf_obj_get(meta_pin.c_str()));
  if (meta.get() < 0)
    throw std::runtime_error("no bridge running: " + meta_pin + ": " + strerror(errno) + " (start gpuscope bridge)");
  Fd dev(bpf_obj_get(dev_pin.c_str()));
  if (dev.get() < 0) throw std::runtime_error(dev_pin + ": " + strerror(errno));
  gpu_meta gm{};
  if (!lookup_meta(meta.get(), &gm)) throw std::runtime_error("cannot read " + meta_pin);
  if (gm.schema_version != GPU_BRIDGE_SCHEMA_VERSION)
    throw std::runtime_error("bridge schema " + std::to_string(gm.schema_version) + ", expected " +
                             std::to_string(GPU_BRIDGE_SCHEMA_VERSION));
  double age = (static_cast<double>(boottime_ns()) - static_cast<double>(gm.last_update_boottime_ns)) / 1e9;
  if (age_s) *age_s = age;
  if (age > kStaleS)
    throw std::runtime_error(dir_ +
                             ": the bridge's maps are stale (no update for over 10 s): is gpuscope bridge "
                             "still running?");
  if (nvml_ && names_.empty()) read_names(gm.n_devices);
  return devices(dev.get(), gm.n_devices);
}

std::vector<ProcessGpuSample> BridgeReader::read_processes() const {
  std::vector<ProcessGpuSample> out;
  Fd fd(bpf_obj_get(pin(BridgePins::kPerPidDevice).c_str()));
  if (fd.get() < 0) return out;
  for_each_entry<uint64_t, gpu_pid_device>(fd.get(), [&](uint64_t key, const gpu_pid_device& v) {
    const auto pid = static_cast<uint32_t>(key >> 32);
    // The bridge drops a process that left at its next tick: until then it is not listed here.
    std::string comm = proc_comm(static_cast<pid_t>(pid));
    if (!comm.empty()) out.push_back({pid, std::move(comm), static_cast<unsigned>(key & 0xffffffffu), v});
  });
  return out;
}

BridgePins BridgeReader::open_pins() const {
  BridgePins p;
  p.ok = true;
  for (int i = 0; i < BridgePins::kCount; i++) {
    p.fds[i] = Fd(bpf_obj_get(pin(i).c_str()));
    p.ids[i] = layout_id(p.fds[i].get(), i);
    p.ok &= p.ids[i] != 0;
  }
  if (!p.ok) std::fill(p.ids, p.ids + BridgePins::kCount, 0u);
  return p;
}

BridgeView BridgeReader::view(const BridgePins& p, uint64_t stale_ms) {
  BridgeView v;
  if (!p.ok || !lookup_meta(p.fds[BridgePins::kMeta].get(), &v.meta) || !v.meta.last_update_boottime_ns) return v;
  v.age_ms = bridge_age_ms(v.meta);
  v.state = v.age_ms > stale_ms ? BridgeState::Stale : BridgeState::Fresh;
  return v;
}

std::vector<uint32_t> BridgeReader::pids(int per_pid_fd) { return map_keys<uint32_t>(per_pid_fd, sizeof(gpu_pid)); }

bool BridgeReader::present() const {
  Fd meta(bpf_obj_get(pin(BridgePins::kMeta).c_str())), dev(bpf_obj_get(pin(BridgePins::kDevice).c_str()));
  return meta && dev;
}

std::optional<BridgeReader::Tick> BridgeReader::next_tick(uint64_t max_age_ms) {
  Fd meta(bpf_obj_get(pin(BridgePins::kMeta).c_str()));
  Fd dev(bpf_obj_get(pin(BridgePins::kDevice).c_str()));
  Tick t;
  if (!meta || !dev || !lookup_meta(meta.get(), &t.meta) || t.meta.schema_version != GPU_BRIDGE_SCHEMA_VERSION)
    return std::nullopt;
  if (t.meta.last_update_boottime_ns == last_tick_ || bridge_age_ms(t.meta) > max_age_ms) return std::nullopt;
  last_tick_ = t.meta.last_update_boottime_ns;
  t.devices = devices(dev.get(), t.meta.n_devices);
  return t;
}

std::optional<gpu_meta> BridgeReader::read_meta(const std::string& pin_dir) {
  Fd fd(bpf_obj_get((pin_dir + "/" + GPU_PIN_META).c_str()));
  gpu_meta m{};
  if (!layout_id(fd.get(), BridgePins::kMeta) || !lookup_meta(fd.get(), &m)) return std::nullopt;
  return m;
}

}  // namespace gpuscope

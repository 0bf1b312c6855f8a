#include "bridge/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>

#include <fmt/format.h>

#include "bridge/bridge_maps.h"
#include "common/loadable.h"
#include "core/clock.h"
#include "core/system.h"

namespace gpuscope {

bool NvmlEventRecord::is_xid() const { return event_type == nvml::kEventXid; }

const char* nvml_event_name(uint64_t event_type) {
  using namespace nvml;
  switch (event_type) {
    case kEventXid: return "xid";
    case kEventSingleBitEcc: return "ecc_single_bit";
    case kEventDoubleBitEcc: return "ecc_double_bit";
    case kEventSingleBitEccStorm: return "ecc_single_bit_storm";
    case kEventDramRetirement: return "dram_retirement";
    case kEventDramRetirementFailure: return "dram_retirement_failure";
    case kEventNonFatalPoison: return "poison_non_fatal";
    case kEventFatalPoison: return "poison_fatal";
    case kEventGpuUnavailable: return "gpu_unavailable";
    case kEventGpuRecoveryAction: return "gpu_recovery_action";
    case kEventPowerSourceChange: return "power_source_change";
    case kEventPState: return "pstate";
    case kEventClock: return "clock";
    case kEventMigConfigChange: return "mig_config_change";
  }
  return "unknown";
}

}  // namespace gpuscope

namespace gpuscope::nvml {

// Binds each (function pointer, symbol) pair; a symbol the library lacks leaves its pointer null.
template <typename F, typename... Rest>
static void bind(void* dl, F& fn, const char* name, Rest&&... rest) {
  fn = reinterpret_cast<F>(dlsym(dl, name));
  if constexpr (sizeof...(rest) > 0) bind(dl, std::forward<Rest>(rest)...);
}

void check_library(const std::string& name) {
  char path[PATH_MAX], why[PATH_MAX + 128];
  // A path is checked as it is (a FIFO or a device is no library either); a bare name where
  // the loader would find it.
  const bool found = name.find('/') != std::string::npos
                         ? snprintf(path, sizeof path, "%s", name.c_str()) < static_cast<int>(sizeof path)
                         : gs_lib_resolve(name.c_str(), path, sizeof path) == 0;
  if (found && gs_lib_check(path, why, sizeof why) == GS_LIB_DAMAGED)
    throw UsageError(fmt::format("NVML not available: {}", why));
}

Library::Library(const std::string& path) {
  char why[PATH_MAX + 128];
  if (auto st = gs_dlopen_checked(path.c_str(), RTLD_NOW | RTLD_LOCAL, &dl_, why, sizeof why); st != GS_LIB_OK)
    throw UsageError(st == GS_LIB_NOT_LOADED ? fmt::format("NVML not available: cannot load {}: {}", path, why)
                                             : fmt::format("NVML not available: {}", why));
  auto& a = api_;
  bind(dl_, a.init, "nvmlInit_v2", a.shutdown, "nvmlShutdown", a.error_string, "nvmlErrorString", a.count,
       "nvmlDeviceGetCount_v2", a.handle, "nvmlDeviceGetHandleByIndex_v2");
  if (!a.init || !a.count || !a.handle) {
    dlclose(dl_);
    dl_ = nullptr;
    throw UsageError(
        fmt::format("NVML not available: {} does not export nvmlInit_v2, nvmlDeviceGetCount_v2 and "
                    "nvmlDeviceGetHandleByIndex_v2",
                    path));
  }
  bind(dl_, a.utilization, "nvmlDeviceGetUtilizationRates", a.memory, "nvmlDeviceGetMemoryInfo", a.memory_v2,
       "nvmlDeviceGetMemoryInfo_v2", a.temperature, "nvmlDeviceGetTemperature", a.power, "nvmlDeviceGetPowerUsage",
       a.clock, "nvmlDeviceGetClockInfo", a.event_reasons, "nvmlDeviceGetCurrentClocksEventReasons", a.pcie,
       "nvmlDeviceGetPcieThroughput", a.encoder, "nvmlDeviceGetEncoderUtilization", a.decoder,
       "nvmlDeviceGetDecoderUtilization", a.fan, "nvmlDeviceGetFanSpeed", a.compute_mode, "nvmlDeviceGetComputeMode",
       a.ecc, "nvmlDeviceGetTotalEccErrors", a.samples, "nvmlDeviceGetSamples", a.processes,
       "nvmlDeviceGetComputeRunningProcesses_v3", a.process_utilization, "nvmlDeviceGetProcessUtilization",
       a.graphics_processes, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  if (!a.event_reasons) bind(dl_, a.event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(dl_, a.uuid, "nvmlDeviceGetUUID", a.pci_info, "nvmlDeviceGetPciInfo_v3", a.event_set_create,
       "nvmlEventSetCreate", a.supported_event_types, "nvmlDeviceGetSupportedEventTypes", a.register_events,
       "nvmlDeviceRegisterEvents", a.event_set_wait, "nvmlEventSetWait_v2", a.event_set_free, "nvmlEventSetFree");
  if (!a.pci_info) bind(dl_, a.pci_info, "nvmlDeviceGetPciInfo_v2");

  auto fail = [&](const char* what, Return r) {
    std::string msg = a.error_string ? a.error_string(r) : "";
    dlclose(dl_);
    dl_ = nullptr;
    return UsageError(fmt::format("NVML not available: {} failed with {}{}{}", what, r, msg.empty() ? "" : ": ", msg));
  };
  if (Return r = a.init(); r != kSuccess) throw fail("nvmlInit_v2", r);
  unsigned n = 0;
  if (Return r = a.count(&n); r != kSuccess) {
    if (a.shutdown) a.shutdown();
    throw fail("nvmlDeviceGetCount_v2", r);
  }
  for (unsigned i = 0; i < n && i < GPU_MAX_DEVICES; i++) {  // what gpu_device holds
    Device d{};
    if (Return r = a.handle(i, &d); r != kSuccess) {
      if (a.shutdown) a.shutdown();
      throw fail("nvmlDeviceGetHandleByIndex_v2", r);
    }
    devices_.push_back(d);
  }
}

Library::~Library() {
  if (!dl_) return;
  if (api_.shutdown) api_.shutdown();
  dlclose(dl_);
}

void Library::processes(Device d, std::vector<Proc>& out) {
  out.clear();
  // One list, each pid once with its memory summed over MIG instances; then merged into `out`.
  auto read = [&](Return (*list)(Device, unsigned*, ProcessInfo*), uint16_t kind) {
    if (!list) return;
    unsigned n = 0;
    Return r = kInsufficientSize;
    // The list can grow between the size query and the read: retry with the new size.
    for (int attempt = 0; attempt < 4; attempt++) {
      n = static_cast<unsigned>(infos_.size());
      r = list(d, &n, infos_.data());
      if (r != kInsufficientSize) break;
      infos_.resize(n + 16);
    }
    if (r != kSuccess) return;
    one_.clear();
    for (unsigned i = 0; i < n; i++) {
      auto& p = infos_[i];
      uint64_t mem = p.usedGpuMemory == kValueNotAvailable ? 0 : p.usedGpuMemory;
      bool merged = false;
      for (auto& q : one_)
        if (q.pid == p.pid) q.used_bytes += mem, merged = true;
      if (!merged) one_.push_back({p.pid, mem, kind});
    }
    // A process with both kinds of context is in both lists, each with its whole memory.
    for (auto& p : one_) {
      bool merged = false;
      for (auto& q : out)
        if (q.pid == p.pid) q.used_bytes = std::max(q.used_bytes, p.used_bytes), q.kinds |= kind, merged = true;
      if (!merged) out.push_back(p);
    }
  };
  read(api_.processes, GPU_PROC_COMPUTE);
  read(api_.graphics_processes, GPU_PROC_GRAPHICS);
}

void Library::utilization_samples(Device d, uint64_t last_seen_us, std::vector<Sample>& out, int* value_type) {
  out.clear();
  if (!api_.samples) return;
  unsigned n = 0;
  if (api_.samples(d, kGpuUtilizationSamples, last_seen_us, value_type, &n, nullptr) != kSuccess || n == 0) return;
  out.resize(n);
  if (api_.samples(d, kGpuUtilizationSamples, last_seen_us, value_type, &n, out.data()) != kSuccess) n = 0;
  out.resize(n);
}

Return Library::process_utilization(Device d, uint64_t last_seen_us, std::vector<ProcessUtilizationSample>& out) {
  out.clear();
  if (!api_.process_utilization) return kNotSupported;
  // The size query answers INSUFFICIENT_SIZE with the count (SUCCESS on some drivers), and
  // NOT_FOUND when nothing is newer than last_seen_us. The count can grow before the read.
  unsigned n = 0;
  Return r = api_.process_utilization(d, nullptr, &n, last_seen_us);
  for (int attempt = 0; attempt < 4 && (r == kInsufficientSize || r == kSuccess) && n > 0; attempt++) {
    out.resize(n + 8);
    n = static_cast<unsigned>(out.size());
    r = api_.process_utilization(d, out.data(), &n, last_seen_us);
    if (r == kSuccess) {
      out.resize(std::min<size_t>(n, out.size()));
      return kSuccess;
    }
  }
  out.clear();
  return r == kNotFound || r == kInsufficientSize ? kSuccess : r;
}

namespace {

std::string error_text(const Api& a, Return r) {
  const char* msg = a.error_string ? a.error_string(r) : nullptr;
  return msg && *msg ? fmt::format("{}: {}", r, msg) : std::to_string(r);
}

}  // namespace

Events::Events(const Library& lib, bool verbose) : lib_(lib) {
  const Api& a = lib.api();
  const auto& devs = lib.devices();
  // The names are read here, once, so that a wait never makes other calls into NVML.
  for (unsigned i = 0; i < devs.size(); i++) {
    NvmlDeviceId id{i};
    char uuid[96] = {};
    if (a.uuid && a.uuid(devs[i], uuid, sizeof uuid - 1) == kSuccess) id.uuid = uuid;
    // NVML_DEVICE_PCI_BUS_ID_FMT is "%08X:%02X:%02X.0"; the kernel log and sysfs write "%04x:%02x:%02x.0".
    if (PciInfo pci{}; a.pci_info && a.pci_info(devs[i], &pci) == kSuccess)
      id.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", pci.domain, pci.bus, pci.device);
    ids_.push_back(std::move(id));
  }
  constexpr const char* kNotReported = "Xid, ECC and other critical GPU events from NVML are not reported";
  const char* missing = !a.event_set_create  ? "nvmlEventSetCreate"
                        : !a.register_events ? "nvmlDeviceRegisterEvents"
                        : !a.event_set_wait  ? "nvmlEventSetWait_v2"
                        : !a.event_set_free  ? "nvmlEventSetFree"
                                             : nullptr;
  if (missing) {
    fprintf(stderr, "gpuscope: NVML does not export %s; %s\n", missing, kNotReported);
    return;
  }
  if (Return r = a.event_set_create(&set_); r != kSuccess) {
    set_ = nullptr;
    fprintf(stderr, "gpuscope: nvmlEventSetCreate failed with %s; %s\n", error_text(a, r).c_str(), kNotReported);
    return;
  }
  std::string unsupported, why;
  size_t registered = 0;
  for (unsigned i = 0; i < devs.size(); i++) {
    unsigned long long supported = kCriticalEvents;
    Return r = a.supported_event_types ? a.supported_event_types(devs[i], &supported) : kSuccess;
    uint64_t types = supported & kCriticalEvents;
    if (r == kSuccess && types == 0) r = kNotSupported;
    if (r == kSuccess) r = a.register_events(devs[i], types, set_);
    if (r != kSuccess) {
      unsupported += fmt::format("{}{}", unsupported.empty() ? "" : ", ", i);
      if (why.empty()) why = error_text(a, r);
      continue;
    }
    registered++;
    if (verbose) {
      std::string names;
      for (uint64_t bit = 1; bit; bit <<= 1)
        if (types & bit) names += fmt::format("{}{}", names.empty() ? "" : ", ", nvml_event_name(bit));
      fprintf(stderr, "gpuscope: device %u: NVML events registered: %s\n", i, names.c_str());
    }
  }
  if (!unsupported.empty())
    fprintf(stderr, "gpuscope: NVML events not supported on device %s (%s); %s there\n", unsupported.c_str(),
            why.c_str(), kNotReported);
  if (registered == 0) {
    a.event_set_free(set_);
    set_ = nullptr;
  }
}

Events::~Events() {
  if (set_) lib_.api().event_set_free(set_);
}

bool Events::wait(unsigned timeout_ms, NvmlEventRecord& out) {
  if (!set_) return false;
  const Api& a = lib_.api();
  EventData e{};
  Return r = a.event_set_wait(set_, &e, timeout_ms);
  if (r == kTimeout) return false;
  if (r != kSuccess) {
    if (std::find(said_.begin(), said_.end(), r) == said_.end()) {
      said_.push_back(r);
      fprintf(stderr, "gpuscope: nvmlEventSetWait_v2 failed with %s; still waiting for NVML events\n",
              error_text(a, r).c_str());
    }
    usleep(timeout_ms * 1000);
    return false;
  }
  const auto& devs = lib_.devices();
  auto it = std::find(devs.begin(), devs.end(), e.device);
  if (it == devs.end()) return false;  // registered on none of ours: not attributable
  out.ts_ns = realtime_ns();
  out.event_type = e.eventType;
  out.data = e.eventData;
  out.device = static_cast<unsigned>(it - devs.begin());
  out.uuid = ids_[out.device].uuid;
  out.pci_bus_id = ids_[out.device].pci_bus_id;
  out.gpu_instance_id = e.gpuInstanceId == ~0u ? -1 : static_cast<int>(e.gpuInstanceId);
  out.compute_instance_id = e.computeInstanceId == ~0u ? -1 : static_cast<int>(e.computeInstanceId);
  return true;
}

}  // namespace gpuscope::nvml

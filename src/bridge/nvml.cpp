#include "bridge/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <utility>

#include <fmt/format.h>

#include "bridge/bridge_maps.h"
#include "common/loadable.h"
#include "core/system.h"

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

}  // namespace gpuscope::nvml

#include "bridge/nvml.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "bridge/bridge_maps.h"
#include "core/system.h"

namespace gpuscope::nvml {

template <typename F>
static void bind(void* dl, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(dl, name));
}

// The dynamic loader maps each segment from the file and touches it: a segment that runs
// past the end of a truncated file kills the process with SIGBUS inside dlopen. A bare name
// is left to the loader's search path.
static void check_shared_object(const std::string& path) {
  if (path.find('/') == std::string::npos) return;
  auto refuse = [&](const std::string& why) { return UsageError(fmt::format("NVML not available: {} {}", path, why)); };
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw refuse(fmt::format("cannot be opened: {}", strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw refuse("is not a regular file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  Elf64_Ehdr eh{};
  if (pread(fd, &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    throw refuse("is not an ELF shared object");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64 ||
      eh.e_type != ET_DYN)
    throw refuse("is not an x86-64 ELF shared object");
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phoff > size ||
      uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    throw refuse(fmt::format("is truncated or damaged: its program headers are not within its {} bytes", size));
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph{};
    if (pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph)) != static_cast<ssize_t>(sizeof ph))
      throw refuse("cannot be read");
    if (ph.p_filesz && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
      throw refuse(
          fmt::format("is truncated: segment {} ends at byte {}, the file has {}", i, ph.p_offset + ph.p_filesz, size));
  }
}

Library::Library(const std::string& path) {
  check_shared_object(path);
  dl_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl_) throw UsageError(fmt::format("NVML not available: cannot load {}: {}", path, dlerror()));
  auto& a = api_;
  bind(dl_, a.init, "nvmlInit_v2");
  bind(dl_, a.shutdown, "nvmlShutdown");
  bind(dl_, a.error_string, "nvmlErrorString");
  bind(dl_, a.count, "nvmlDeviceGetCount_v2");
  bind(dl_, a.handle, "nvmlDeviceGetHandleByIndex_v2");
  if (!a.init || !a.count || !a.handle) {
    dlclose(dl_);
    dl_ = nullptr;
    throw UsageError(
        fmt::format("NVML not available: {} does not export nvmlInit_v2, nvmlDeviceGetCount_v2 and "
                    "nvmlDeviceGetHandleByIndex_v2",
                    path));
  }
  bind(dl_, a.utilization, "nvmlDeviceGetUtilizationRates");
  bind(dl_, a.memory, "nvmlDeviceGetMemoryInfo");
  bind(dl_, a.memory_v2, "nvmlDeviceGetMemoryInfo_v2");
  bind(dl_, a.temperature, "nvmlDeviceGetTemperature");
  bind(dl_, a.power, "nvmlDeviceGetPowerUsage");
  bind(dl_, a.clock, "nvmlDeviceGetClockInfo");
  bind(dl_, a.event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!a.event_reasons) bind(dl_, a.event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(dl_, a.pcie, "nvmlDeviceGetPcieThroughput");
  bind(dl_, a.encoder, "nvmlDeviceGetEncoderUtilization");
  bind(dl_, a.decoder, "nvmlDeviceGetDecoderUtilization");
  bind(dl_, a.fan, "nvmlDeviceGetFanSpeed");
  bind(dl_, a.compute_mode, "nvmlDeviceGetComputeMode");
  bind(dl_, a.ecc, "nvmlDeviceGetTotalEccErrors");
  bind(dl_, a.samples, "nvmlDeviceGetSamples");
  bind(dl_, a.processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  bind(dl_, a.process_utilization, "nvmlDeviceGetProcessUtilization");

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
  if (!api_.processes) return;
  unsigned n = static_cast<unsigned>(infos_.size());
  Return r;
  // The list can grow between the size query and the read: retry with the new size.
  for (int attempt = 0; attempt < 4; attempt++) {
    n = static_cast<unsigned>(infos_.size());
    r = api_.processes(d, &n, infos_.data());
    if (r != kInsufficientSize) break;
    infos_.resize(n + 16);
  }
  if (r != kSuccess) return;
  for (unsigned i = 0; i < n; i++) {
    auto& p = infos_[i];
    uint64_t mem = p.usedGpuMemory == kValueNotAvailable ? 0 : p.usedGpuMemory;
    bool merged = false;
    for (auto& q : out)
      if (q.pid == p.pid) q.used_bytes += mem, merged = true;
    if (!merged) out.push_back({p.pid, mem});
  }
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

#pragma once
// NVML, loaded with dlopen: the build machine has no NVML, and a GPU host's driver decides
// which entry points exist. Types are declared here from NVML's documented C API.
#include <cstdint>
#include <string>
#include <vector>

namespace gpuscope::nvml {

using Return = int;  // nvmlReturn_t
using Device = struct nvmlDevice_st*;
constexpr Return kSuccess = 0;
constexpr Return kNotSupported = 3;
constexpr Return kNotFound = 6;
constexpr Return kInsufficientSize = 7;
constexpr unsigned long long kValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE

struct Utilization {
  unsigned gpu, memory;
};
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned kMemoryV2Version = sizeof(MemoryV2) | (2u << 24);  // nvmlMemory_v2
union Value {
  double dVal;
  int siVal;
  unsigned uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
};
struct Sample {                  // nvmlSample_t
  unsigned long long timeStamp;  // CLOCK_REALTIME, µs
  Value sampleValue;
};
struct ProcessInfo {  // nvmlProcessInfo_t of the _v3 entry point (24 bytes)
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
};
struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned pid;
  unsigned long long timeStamp;  // CLOCK_REALTIME, µs
  unsigned smUtil, memUtil, encUtil, decUtil;
};
static_assert(sizeof(ProcessUtilizationSample) == 32);
static_assert(sizeof(ProcessInfo) == 24 && sizeof(Sample) == 16 && sizeof(MemoryV2) == 40);
enum ValueType { kDouble = 0, kUInt = 1, kULong = 2, kULongLong = 3, kSLongLong = 4, kSInt = 5 };
constexpr int kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES

struct Api {
  Return (*init)();
  Return (*shutdown)();
  const char* (*error_string)(Return);
  Return (*count)(unsigned*);
  Return (*handle)(unsigned, Device*);
  // Optional: a driver that lacks one leaves its fields 0.
  Return (*utilization)(Device, Utilization*);
  Return (*memory)(Device, Memory*);
  Return (*memory_v2)(Device, MemoryV2*);
  Return (*temperature)(Device, int sensor, unsigned*);
  Return (*power)(Device, unsigned*);
  Return (*clock)(Device, int type, unsigned*);
  Return (*event_reasons)(Device, unsigned long long*);
  Return (*pcie)(Device, int counter, unsigned*);
  Return (*encoder)(Device, unsigned*, unsigned*);
  Return (*decoder)(Device, unsigned*, unsigned*);
  Return (*fan)(Device, unsigned*);
  Return (*compute_mode)(Device, int*);
  Return (*ecc)(Device, int error_type, int counter_type, unsigned long long*);
  Return (*samples)(Device, int type, unsigned long long last_seen, int* value_type, unsigned* count, Sample*);
  Return (*processes)(Device, unsigned*, ProcessInfo*);
  Return (*graphics_processes)(Device, unsigned*, ProcessInfo*);
  Return (*process_utilization)(Device, ProcessUtilizationSample*, unsigned* count, unsigned long long last_seen);
};

struct Proc {
  uint32_t pid;
  uint64_t used_bytes;  // 0 when NVML cannot say
  uint16_t kinds;       // GPU_PROC_COMPUTE | GPU_PROC_GRAPHICS
};

// Throws UsageError when the file `name` resolves to is there but damaged (truncated, not ELF):
// loading it would kill the process. One not found is no error here.
void check_library(const std::string& name);

// The library and its handles; the constructor throws UsageError when NVML is unusable.
class Library {
 public:
  explicit Library(const std::string& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const Api& api() const { return api_; }
  const std::vector<Device>& devices() const { return devices_; }
  // Compute and graphics processes on a device, each pid once with the kinds of list it is in
  // (memory summed over MIG instances of one pid, the larger of the two lists' figures).
  void processes(Device d, std::vector<Proc>& out);
  // Utilization samples newer than last_seen_us; empty when unsupported.
  void utilization_samples(Device d, uint64_t last_seen_us, std::vector<Sample>& out, int* value_type);
  // Per-process utilization samples newer than last_seen_us. Returns NVML's answer: kSuccess
  // (out may be empty), kNotSupported, or another failure (out empty).
  Return process_utilization(Device d, uint64_t last_seen_us, std::vector<ProcessUtilizationSample>& out);

 private:
  void* dl_ = nullptr;
  Api api_{};
  std::vector<Device> devices_;
  std::vector<ProcessInfo> infos_;
  std::vector<Proc> one_;  // one list's processes, merged
};

}  // namespace gpuscope::nvml

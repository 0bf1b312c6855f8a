#pragma once
// NVML, loaded with dlopen: the build machine has no NVML, and a GPU host's driver decides
// which entry points exist. Types are declared here from NVML's documented C API (the event API
// and nvmlPciInfo_t from nvml.h of NVML API version 13, as NVIDIA/go-nvml's gen/nvml/nvml.h
// carries it).
#include <cstdint>
#include <string>
#include <vector>

namespace gpuscope {

// One NVML event as the bridge hands it on (docs/bridge.md, "NVML events").
struct NvmlEventRecord {
  uint64_t ts_ns = 0;            // CLOCK_REALTIME when the bridge received it: NVML stamps no time
  uint64_t event_type = 0;       // one nvmlEventType* bit
  uint64_t data = 0;             // NVML's eventData: the Xid of an Xid event (999: an unknown Xid), else 0
  unsigned device = 0;           // NVML's device index
  std::string uuid;              // "GPU-…"
  std::string pci_bus_id;        // "0000:3b:00.0": lower case, the kernel log's form
  int gpu_instance_id = -1;      // MIG attribution of an Xid, -1 without
  int compute_instance_id = -1;  // likewise
  bool is_xid() const;
};

// A GPU as NVML names it, read once when the bridge starts.
struct NvmlDeviceId {
  unsigned index = 0;
  std::string uuid;        // "" where NVML cannot say
  std::string pci_bus_id;  // as NvmlEventRecord's
};

// "xid", "ecc_double_bit", …: the name `--json` prints for an nvmlEventType* bit.
const char* nvml_event_name(uint64_t event_type);

}  // namespace gpuscope

namespace gpuscope::nvml {

using Return = int;  // nvmlReturn_t
using Device = struct nvmlDevice_st*;
constexpr Return kSuccess = 0;
constexpr Return kNotSupported = 3;
constexpr Return kNotFound = 6;
constexpr Return kInsufficientSize = 7;
constexpr Return kTimeout = 10;
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
using EventSet = struct nvmlEventSet_st*;
struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long eventType, eventData;
  unsigned gpuInstanceId, computeInstanceId;  // 0xFFFFFFFF: not attributable to one
};
struct PciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
static_assert(sizeof(EventData) == 32 && sizeof(PciInfo) == 68);
// nvmlEventType* bits.
constexpr uint64_t kEventSingleBitEcc = 0x1, kEventDoubleBitEcc = 0x2, kEventPState = 0x4, kEventXid = 0x8,
                   kEventClock = 0x10, kEventPowerSourceChange = 0x80, kEventMigConfigChange = 0x100,
                   kEventSingleBitEccStorm = 0x200, kEventDramRetirement = 0x400, kEventDramRetirementFailure = 0x800,
                   kEventNonFatalPoison = 0x1000, kEventFatalPoison = 0x2000, kEventGpuUnavailable = 0x4000,
                   kEventGpuRecoveryAction = 0x8000;
// Registered where the device supports them: each says a fault of the GPU, its memory or its
// power that a job or the node must act on, and each is rare. Left out: single-bit ECC (corrected,
// and counted in ecc_corrected_total every tick), PState and clock changes (routine whenever load
// changes; clock events are Kepler-only, and throttling is throttle_reasons every tick), MIG
// configuration changes (an operator's act, not a fault).
constexpr uint64_t kCriticalEvents = kEventXid | kEventDoubleBitEcc | kEventSingleBitEccStorm | kEventDramRetirement |
                                     kEventDramRetirementFailure | kEventNonFatalPoison | kEventFatalPoison |
                                     kEventGpuUnavailable | kEventGpuRecoveryAction | kEventPowerSourceChange;
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
  Return (*uuid)(Device, char*, unsigned length);
  Return (*pci_info)(Device, PciInfo*);  // nvmlDeviceGetPciInfo_v3, else _v2 (the same struct)
  Return (*event_set_create)(EventSet*);
  Return (*supported_event_types)(Device, unsigned long long*);
  Return (*register_events)(Device, unsigned long long types, EventSet);
  Return (*event_set_wait)(EventSet, EventData*, unsigned timeout_ms);  // nvmlEventSetWait_v2
  Return (*event_set_free)(EventSet);
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

// The critical events (kCriticalEvents) of every device that supports them, in one event set of
// `lib`'s NVML. Never throws: what cannot be registered is said once on stderr and the rest of
// the bridge goes on. wait() may run on a thread of its own while the owner ticks.
class Events {
 public:
  Events(const Library& lib, bool verbose);
  ~Events();
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;

  bool active() const { return set_ != nullptr; }
  const std::vector<NvmlDeviceId>& devices() const { return ids_; }
  // The next event, waiting at most timeout_ms; false when none came. A failing wait (a GPU
  // fallen off the bus) is said once per kind of failure, and sleeps timeout_ms not to spin.
  bool wait(unsigned timeout_ms, NvmlEventRecord& out);

 private:
  const Library& lib_;
  EventSet set_ = nullptr;
  std::vector<NvmlDeviceId> ids_;  // by device index, read once: they never change
  std::vector<Return> said_;       // wait failures already said
};

}  // namespace gpuscope::nvml

#include "ioctl/decode.h"

#include <sstream>

namespace gpuscope {

namespace {

struct Named {
  uint32_t value;
  const char* name;
};

// NVIDIA open-gpu-kernel-modules: nv_escape.h (resource manager escapes) and
// nv-ioctl-numbers.h (NV_IOCTL_BASE 200 onward).
constexpr Named kNvEscapes[] = {
    {0x27, "NV_ESC_RM_ALLOC_MEMORY"},
    {0x28, "NV_ESC_RM_ALLOC_OBJECT"},
    {0x29, "NV_ESC_RM_FREE"},
    {0x2A, "NV_ESC_RM_CONTROL"},
    {0x2B, "NV_ESC_RM_ALLOC"},
    {0x32, "NV_ESC_RM_CONFIG_GET"},
    {0x33, "NV_ESC_RM_CONFIG_SET"},
    {0x34, "NV_ESC_RM_DUP_OBJECT"},
    {0x35, "NV_ESC_RM_SHARE"},
    {0x37, "NV_ESC_RM_CONFIG_GET_EX"},
    {0x38, "NV_ESC_RM_CONFIG_SET_EX"},
    {0x39, "NV_ESC_RM_I2C_ACCESS"},
    {0x41, "NV_ESC_RM_IDLE_CHANNELS"},
    {0x4A, "NV_ESC_RM_VID_HEAP_CONTROL"},
    {0x4D, "NV_ESC_RM_ACCESS_REGISTRY"},
    {0x4E, "NV_ESC_RM_MAP_MEMORY"},
    {0x4F, "NV_ESC_RM_UNMAP_MEMORY"},
    {0x52, "NV_ESC_RM_GET_EVENT_DATA"},
    {0x54, "NV_ESC_RM_ALLOC_CONTEXT_DMA2"},
    {0x56, "NV_ESC_RM_ADD_VBLANK_CALLBACK"},
    {0x57, "NV_ESC_RM_MAP_MEMORY_DMA"},
    {0x58, "NV_ESC_RM_UNMAP_MEMORY_DMA"},
    {0x59, "NV_ESC_RM_BIND_CONTEXT_DMA"},
    {0x5C, "NV_ESC_RM_EXPORT_OBJECT_TO_FD"},
    {0x5D, "NV_ESC_RM_IMPORT_OBJECT_FROM_FD"},
    {0x5E, "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO"},
    {200, "NV_ESC_CARD_INFO"},
    {201, "NV_ESC_REGISTER_FD"},
    {206, "NV_ESC_ALLOC_OS_EVENT"},
    {207, "NV_ESC_FREE_OS_EVENT"},
    {209, "NV_ESC_STATUS_CODE"},
    {210, "NV_ESC_CHECK_VERSION_STR"},
    {211, "NV_ESC_IOCTL_XFER_CMD"},
    {212, "NV_ESC_ATTACH_GPUS_TO_FD"},
    {213, "NV_ESC_QUERY_DEVICE_INTR"},
    {214, "NV_ESC_SYS_PARAMS"},
    {217, "NV_ESC_EXPORT_TO_DMABUF_FD"},
    {218, "NV_ESC_WAIT_OPEN_COMPLETE"},
};

// nvidia-uvm: uvm_linux_ioctl.h and uvm_ioctl.h (UVM_IOCTL_BASE(i) is i on Linux).
constexpr Named kUvm[] = {
    {0x30000001, "UVM_INITIALIZE"},
    {0x30000002, "UVM_DEINITIALIZE"},
    {23, "UVM_CREATE_RANGE_GROUP"},
    {24, "UVM_DESTROY_RANGE_GROUP"},
    {25, "UVM_REGISTER_GPU_VASPACE"},
    {26, "UVM_UNREGISTER_GPU_VASPACE"},
    {27, "UVM_REGISTER_CHANNEL"},
    {28, "UVM_UNREGISTER_CHANNEL"},
    {29, "UVM_ENABLE_PEER_ACCESS"},
    {30, "UVM_DISABLE_PEER_ACCESS"},
    {31, "UVM_SET_RANGE_GROUP"},
    {33, "UVM_MAP_EXTERNAL_ALLOCATION"},
    {34, "UVM_FREE"},
    {35, "UVM_MEM_MAP"},
    {36, "UVM_DEBUG_ACCESS_MEMORY"},
    {37, "UVM_REGISTER_GPU"},
    {38, "UVM_UNREGISTER_GPU"},
    {39, "UVM_PAGEABLE_MEM_ACCESS"},
    {40, "UVM_PREVENT_MIGRATION_RANGE_GROUPS"},
    {41, "UVM_ALLOW_MIGRATION_RANGE_GROUPS"},
    {42, "UVM_SET_PREFERRED_LOCATION"},
    {43, "UVM_UNSET_PREFERRED_LOCATION"},
    {44, "UVM_ENABLE_READ_DUPLICATION"},
    {45, "UVM_DISABLE_READ_DUPLICATION"},
    {46, "UVM_SET_ACCESSED_BY"},
    {47, "UVM_UNSET_ACCESSED_BY"},
    {51, "UVM_MIGRATE"},
    {53, "UVM_MIGRATE_RANGE_GROUP"},
    {54, "UVM_ENABLE_SYSTEM_WIDE_ATOMICS"},
    {55, "UVM_DISABLE_SYSTEM_WIDE_ATOMICS"},
    {56, "UVM_TOOLS_INIT_EVENT_TRACKER"},
    {57, "UVM_TOOLS_SET_NOTIFICATION_THRESHOLD"},
    {58, "UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS"},
    {59, "UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS"},
    {60, "UVM_TOOLS_ENABLE_COUNTERS"},
    {61, "UVM_TOOLS_DISABLE_COUNTERS"},
    {62, "UVM_TOOLS_READ_PROCESS_MEMORY"},
    {63, "UVM_TOOLS_WRITE_PROCESS_MEMORY"},
    {64, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE"},
    {65, "UVM_MAP_DYNAMIC_PARALLELISM_REGION"},
    {66, "UVM_UNMAP_EXTERNAL"},
    {67, "UVM_TOOLS_FLUSH_EVENTS"},
    {68, "UVM_ALLOC_SEMAPHORE_POOL"},
    {69, "UVM_CLEAN_UP_ZOMBIE_RESOURCES"},
    {70, "UVM_PAGEABLE_MEM_ACCESS_ON_GPU"},
    {71, "UVM_POPULATE_PAGEABLE"},
    {72, "UVM_VALIDATE_VA_RANGE"},
    {73, "UVM_CREATE_EXTERNAL_RANGE"},
    {74, "UVM_MAP_EXTERNAL_SPARSE"},
    {75, "UVM_MM_INITIALIZE"},
    {76, "UVM_TOOLS_INIT_EVENT_TRACKER_V2"},
    {77, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2"},
    {78, "UVM_ALLOC_DEVICE_P2P"},
};

template <size_t N>
const char* lookup(const Named (&t)[N], uint32_t v) {
  for (auto& e : t)
    if (e.value == v) return e.name;
  return nullptr;
}

}  // namespace

const char* ioc_dir_name(unsigned dir) {
  static const char* const names[] = {"none", "w", "r", "rw"};
  return names[dir & 3];
}

IoctlRequest decode_ioctl(unsigned major, unsigned uvm_major, uint32_t request) {
  IoctlRequest r;
  if (uvm_major && major == uvm_major) {
    if (const char* n = lookup(kUvm, request)) r.name = n;
    return r;
  }
  r.ioc = true;
  r.nr = request & 0xff;
  r.type = (request >> 8) & 0xff;
  r.size = (request >> 16) & 0x3fff;
  r.dir = request >> 30;
  if (major == 195 && r.type == 'F')
    if (const char* n = lookup(kNvEscapes, r.nr)) r.name = n;
  return r;
}

std::string nv_device_name(unsigned major, unsigned minor, unsigned uvm_major) {
  if (uvm_major && major == uvm_major)
    return minor == 0 ? "nvidia-uvm" : minor == 1 ? "nvidia-uvm-tools" : "nvidia-uvm?";
  if (major != 195) return "?";
  if (minor == 255) return "nvidiactl";
  if (minor == 254) return "nvidia-modeset";
  return "nvidia" + std::to_string(minor);
}

unsigned parse_uvm_major(const std::string& proc_devices) {
  std::istringstream in(proc_devices);
  std::string line;
  bool chr = false;
  while (std::getline(in, line)) {
    if (line.rfind("Character devices", 0) == 0)
      chr = true;
    else if (line.rfind("Block devices", 0) == 0)
      chr = false;
    unsigned major = 0;
    char name[64] = {};
    if (chr && sscanf(line.c_str(), " %u %63s", &major, name) == 2 && std::string(name) == "nvidia-uvm") return major;
  }
  return 0;
}

}  // namespace gpuscope

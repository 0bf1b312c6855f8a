#include "ioctl/decode.h"

#include <cstdio>
#include <sstream>

#include "ioctl/ioctl.h"

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

// Linux include/uapi/drm/drm.h: the generic DRM requests (type 'd'), by number. 0x40-0x9f
// are each driver's own (DRM_COMMAND_BASE to DRM_COMMAND_END).
constexpr Named kDrm[] = {
    {0x00, "DRM_IOCTL_VERSION"},
    {0x01, "DRM_IOCTL_GET_UNIQUE"},
    {0x02, "DRM_IOCTL_GET_MAGIC"},
    {0x03, "DRM_IOCTL_IRQ_BUSID"},
    {0x04, "DRM_IOCTL_GET_MAP"},
    {0x05, "DRM_IOCTL_GET_CLIENT"},
    {0x06, "DRM_IOCTL_GET_STATS"},
    {0x07, "DRM_IOCTL_SET_VERSION"},
    {0x08, "DRM_IOCTL_MODESET_CTL"},
    {0x09, "DRM_IOCTL_GEM_CLOSE"},
    {0x0A, "DRM_IOCTL_GEM_FLINK"},
    {0x0B, "DRM_IOCTL_GEM_OPEN"},
    {0x0C, "DRM_IOCTL_GET_CAP"},
    {0x0D, "DRM_IOCTL_SET_CLIENT_CAP"},
    {0x10, "DRM_IOCTL_SET_UNIQUE"},
    {0x11, "DRM_IOCTL_AUTH_MAGIC"},
    {0x12, "DRM_IOCTL_BLOCK"},
    {0x13, "DRM_IOCTL_UNBLOCK"},
    {0x14, "DRM_IOCTL_CONTROL"},
    {0x15, "DRM_IOCTL_ADD_MAP"},
    {0x16, "DRM_IOCTL_ADD_BUFS"},
    {0x17, "DRM_IOCTL_MARK_BUFS"},
    {0x18, "DRM_IOCTL_INFO_BUFS"},
    {0x19, "DRM_IOCTL_MAP_BUFS"},
    {0x1A, "DRM_IOCTL_FREE_BUFS"},
    {0x1B, "DRM_IOCTL_RM_MAP"},
    {0x1C, "DRM_IOCTL_SET_SAREA_CTX"},
    {0x1D, "DRM_IOCTL_GET_SAREA_CTX"},
    {0x1E, "DRM_IOCTL_SET_MASTER"},
    {0x1F, "DRM_IOCTL_DROP_MASTER"},
    {0x20, "DRM_IOCTL_ADD_CTX"},
    {0x21, "DRM_IOCTL_RM_CTX"},
    {0x22, "DRM_IOCTL_MOD_CTX"},
    {0x23, "DRM_IOCTL_GET_CTX"},
    {0x24, "DRM_IOCTL_SWITCH_CTX"},
    {0x25, "DRM_IOCTL_NEW_CTX"},
    {0x26, "DRM_IOCTL_RES_CTX"},
    {0x27, "DRM_IOCTL_ADD_DRAW"},
    {0x28, "DRM_IOCTL_RM_DRAW"},
    {0x29, "DRM_IOCTL_DMA"},
    {0x2A, "DRM_IOCTL_LOCK"},
    {0x2B, "DRM_IOCTL_UNLOCK"},
    {0x2C, "DRM_IOCTL_FINISH"},
    {0x2D, "DRM_IOCTL_PRIME_HANDLE_TO_FD"},
    {0x2E, "DRM_IOCTL_PRIME_FD_TO_HANDLE"},
    {0x30, "DRM_IOCTL_AGP_ACQUIRE"},
    {0x31, "DRM_IOCTL_AGP_RELEASE"},
    {0x32, "DRM_IOCTL_AGP_ENABLE"},
    {0x33, "DRM_IOCTL_AGP_INFO"},
    {0x34, "DRM_IOCTL_AGP_ALLOC"},
    {0x35, "DRM_IOCTL_AGP_FREE"},
    {0x36, "DRM_IOCTL_AGP_BIND"},
    {0x37, "DRM_IOCTL_AGP_UNBIND"},
    {0x38, "DRM_IOCTL_SG_ALLOC"},
    {0x39, "DRM_IOCTL_SG_FREE"},
    {0x3A, "DRM_IOCTL_WAIT_VBLANK"},
    {0x3B, "DRM_IOCTL_CRTC_GET_SEQUENCE"},
    {0x3C, "DRM_IOCTL_CRTC_QUEUE_SEQUENCE"},
    {0x3F, "DRM_IOCTL_UPDATE_DRAW"},
    {0xA0, "DRM_IOCTL_MODE_GETRESOURCES"},
    {0xA1, "DRM_IOCTL_MODE_GETCRTC"},
    {0xA2, "DRM_IOCTL_MODE_SETCRTC"},
    {0xA3, "DRM_IOCTL_MODE_CURSOR"},
    {0xA4, "DRM_IOCTL_MODE_GETGAMMA"},
    {0xA5, "DRM_IOCTL_MODE_SETGAMMA"},
    {0xA6, "DRM_IOCTL_MODE_GETENCODER"},
    {0xA7, "DRM_IOCTL_MODE_GETCONNECTOR"},
    {0xA8, "DRM_IOCTL_MODE_ATTACHMODE"},
    {0xA9, "DRM_IOCTL_MODE_DETACHMODE"},
    {0xAA, "DRM_IOCTL_MODE_GETPROPERTY"},
    {0xAB, "DRM_IOCTL_MODE_SETPROPERTY"},
    {0xAC, "DRM_IOCTL_MODE_GETPROPBLOB"},
    {0xAD, "DRM_IOCTL_MODE_GETFB"},
    {0xAE, "DRM_IOCTL_MODE_ADDFB"},
    {0xAF, "DRM_IOCTL_MODE_RMFB"},
    {0xB0, "DRM_IOCTL_MODE_PAGE_FLIP"},
    {0xB1, "DRM_IOCTL_MODE_DIRTYFB"},
    {0xB2, "DRM_IOCTL_MODE_CREATE_DUMB"},
    {0xB3, "DRM_IOCTL_MODE_MAP_DUMB"},
    {0xB4, "DRM_IOCTL_MODE_DESTROY_DUMB"},
    {0xB5, "DRM_IOCTL_MODE_GETPLANERESOURCES"},
    {0xB6, "DRM_IOCTL_MODE_GETPLANE"},
    {0xB7, "DRM_IOCTL_MODE_SETPLANE"},
    {0xB8, "DRM_IOCTL_MODE_ADDFB2"},
    {0xB9, "DRM_IOCTL_MODE_OBJ_GETPROPERTIES"},
    {0xBA, "DRM_IOCTL_MODE_OBJ_SETPROPERTY"},
    {0xBB, "DRM_IOCTL_MODE_CURSOR2"},
    {0xBC, "DRM_IOCTL_MODE_ATOMIC"},
    {0xBD, "DRM_IOCTL_MODE_CREATEPROPBLOB"},
    {0xBE, "DRM_IOCTL_MODE_DESTROYPROPBLOB"},
    {0xBF, "DRM_IOCTL_SYNCOBJ_CREATE"},
    {0xC0, "DRM_IOCTL_SYNCOBJ_DESTROY"},
    {0xC1, "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD"},
    {0xC2, "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE"},
    {0xC3, "DRM_IOCTL_SYNCOBJ_WAIT"},
    {0xC4, "DRM_IOCTL_SYNCOBJ_RESET"},
    {0xC5, "DRM_IOCTL_SYNCOBJ_SIGNAL"},
    {0xC6, "DRM_IOCTL_MODE_CREATE_LEASE"},
    {0xC7, "DRM_IOCTL_MODE_LIST_LESSEES"},
    {0xC8, "DRM_IOCTL_MODE_GET_LEASE"},
    {0xC9, "DRM_IOCTL_MODE_REVOKE_LEASE"},
    {0xCA, "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT"},
    {0xCB, "DRM_IOCTL_SYNCOBJ_QUERY"},
    {0xCC, "DRM_IOCTL_SYNCOBJ_TRANSFER"},
    {0xCD, "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL"},
    {0xCE, "DRM_IOCTL_MODE_GETFB2"},
    {0xCF, "DRM_IOCTL_SYNCOBJ_EVENTFD"},
    {0xD0, "DRM_IOCTL_MODE_CLOSEFB"},
    {0xD1, "DRM_IOCTL_SET_CLIENT_NAME"},
    {0xD2, "DRM_IOCTL_GEM_CHANGE_HANDLE"},
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
  if (major == GS_DRM_MAJOR && r.type == 'd') {
    if (r.nr >= 0x40 && r.nr < 0xA0) {
      char name[24];
      snprintf(name, sizeof name, "DRM_DRIVER_0x%02X", r.nr);
      r.name = name;
    } else if (const char* n = lookup(kDrm, r.nr))
      r.name = n;
  }
  return r;
}

std::string nv_device_name(unsigned major, unsigned minor, unsigned uvm_major) {
  if (uvm_major && major == uvm_major)
    return minor == 0 ? "nvidia-uvm" : minor == 1 ? "nvidia-uvm-tools" : "nvidia-uvm?";
  if (major == GS_DRM_MAJOR)
    return minor < 64 ? "dri/card" + std::to_string(minor)
                      : (minor < 128 ? "dri/controlD" : "dri/renderD") + std::to_string(minor);
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

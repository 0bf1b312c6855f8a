#pragma once
#include <cstdint>
#include <string>

namespace gpuscope {

// What an ioctl request on a GPU device means. Major 195 (/dev/nvidia*) uses _IOC numbers
// with type 'F'; nvidia-uvm uses plain integers; DRM (major 226, /dev/dri/*) _IOC numbers with
// type 'd': the generic requests by name, a driver's own (0x40-0x9f) as DRM_DRIVER_0xNN.
struct IoctlRequest {
  std::string name;  // NV_ESC_RM_CONTROL, UVM_INITIALIZE, DRM_IOCTL_GEM_CLOSE, ... or "" when unknown
  bool ioc = false;  // the _IOC fields below apply
  unsigned dir = 0, type = 0, nr = 0, size = 0;
};

IoctlRequest decode_ioctl(unsigned major, unsigned uvm_major, uint32_t request);
const char* ioc_dir_name(unsigned dir);  // "none", "w", "r", "rw"
// /dev name of a GPU device node: nvidiactl, nvidia-modeset, nvidiaN, nvidia-uvm, nvidia-uvm-tools,
// dri/cardN, dri/renderDN.
std::string nv_device_name(unsigned major, unsigned minor, unsigned uvm_major);
// The dynamic major of "nvidia-uvm" in /proc/devices' text, or 0.
unsigned parse_uvm_major(const std::string& proc_devices);

}  // namespace gpuscope

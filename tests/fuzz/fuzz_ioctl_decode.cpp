// libFuzzer target: the ioctl decoder. Input: four little-endian u32 (major, minor, uvm_major,
// request), as the BPF side reports them, then /proc/devices text for parse_uvm_major.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ioctl/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t f[4] = {};
  size_t head = size < sizeof f ? size : sizeof f;
  memcpy(f, data, head);
  auto [major, minor, uvm_major, request] = f;

  gpuscope::IoctlRequest r = gpuscope::decode_ioctl(major, uvm_major, request);
  if (r.ioc) {
    if (r.dir > 3 || r.type > 0xff || r.nr > 0xff || r.size > 0x3fff) __builtin_trap();
    if (((r.dir << 30) | (r.size << 16) | (r.type << 8) | r.nr) != request) __builtin_trap();  // fields round-trip
  }
  if (!gpuscope::ioc_dir_name(r.dir) || !gpuscope::ioc_dir_name(request)) __builtin_trap();
  if (gpuscope::nv_device_name(major, minor, uvm_major).empty()) __builtin_trap();

  std::string devices(reinterpret_cast<const char*>(data) + head, size - head);
  unsigned m = gpuscope::parse_uvm_major(devices);
  if (m && devices.find("nvidia-uvm") == std::string::npos) __builtin_trap();
  return 0;
}

#include <gtest/gtest.h>
#include <libdrm/drm.h>
#include <sys/ioctl.h>

#include <fstream>
#include <regex>
#include <string>

#include "ioctl/decode.h"

using namespace gpuscope;

TEST(IoctlDecode, NvidiaEscapesSplitIntoIocFields) {
  auto r = decode_ioctl(195, 0, _IOWR('F', 0x2A, char[32]));
  EXPECT_EQ(r.name, "NV_ESC_RM_CONTROL");
  EXPECT_TRUE(r.ioc);
  EXPECT_EQ(r.dir, 3u);
  EXPECT_STREQ(ioc_dir_name(r.dir), "rw");
  EXPECT_EQ(r.type, unsigned('F'));
  EXPECT_EQ(r.nr, 0x2Au);
  EXPECT_EQ(r.size, 32u);
  EXPECT_EQ(decode_ioctl(195, 0, 0xC020462A).name, "NV_ESC_RM_CONTROL");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 0x2B, char[48])).name, "NV_ESC_RM_ALLOC");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 0x29, char[16])).name, "NV_ESC_RM_FREE");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 0x4E, char[56])).name, "NV_ESC_RM_MAP_MEMORY");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 0x27, char[8])).name, "NV_ESC_RM_ALLOC_MEMORY");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 200, char[8])).name, "NV_ESC_CARD_INFO");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 201, char[8])).name, "NV_ESC_REGISTER_FD");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 210, char[8])).name, "NV_ESC_CHECK_VERSION_STR");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 218, char[8])).name, "NV_ESC_WAIT_OPEN_COMPLETE");
  auto w = decode_ioctl(195, 0, _IOW('F', 0x2A, char[8]));
  EXPECT_STREQ(ioc_dir_name(w.dir), "w");
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('G', 0x2A, char[32])).name, "") << "another magic is not an NVIDIA escape";
  EXPECT_EQ(decode_ioctl(195, 0, _IOWR('F', 0x10, char[32])).name, "");
}

TEST(IoctlDecode, UvmNumbersArePlainIntegers) {
  auto r = decode_ioctl(508, 508, 0x30000001);
  EXPECT_EQ(r.name, "UVM_INITIALIZE");
  EXPECT_FALSE(r.ioc);
  EXPECT_EQ(decode_ioctl(508, 508, 0x30000002).name, "UVM_DEINITIALIZE");
  EXPECT_EQ(decode_ioctl(508, 508, 37).name, "UVM_REGISTER_GPU");
  EXPECT_EQ(decode_ioctl(508, 508, 51).name, "UVM_MIGRATE");
  EXPECT_EQ(decode_ioctl(508, 508, 75).name, "UVM_MM_INITIALIZE");
  EXPECT_EQ(decode_ioctl(508, 508, 0xC020462A).name, "") << "an _IOC number means nothing to UVM";
  EXPECT_EQ(decode_ioctl(508, 508, 0x2A).name, "UVM_SET_PREFERRED_LOCATION") << "42, plain";
  EXPECT_EQ(decode_ioctl(195, 508, 37).name, "") << "plain 37 on major 195 is _IOC nr 37, type 0";
}

TEST(IoctlDecode, DeviceNamesAndUvmMajor) {
  EXPECT_EQ(nv_device_name(195, 255, 0), "nvidiactl");
  EXPECT_EQ(nv_device_name(195, 254, 0), "nvidia-modeset");
  EXPECT_EQ(nv_device_name(195, 0, 0), "nvidia0");
  EXPECT_EQ(nv_device_name(508, 0, 508), "nvidia-uvm");
  EXPECT_EQ(nv_device_name(508, 1, 508), "nvidia-uvm-tools");
  EXPECT_EQ(nv_device_name(226, 0, 0), "dri/card0");
  EXPECT_EQ(nv_device_name(226, 64, 0), "dri/controlD64");
  EXPECT_EQ(nv_device_name(226, 128, 0), "dri/renderD128");
  EXPECT_EQ(parse_uvm_major("Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n"
                            "  8 sd\n"),
            508u);
  EXPECT_EQ(parse_uvm_major("Character devices:\n  1 mem\n\nBlock devices:\n509 nvidia-uvm\n"), 0u)
      << "a block device of that name does not count";
  EXPECT_EQ(parse_uvm_major(""), 0u);
}

// Every DRM request the installed uapi header (libdrm-dev's drm.h) defines is named as the
// header names it, at the header's own number; the compiled macros of a few check whole
// request words. A driver's own requests (0x40-0x9f) are DRM_DRIVER_0xNN; NVIDIA escapes on a
// DRM node and DRM requests on an NVIDIA node are neither.
TEST(IoctlDecode, DrmRequestsNamedFromTheUapiHeader) {
  std::ifstream h(DRM_HEADER);
  ASSERT_TRUE(h) << DRM_HEADER;
  const std::regex def(R"(^#define\s+DRM_IOCTL_(\w+)\s+DRM_IO[WR]*\s*\(\s*(0x[0-9a-fA-F]+))");
  size_t defined = 0;
  for (std::string line; std::getline(h, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, def)) continue;
    defined++;
    const unsigned nr = std::stoul(m[2].str(), nullptr, 16);
    EXPECT_EQ(decode_ioctl(226, 0, _IOWR('d', nr, char[8])).name, "DRM_IOCTL_" + m[1].str()) << line;
  }
  EXPECT_GE(defined, 100u) << "DRM_IOCTL_ definitions read from " << DRM_HEADER;
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOCTL_VERSION).name, "DRM_IOCTL_VERSION");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOCTL_GEM_CLOSE).name, "DRM_IOCTL_GEM_CLOSE");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOCTL_PRIME_HANDLE_TO_FD).name, "DRM_IOCTL_PRIME_HANDLE_TO_FD");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOCTL_SYNCOBJ_WAIT).name, "DRM_IOCTL_SYNCOBJ_WAIT");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOCTL_MODE_ATOMIC).name, "DRM_IOCTL_MODE_ATOMIC");
  auto v = decode_ioctl(226, 0, DRM_IOCTL_VERSION);
  EXPECT_EQ(v.type, unsigned('d'));
  EXPECT_EQ(v.size, sizeof(struct drm_version));
  EXPECT_STREQ(ioc_dir_name(v.dir), "rw");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOWR(0x40, char[16])).name, "DRM_DRIVER_0x40");
  EXPECT_EQ(decode_ioctl(226, 0, DRM_IOW(0x9F, char[8])).name, "DRM_DRIVER_0x9F");
  EXPECT_EQ(decode_ioctl(226, 0, _IOWR('F', 0x2A, char[32])).name, "") << "an NVIDIA escape on a DRM node";
  EXPECT_EQ(decode_ioctl(195, 0, DRM_IOCTL_GEM_CLOSE).name, "") << "a DRM request on an NVIDIA node";
}

#include "errors/xid_catalog.h"

#include <algorithm>
#include <array>

namespace gpuscope {
namespace {

using C = XidClass;
using A = XidAction;

// NVIDIA's immediate actions map to ours: RESTART_APP -> restart_app; RESET_GPU and the
// WORKFLOW_XID_48 / NVLink workflows (a reset clears them) -> reset_gpu; RESTART_BM and
// CHECK_MECHANICALS -> drain_node; IGNORE and informational ones -> none. Unused Xids are left out.
constexpr std::array kCatalog{
    XidInfo{8, "GPU stopped processing: a channel timed out while idle", C::kApplication, A::kRestartApp},
    XidInfo{11, "invalid or corrupted push buffer stream", C::kApplication, A::kRestartApp},
    XidInfo{13, "graphics engine exception: a kernel's illegal address, instruction or register", C::kApplication,
            A::kRestartApp},
    XidInfo{25, "invalid or illegal push buffer stream", C::kApplication, A::kRestartApp},
    XidInfo{31, "GPU memory page fault: the MMU refused an access, usually an application bug", C::kApplication,
            A::kRestartApp},
    XidInfo{32, "push buffer DMA error, mostly PCIe signal quality", C::kHardware, A::kRestartApp},
    XidInfo{37, "driver firmware error: unimplemented firmware method", C::kDriver, A::kNone},
    XidInfo{38, "driver firmware error: firmware watchdog timeout", C::kDriver, A::kNone},
    XidInfo{39, "copy engine exception (CE0)", C::kApplication, A::kRestartApp},
    XidInfo{40, "copy engine exception (CE1)", C::kApplication, A::kRestartApp},
    XidInfo{41, "copy engine exception (CE2)", C::kApplication, A::kRestartApp},
    XidInfo{43, "GPU stopped processing: the application hit a fault and ended; the GPU is healthy", C::kApplication,
            A::kNone},
    XidInfo{44, "graphics engine fault during a context switch", C::kDriver, A::kNone},
    XidInfo{45, "preemptive cleanup of channels after another error or an abort; see the Xid before it", C::kOther,
            A::kNone},
    XidInfo{46, "GPU stopped processing: GPU timeout", C::kDriver, A::kResetGpu},
    XidInfo{48, "uncorrectable double-bit ECC error", C::kHardware, A::kResetGpu},
    XidInfo{54, "auxiliary power is not connected to the board", C::kThermalPower, A::kDrainNode},
    XidInfo{60, "video processor (SEC2) exception", C::kDriver, A::kRestartApp},
    XidInfo{61, "internal micro-controller breakpoint (GPUs before Ampere)", C::kDriver, A::kResetGpu},
    XidInfo{62, "internal micro-controller halt", C::kDriver, A::kResetGpu},
    XidInfo{63, "memory row remapping (or page retirement) recorded; applied at the next GPU reset", C::kHardware,
            A::kNone},
    XidInfo{64, "memory row remapping (or page retirement) could not be recorded", C::kHardware, A::kResetGpu},
    XidInfo{66, "illegal register access by the driver", C::kDriver, A::kNone},
    XidInfo{67, "illegal register access by the driver (verification)", C::kDriver, A::kNone},
    XidInfo{68, "video decoder (NVDEC0) exception", C::kApplication, A::kRestartApp},
    XidInfo{69, "graphics engine class error: an invalid method for its class", C::kApplication, A::kRestartApp},
    XidInfo{70, "copy engine exception (CE3)", C::kApplication, A::kRestartApp},
    XidInfo{71, "copy engine exception (CE4)", C::kApplication, A::kRestartApp},
    XidInfo{72, "copy engine exception (CE5)", C::kApplication, A::kRestartApp},
    XidInfo{74, "NVLink error, on this link or at the device at its other end", C::kHardware, A::kResetGpu},
    XidInfo{75, "copy engine exception (CE6)", C::kApplication, A::kRestartApp},
    XidInfo{76, "copy engine exception (CE7)", C::kApplication, A::kRestartApp},
    XidInfo{77, "copy engine exception (CE8)", C::kApplication, A::kRestartApp},
    XidInfo{79, "GPU has fallen off the bus: not reachable over PCIe", C::kHardware, A::kDrainNode},
    XidInfo{80, "corrupted data sent to the GPU (push buffer CRC mismatch)", C::kHardware, A::kRestartApp},
    XidInfo{82, "JPEG engine (NVJPG0) exception", C::kApplication, A::kRestartApp},
    XidInfo{83, "video decoder (NVDEC1) exception", C::kApplication, A::kRestartApp},
    XidInfo{84, "video decoder (NVDEC2) exception", C::kApplication, A::kRestartApp},
    XidInfo{85, "copy engine exception (CE9)", C::kApplication, A::kRestartApp},
    XidInfo{86, "optical flow engine (OFA0) exception", C::kApplication, A::kRestartApp},
    XidInfo{88, "video decoder (NVDEC3) exception", C::kApplication, A::kRestartApp},
    XidInfo{89, "video decoder (NVDEC4) exception", C::kApplication, A::kRestartApp},
    XidInfo{92, "high rate of corrected single-bit ECC errors", C::kHardware, A::kNone},
    XidInfo{93, "InfoROM wear limit reached (non-fatal)", C::kHardware, A::kNone},
    XidInfo{94, "contained memory error: only the application that met it must restart", C::kHardware, A::kRestartApp},
    XidInfo{95, "uncontained memory error: every application on the GPU is affected", C::kHardware, A::kResetGpu},
    XidInfo{96, "video decoder (NVDEC5) exception", C::kApplication, A::kRestartApp},
    XidInfo{97, "video decoder (NVDEC6) exception", C::kApplication, A::kRestartApp},
    XidInfo{98, "video decoder (NVDEC7) exception", C::kApplication, A::kRestartApp},
    XidInfo{99, "JPEG engine (NVJPG1) exception", C::kApplication, A::kRestartApp},
    XidInfo{100, "JPEG engine (NVJPG2) exception", C::kApplication, A::kRestartApp},
    XidInfo{101, "JPEG engine (NVJPG3) exception", C::kApplication, A::kRestartApp},
    XidInfo{102, "JPEG engine (NVJPG4) exception", C::kApplication, A::kRestartApp},
    XidInfo{103, "JPEG engine (NVJPG5) exception", C::kApplication, A::kRestartApp},
    XidInfo{104, "JPEG engine (NVJPG6) exception", C::kApplication, A::kRestartApp},
    XidInfo{105, "JPEG engine (NVJPG7) exception", C::kApplication, A::kRestartApp},
    XidInfo{109, "context switch timeout", C::kDriver, A::kResetGpu},
    XidInfo{110, "security fault, usually failing hardware", C::kHardware, A::kResetGpu},
    XidInfo{119, "GSP RPC timeout: the GPU's system processor did not answer the driver", C::kDriver, A::kResetGpu},
    XidInfo{120, "GSP error: the code on the GPU's system processor failed", C::kDriver, A::kResetGpu},
    XidInfo{121, "corrected errors on the C2C link to the Grace CPU; no impact", C::kHardware, A::kNone},
    XidInfo{126, "copy engine exception (CE10)", C::kApplication, A::kRestartApp},
    XidInfo{127, "copy engine exception (CE11)", C::kApplication, A::kRestartApp},
    XidInfo{128, "copy engine exception (CE12)", C::kApplication, A::kRestartApp},
    XidInfo{129, "copy engine exception (CE13)", C::kApplication, A::kRestartApp},
    XidInfo{130, "copy engine exception (CE14)", C::kApplication, A::kRestartApp},
    XidInfo{131, "copy engine exception (CE15)", C::kApplication, A::kRestartApp},
    XidInfo{132, "copy engine exception (CE16)", C::kApplication, A::kRestartApp},
    XidInfo{133, "copy engine exception (CE17)", C::kApplication, A::kRestartApp},
    XidInfo{134, "copy engine exception (CE18)", C::kApplication, A::kRestartApp},
    XidInfo{135, "copy engine exception (CE19)", C::kApplication, A::kRestartApp},
    XidInfo{136, "link training failed", C::kHardware, A::kResetGpu},
    XidInfo{137, "NVLink privilege error: an illegal peer-to-peer access, usually an application bug", C::kApplication,
            A::kNone},
    XidInfo{139, "optical flow engine (OFA1) exception", C::kApplication, A::kRestartApp},
    XidInfo{140, "uncorrectable ECC error that could not be retired or remapped", C::kHardware, A::kResetGpu},
    XidInfo{143, "GPU initialization failure", C::kHardware, A::kResetGpu},
    XidInfo{144, "NVLink SAW error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{145, "NVLink RLW error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{146, "NVLink TLW error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{147, "NVLink TREX error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{148, "NVLink NVLPW_CTRL error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{149, "NVLink NETIR error (link down); its sub-code tells the cause", C::kHardware, A::kResetGpu},
    XidInfo{150, "NVLink MSE error; its sub-code tells fatal (reset) from not", C::kHardware, A::kResetGpu},
    XidInfo{154, "GPU recovery action changed: its text names what another Xid needs", C::kOther, A::kSeeCatalog},
    XidInfo{155, "NVLink link taken down by software", C::kDriver, A::kResetGpu},
    XidInfo{156, "resource retirement event", C::kHardware, A::kResetGpu},
    XidInfo{157, "resource retirement failed: no spare resources left", C::kHardware, A::kNone},
    XidInfo{158, "GPU fatal timeout", C::kHardware, A::kResetGpu},
    XidInfo{162, "power smoothing circuitry re-engaged", C::kThermalPower, A::kNone},
    XidInfo{163, "power smoothing circuitry disengaged (thermal events or a timeout)", C::kThermalPower, A::kNone},
    XidInfo{164, "power smoothing circuitry near the end of its lifetime", C::kThermalPower, A::kNone},
    XidInfo{165, "power smoothing circuitry lifetime exhausted: power swings will reach the supply", C::kThermalPower,
            A::kNone},
    XidInfo{171, "uncorrectable DRAM error (details of an Xid 48)", C::kHardware, A::kResetGpu},
    XidInfo{172, "uncorrectable SRAM error (details of an Xid 48)", C::kHardware, A::kResetGpu},
};

constexpr bool sorted() {
  for (size_t i = 1; i < kCatalog.size(); i++)
    if (kCatalog[i - 1].xid >= kCatalog[i].xid) return false;
  return true;
}
static_assert(sorted(), "the catalogue is looked up by binary search");

}  // namespace

XidInfo xid_info(int xid) {
  auto it = std::lower_bound(kCatalog.begin(), kCatalog.end(), xid, [](const XidInfo& e, int x) { return e.xid < x; });
  if (it != kCatalog.end() && it->xid == xid) return *it;
  return XidInfo{xid, "unknown Xid", XidClass::kOther, XidAction::kSeeCatalog};
}

std::span<const XidInfo> xid_catalog() { return kCatalog; }

const char* xid_class_name(XidClass c) {
  switch (c) {
    case XidClass::kApplication: return "application";
    case XidClass::kDriver: return "driver";
    case XidClass::kHardware: return "hardware";
    case XidClass::kThermalPower: return "thermal_power";
    case XidClass::kOther: break;
  }
  return "other";
}

const char* xid_action_name(XidAction a) {
  switch (a) {
    case XidAction::kNone: return "none";
    case XidAction::kRestartApp: return "restart_app";
    case XidAction::kResetGpu: return "reset_gpu";
    case XidAction::kDrainNode: return "drain_node";
    case XidAction::kSeeCatalog: break;
  }
  return "see_catalog";
}

const char* xid_action_text(XidAction a) {
  switch (a) {
    case XidAction::kNone: return "none (monitor)";
    case XidAction::kRestartApp: return "restart the application";
    case XidAction::kResetGpu: return "reset the GPU";
    case XidAction::kDrainNode: return "drain and reboot the node";
    case XidAction::kSeeCatalog: break;
  }
  return "see NVIDIA's Xid catalogue";
}

}  // namespace gpuscope

#pragma once
// What an Xid means and what it calls for, after NVIDIA's Xid catalogue
// (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the Ampere-and-newer
// table: its description and "Resolution Bucket (Immediate Action)"), in our own short words.
#include <span>

namespace gpuscope {

enum class XidClass { kApplication, kDriver, kHardware, kThermalPower, kOther };
enum class XidAction { kNone, kRestartApp, kResetGpu, kDrainNode, kSeeCatalog };

struct XidInfo {
  int xid = 0;
  const char* meaning = "";
  XidClass cls = XidClass::kOther;
  XidAction action = XidAction::kSeeCatalog;
};

// The catalogue's entry, or for an Xid it lacks: meaning "unknown Xid", class other, action
// "see NVIDIA's Xid catalogue".
XidInfo xid_info(int xid);
// Every entry, by Xid.
std::span<const XidInfo> xid_catalog();

// Label values: "application", "driver", "hardware", "thermal_power", "other".
const char* xid_class_name(XidClass c);
// "none", "restart_app", "reset_gpu", "drain_node", "see_catalog".
const char* xid_action_name(XidAction a);
// For people: "restart the application", "reset the GPU", ...
const char* xid_action_text(XidAction a);

}  // namespace gpuscope

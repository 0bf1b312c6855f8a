// libFuzzer target: the kernel-log Xid parser (src/errors/xid.cpp), whose input any root process
// (a write to /dev/kmsg) or a replayed file controls: parse_kmsg_record, parse_xid_record,
// parse_xid_line, normalize_pci_bus_id, and the catalogue lookup of what they give.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "errors/xid.h"
#include "errors/xid_catalog.h"

namespace {

void check(const gpuscope::XidEvent& e) {
  if (e.comm.size() > gpuscope::kXidCommMax || e.message.size() > gpuscope::kXidMessageMax) __builtin_trap();
  for (unsigned char c : e.comm + e.message)
    if (c < 0x20 || c == 0x7f) __builtin_trap();                                       // control bytes are escaped
  if (gpuscope::normalize_pci_bus_id(e.pci_bus_id) != e.pci_bus_id) __builtin_trap();  // already normal
  if (e.xid < 0 || e.xid > 999999 || (e.pid && *e.pid <= 0)) __builtin_trap();
  auto info = gpuscope::xid_info(e.xid);
  if (info.xid != e.xid || !info.meaning) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto r = gpuscope::parse_kmsg_record(text)) {
    if (r->message.data() < text.data() || r->message.data() + r->message.size() > text.data() + text.size())
      __builtin_trap();  // a view into the input
  }
  if (auto e = gpuscope::parse_xid_record(text)) check(*e);
  if (auto e = gpuscope::parse_xid_line(text)) check(*e);
  if (auto e = gpuscope::parse_xid_message(text)) check(*e);
  std::string id = gpuscope::normalize_pci_bus_id(text);
  if (!id.empty() && gpuscope::normalize_pci_bus_id(id) != id) __builtin_trap();
  return 0;
}

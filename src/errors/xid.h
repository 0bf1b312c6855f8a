#pragma once
// The NVIDIA driver's Xid lines, as the kernel log carries them: a /dev/kmsg record
// ("PRIORITY,SEQ,TIMESTAMP_US,FLAGS[,...];MESSAGE" then " KEY=VALUE" lines; the kernel's
// Documentation/ABI/testing/dev-kmsg) or a saved dmesg line ("[12345.678901] MESSAGE").
// Untrusted input (any root process can write to /dev/kmsg, a replayed file is anything): every
// byte string parses or is refused, and what is kept is bounded.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuscope {

inline constexpr size_t kXidCommMax = 100;      // the driver's NV_PROC_NAME_MAX_LENGTH
inline constexpr size_t kXidMessageMax = 1024;  // a printk record holds at most 1024 bytes

struct XidEvent {
  uint64_t seq = 0;         // the record's sequence number (0 for a dmesg line)
  uint64_t ts_boot_us = 0;  // CLOCK_BOOTTIME-like time of the record (0 when the line has none)
  std::string pci_bus_id;   // domain:bus:device.function, lower case: "0000:3b:00.0"
  int xid = 0;
  std::optional<pid_t> pid;   // none where the driver knew no process ('<unknown>', -1, 0)
  std::string comm;           // the driver's name= ("" when unknown)
  std::string message;        // the text after "pid=..., name=..., " (after "N, " without them)
  int gpu_instance = -1;      // MIG attribution ("GPU-I:05"), -1 without
  int compute_instance = -1;  // "GPU-CI:01", -1 without
  bool injected = false;      // written by a process into /dev/kmsg (a facility other than kernel)
};

struct KmsgRecord {
  int priority = 0;  // facility * 8 + level
  uint64_t seq = 0;
  uint64_t ts_boot_us = 0;
  bool continuation = false;  // flag 'c'
  std::string_view message;   // kmsg's escaping (\xNN) left as is
  std::string_view device;    // the " DEVICE=" continuation line's value, "" without
};

// One /dev/kmsg record (what one read() returns, or one line of a saved copy with its
// continuation lines). nullopt when the prefix does not parse.
std::optional<KmsgRecord> parse_kmsg_record(std::string_view record);

// "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python3, MESSAGE" and the driver's other
// shapes of it, found anywhere in `text`; seq and ts are left 0.
std::optional<XidEvent> parse_xid_message(std::string_view text);

// A /dev/kmsg record carrying an Xid line: the message parsed, seq and time from the prefix.
std::optional<XidEvent> parse_xid_record(std::string_view record);

// A line of a saved log: a kmsg record, or dmesg's "[  12.345678] ..." (its time kept), or any
// other line with the Xid text in it (journalctl -k, syslog: time 0).
std::optional<XidEvent> parse_xid_line(std::string_view line);

// "0000:3b:00" -> "0000:3b:00.0", "3b:00.1" -> "0000:3b:00.1"; "" when not a PCI address.
std::string normalize_pci_bus_id(std::string_view id);

}  // namespace gpuscope

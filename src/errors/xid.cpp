#include "errors/xid.h"

#include <algorithm>
#include <climits>

// The shapes of the driver's line, from its source and from logs of real machines:
// - open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c (krcReportXid), 535-580:
//     "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s", the pid "'<unknown>'" and the
//     name "<unknown>" where no channel is known, and on MIG " GPU-I:%02u" [" GPU-CI:%02u"]
//     inside the parenthesis; Xid 94/95's text in kernel_rc's comments has a pid but no name:
//     "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). ...".
// - without pid and name (the GPU-lost path and older drivers): open-gpu-kernel-modules issue
//   1151 "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", and an MMU fault
//   "NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS ...".
// - NVIDIA's Xid document's example, "NVRM: Xid (0000:03:00): 14, Channel 00000001" (no "PCI:").
// - leptonai/gpud's dmesg samples (13 with pid='<unknown>', 109 "Ch 00000008, errorString CTX
//   SWITCH TIMEOUT, Info 0x58005"), NVIDIA/gpu-operator issue 1146 (48 "An uncorrectable double
//   bit error (DBE) has been detected on GPU in the framebuffer at physAddr ..."), NVIDIA NVSentinel
//   and gpu-operator logs (119 "Timeout after 6s of waiting for RPC response from GPU0 GSP! ...",
//   names such as "nvc:[driver]").

namespace gpuscope {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// A whole decimal number (digits only, no sign), nullopt on overflow or anything else.
std::optional<uint64_t> decimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// Control bytes written as kmsg writes them (\xNN), cut to `max` bytes at a character boundary.
std::string printable(std::string_view s, size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    bool control = c < 0x20 || c == 0x7f;
    if (out.size() + (control ? 4 : 1) > max) {
      // Cut: no half of a UTF-8 sequence at the end.
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xc0) == 0x80) out.pop_back();
      if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xc0) out.pop_back();
      break;
    }
    if (control) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool unknown(std::string_view v) { return v == "<unknown>" || v == "'<unknown>'" || v.empty(); }

// "GPU-I:05" / "GPU-CI:01" in the parenthesis after the address.
int instance_id(std::string_view paren, std::string_view key) {
  size_t at = paren.find(key);
  if (at == std::string_view::npos) return -1;
  std::string_view v = paren.substr(at + key.size());
  size_t n = 0;
  while (n < v.size() && n < 5 && is_digit(v[n])) n++;
  auto id = decimal(v.substr(0, n));
  return id ? static_cast<int>(*id) : -1;
}

}  // namespace

std::string normalize_pci_bus_id(std::string_view id) {
  // [domain:]bus:device[.function]: the domain 1-8 hex digits (VMD domains have 5), bus and
  // device 2 each, the function one digit 0-7.
  std::string_view parts[3];
  size_t n = 0;
  for (;;) {
    if (n == 3) return "";
    size_t colon = id.find(':');
    parts[n++] = id.substr(0, colon);
    if (colon == std::string_view::npos) break;
    id.remove_prefix(colon + 1);
  }
  if (n < 2) return "";
  std::string_view domain = n == 3 ? parts[0] : std::string_view("0000");
  std::string_view bus = parts[n - 2], dev = parts[n - 1];
  char function = '0';
  if (size_t dot = dev.find('.'); dot != std::string_view::npos) {
    std::string_view f = dev.substr(dot + 1);
    if (f.size() != 1 || f[0] < '0' || f[0] > '7') return "";
    function = f[0];
    dev = dev.substr(0, dot);
  }
  auto hex_of = [](std::string_view s, size_t lo, size_t hi) {
    if (s.size() < lo || s.size() > hi) return false;
    for (char c : s)
      if (!is_hex(c)) return false;
    return true;
  };
  if (!hex_of(domain, 1, 8) || !hex_of(bus, 2, 2) || !hex_of(dev, 2, 2)) return "";
  std::string out(domain.size() < 4 ? 4 - domain.size() : 0, '0');
  for (std::string_view p : {domain, std::string_view(":"), bus, std::string_view(":"), dev}) {
    for (char c : p) out += lower(c);
  }
  out += '.';
  out += function;
  return out;
}

std::optional<KmsgRecord> parse_kmsg_record(std::string_view record) {
  size_t semi = record.find(';');
  size_t eol = record.find('\n');
  if (semi == std::string_view::npos || (eol != std::string_view::npos && eol < semi) || semi > 512)
    return std::nullopt;
  std::string_view prefix = record.substr(0, semi), fields[4];
  for (size_t i = 0; i < 4; i++) {
    size_t comma = prefix.find(',');
    fields[i] = prefix.substr(0, comma);
    prefix = comma == std::string_view::npos ? std::string_view() : prefix.substr(comma + 1);
    if (comma == std::string_view::npos && i < 3) return std::nullopt;
  }
  auto pri = decimal(fields[0]);
  auto seq = decimal(fields[1]);
  auto ts = decimal(fields[2]);
  if (!pri || *pri > INT_MAX || !seq || !ts || fields[3].empty()) return std::nullopt;
  KmsgRecord r;
  r.priority = static_cast<int>(*pri);
  r.seq = *seq;
  r.ts_boot_us = *ts;
  r.continuation = fields[3].find('c') != std::string_view::npos;
  std::string_view rest = record.substr(semi + 1);
  eol = rest.find('\n');
  r.message = rest.substr(0, eol);
  // The dictionary: " KEY=VALUE" lines after the message.
  while (eol != std::string_view::npos) {
    rest.remove_prefix(eol + 1);
    eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    if (line.substr(0, 8) == " DEVICE=") r.device = line.substr(8);
  }
  return r;
}

std::optional<XidEvent> parse_xid_message(std::string_view text) {
  static constexpr std::string_view kTag = "NVRM: Xid";
  size_t at = text.find(kTag);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view s = text.substr(at + kTag.size());
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.empty() || s.front() != '(') return std::nullopt;
  size_t close = s.find(')');
  if (close == std::string_view::npos || close > 64) return std::nullopt;
  std::string_view paren = s.substr(1, close - 1);
  if (paren.substr(0, 4) == "PCI:") paren.remove_prefix(4);
  XidEvent e;
  e.pci_bus_id = normalize_pci_bus_id(paren.substr(0, paren.find(' ')));
  if (e.pci_bus_id.empty()) return std::nullopt;
  e.gpu_instance = instance_id(paren, "GPU-I:");
  e.compute_instance = instance_id(paren, "GPU-CI:");

  s.remove_prefix(close + 1);
  if (s.empty() || s.front() != ':') return std::nullopt;
  s.remove_prefix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  size_t digits = 0;
  while (digits < s.size() && is_digit(s[digits])) digits++;
  if (digits == 0 || digits > 6) return std::nullopt;
  e.xid = static_cast<int>(*decimal(s.substr(0, digits)));
  s.remove_prefix(digits);
  if (!s.empty() && s.front() != ',') return std::nullopt;
  if (!s.empty()) s.remove_prefix(1);
  s = trim(s);

  // "pid=P, name=N, " each optional; the driver's format puts ", " after each.
  auto field = [&s](std::string_view key, bool to_comma_space) -> std::optional<std::string_view> {
    if (s.substr(0, key.size()) != key) return std::nullopt;
    std::string_view v = s.substr(key.size());
    size_t end = to_comma_space ? v.find(", ") : v.find(',');
    if (to_comma_space && end == std::string_view::npos && !v.empty() && v.back() == ',') end = v.size() - 1;
    std::string_view value = v.substr(0, end);
    s = end == std::string_view::npos ? std::string_view() : trim(v.substr(end + 1));
    return trim(value);
  };
  if (auto pid = field("pid=", false)) {
    std::string_view v = *pid;
    if (!unknown(v)) {
      auto p = decimal(v);
      if (p && *p > 0 && *p <= INT_MAX) e.pid = static_cast<pid_t>(*p);
    }
  }
  // A name may hold commas ("nvc:[driver]" has none, but comm is any 15 bytes): it ends at ", ".
  if (auto name = field("name=", true)) {
    if (!unknown(*name)) e.comm = printable(*name, kXidCommMax);
  }
  e.message = printable(s, kXidMessageMax);
  return e;
}

std::optional<XidEvent> parse_xid_record(std::string_view record) {
  auto r = parse_kmsg_record(record);
  if (!r || r->message.substr(0, 9) != "NVRM: Xid") return std::nullopt;
  auto e = parse_xid_message(r->message);
  if (!e) return std::nullopt;
  e->seq = r->seq;
  e->ts_boot_us = r->ts_boot_us;
  e->injected = (r->priority >> 3) != 0;
  return e;
}

std::optional<XidEvent> parse_xid_line(std::string_view line) {
  if (auto r = parse_kmsg_record(line)) {
    if (auto e = parse_xid_record(line)) return e;
    return std::nullopt;  // a kmsg record of something else
  }
  std::string_view s = line;
  // dmesg -r's "<3>", then "[  612.440123]".
  if (!s.empty() && s.front() == '<') {
    size_t gt = s.find('>');
    if (gt != std::string_view::npos && gt <= 4 && decimal(s.substr(1, gt - 1))) s.remove_prefix(gt + 1);
  }
  uint64_t ts_us = 0;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close != std::string_view::npos && close <= 32) {
      std::string_view t = trim(s.substr(1, close - 1));
      size_t dot = t.find('.');
      auto sec = decimal(t.substr(0, dot));
      std::string_view frac = dot == std::string_view::npos ? std::string_view() : t.substr(dot + 1);
      auto f = frac.empty() ? std::optional<uint64_t>(0) : decimal(frac.substr(0, 6));
      if (sec && f && *sec < 1000000000000ull && (frac.size() <= 6 || decimal(frac))) {
        uint64_t us = *f;
        for (size_t i = std::min<size_t>(frac.size(), 6); i < 6; i++) us *= 10;
        ts_us = *sec * 1000000 + us;
      }
    }
  }
  auto e = parse_xid_message(s);
  if (e) e->ts_boot_us = ts_us;
  return e;
}

}  // namespace gpuscope

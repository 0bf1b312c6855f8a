#include "ioctl/ioctl_view.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "ioctl/decode.h"

namespace gpuscope {

namespace {

unsigned kmajor(uint32_t rdev) { return rdev >> GS_KDEV_MINORBITS; }
unsigned kminor(uint32_t rdev) { return rdev & ((1u << GS_KDEV_MINORBITS) - 1); }
std::string dev_str(uint32_t rdev) { return fmt::format("{}:{}", kmajor(rdev), kminor(rdev)); }

template <typename V>
std::string comm_of(const V& v) {
  return std::string(v.comm, strnlen(v.comm, sizeof v.comm));
}

}  // namespace

std::string IoctlView::device(uint32_t rdev) const { return nv_device_name(kmajor(rdev), kminor(rdev), o_.uvm_major); }

std::string IoctlView::shown(uint32_t rdev) const {
  auto d = drivers_.find(rdev);
  return d == drivers_.end() ? device(rdev) : device(rdev) + " (" + d->second + ")";
}

void IoctlView::head(JsonLine& j, const char* type, uint64_t ts_ns, uint32_t pid, std::string_view comm,
                     uint32_t rdev) {
  j.record(type, ts_ns);
  where_.process(j, static_cast<pid_t>(pid), comm);
  j.str("dev", dev_str(rdev)).str("device", device(rdev));
  if (auto d = drivers_.find(rdev); d != drivers_.end()) j.str("driver", d->second);
}

void IoctlView::event(const void* data, size_t size) {
  if (size < sizeof(gs_ioctl_event)) return;
  gs_ioctl_event e;
  memcpy(&e, data, sizeof e);
  auto req = decode_ioctl(kmajor(e.rdev), o_.uvm_major, e.request);
  std::string_view comm(e.comm, strnlen(e.comm, sizeof e.comm));
  if (o_.json) {
    JsonLine j(out_.buf());
    head(j, "ioctl_event", static_cast<uint64_t>(static_cast<int64_t>(e.ts_boot_ns) + realtime_offset_), e.pid, comm,
         e.rdev);
    j.num("tid", e.tid);
    j.hex("request", e.request).str("name", req.name).num("ret", e.ret).num("dur_ns", e.dur_ns);
    j.end();
  } else {
    fmt::format_to(std::back_inserter(out_.buf()), "{:<16} {:>7} {:>7} ", comm, e.pid, e.tid);
    where_.put_cells(out_.buf(), static_cast<pid_t>(e.pid));
    fmt::format_to(std::back_inserter(out_.buf()), "{:<16} {:<36} ret={} dur={:.3f}us\n", shown(e.rdev),
                   req.name.empty() ? fmt::format("0x{:x}", e.request) : req.name, e.ret,
                   static_cast<double>(e.dur_ns) / 1000.0);
  }
}

void IoctlView::ioctl_deltas(const IoctlSnapshot& snap, Deltas& d) {
  for (auto& [key, v, exited] : snap.ioctls) {
    gs_ioctl_val delta = v;
    auto k = std::make_tuple(key.pid, key.rdev, key.request);
    if (auto p = prev_.find(k); p != prev_.end()) {
      delta.count -= p->second.count;
      delta.errors -= p->second.errors;
      delta.total_ns -= p->second.total_ns;
    }
    if (exited)
      prev_.erase(k);
    else
      prev_[k] = v;
    if (delta.count) d.ioctls.push_back({key, delta});
  }
  std::sort(d.ioctls.begin(), d.ioctls.end(), [](auto& a, auto& b) {
    return std::tie(a.first.pid, b.second.count, a.first.rdev, a.first.request) <
           std::tie(b.first.pid, a.second.count, b.first.rdev, b.first.request);
  });
}

IoctlView::Deltas IoctlView::deltas(const IoctlSnapshot& snap) {
  Deltas d;
  ioctl_deltas(snap, d);
  for (auto& [mk, v, exited] : snap.mmaps) {
    auto& p = prev_mmap_[{mk.pid, mk.rdev}];
    gs_mmap_val delta = v;
    delta.count -= p.count;
    delta.bytes -= p.bytes;
    p = v;
    if (exited) prev_mmap_.erase({mk.pid, mk.rdev});
    if (delta.count) d.mmaps.push_back({mk, delta});
  }
  for (auto& [k, v, exited] : snap.opens) {
    auto& p = prev_opens_[{k.pid, k.rdev}];
    gs_open_val delta = v;
    delta.count -= p;
    p = v.count;
    if (exited) prev_opens_.erase({k.pid, k.rdev});
    if (delta.count) d.opens.push_back({k, delta});
  }
  std::sort(d.opens.begin(), d.opens.end(),
            [](auto& a, auto& b) { return std::tie(a.first.pid, a.first.rdev) < std::tie(b.first.pid, b.first.rdev); });
  return d;
}

void IoctlView::json(const Deltas& d) {
  const uint64_t now = realtime_ns();
  for (auto& [k, v] : d.opens) {
    JsonLine j(out_.buf());
    head(j, "open", now, k.pid, comm_of(v), k.rdev);
    j.num("count", v.count).num("first_ts_ns", static_cast<int64_t>(v.first_boot_ns) + realtime_offset_).end();
  }
  for (auto& [k, v] : d.ioctls) {
    auto r = decode_ioctl(kmajor(k.rdev), o_.uvm_major, k.request);
    JsonLine j(out_.buf());
    head(j, "ioctl", now, k.pid, comm_of(v), k.rdev);
    j.hex("request", k.request).str("name", r.name);
    if (r.ioc) j.str("dir", ioc_dir_name(r.dir)).num("ioc_type", r.type).num("nr", r.nr).num("size", r.size);
    j.num("count", v.count).num("errors", v.errors).num("total_ns", v.total_ns).num("max_ns", v.max_ns);
    j.end();
  }
  for (auto& [k, v] : d.mmaps) {
    JsonLine j(out_.buf());
    head(j, "mmap", now, k.pid, comm_of(v), k.rdev);
    j.num("count", v.count).num("bytes", v.bytes).end();
  }
}

void IoctlView::table(const Deltas& d) {
  auto it = std::back_inserter(out_.buf());
  if (o_.clock) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  fmt::format_to(it, "{:>7} {:<16} ", "PID", "COMM");
  where_.put_header(out_.buf());
  fmt::format_to(it, "{:<16} {:<40} {:>8} {:>7} {:>12} {:>10}\n", "DEVICE", "REQUEST", "COUNT", "ERRORS", "TOTAL_us",
                 "MAX_us");
  for (auto& [k, v] : d.ioctls) {
    auto r = decode_ioctl(kmajor(k.rdev), o_.uvm_major, k.request);
    std::string req = r.name.empty() ? fmt::format("0x{:x}", k.request) : r.name;
    if (r.ioc) req += fmt::format(" ({} nr=0x{:x} size={})", ioc_dir_name(r.dir), r.nr, r.size);
    fmt::format_to(it, "{:>7} {:<16} ", k.pid, comm_of(v));
    where_.put_cells(out_.buf(), static_cast<pid_t>(k.pid));
    fmt::format_to(it, "{:<16} {:<40} {:>8} {:>7} {:>12.1f} {:>10.1f}\n", shown(k.rdev) + " " + dev_str(k.rdev), req,
                   v.count, v.errors, v.total_ns / 1000.0, v.max_ns / 1000.0);
  }
  if (d.ioctls.empty()) fmt::format_to(it, "  (no ioctls on NVIDIA devices)\n");
  for (size_t i = 0; i < d.opens.size();) {
    uint32_t pid = d.opens[i].first.pid;
    fmt::format_to(it, "opened: pid {} ({}):", pid, comm_of(d.opens[i].second));
    for (; i < d.opens.size() && d.opens[i].first.pid == pid; i++) {
      auto& [k, v] = d.opens[i];
      fmt::format_to(it, " {} {} x{}", shown(k.rdev), dev_str(k.rdev), v.count);
    }
    fmt::format_to(it, "\n");
  }
  for (auto& [k, v] : d.mmaps)
    fmt::format_to(it, "mmap: pid {} ({}) {} {}: {} calls, {} bytes\n", k.pid, comm_of(v), shown(k.rdev),
                   dev_str(k.rdev), v.count, v.bytes);
  fmt::format_to(it, "\n");
}

std::vector<gs_ioctl_key> IoctlView::interval(const IoctlSnapshot& snap, bool final) {
  drivers_ = snap.drm_drivers;
  Deltas d = deltas(snap);
  if (o_.json)
    json(d);
  else if (!o_.events || final)
    table(d);
  out_.flush();
  std::vector<gs_ioctl_key> read;
  for (auto& [k, v] : d.ioctls) read.push_back(k);
  return read;
}

}  // namespace gpuscope

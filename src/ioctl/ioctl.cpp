#include <bpf/bpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "core/bpf.h"
#include "core/map_walk.h"
#include "core/clock.h"
#include "core/output.h"
#include "core/system.h"
#include "ioctl/decode.h"
#include "ioctl/ioctl.h"
#include "ioctl/ioctl_cmd.h"
#include "ioctl/ioctl_collector.h"

namespace gpuscope {

namespace {

unsigned kmajor(uint32_t rdev) { return rdev >> GS_KDEV_MINORBITS; }
unsigned kminor(uint32_t rdev) { return rdev & ((1u << GS_KDEV_MINORBITS) - 1); }

template <typename V>
std::string comm_of(const V& v) {
  return std::string(v.comm, strnlen(v.comm, sizeof v.comm));
}

class IoctlCounter {
 public:
  explicit IoctlCounter(const IoctlOptions& o) : o_(o) {}
  int run();

 private:
  void print(bool final);
  void on_event(const void* data, size_t size);
  std::string dev_str(uint32_t rdev) const { return fmt::format("{}:{}", kmajor(rdev), kminor(rdev)); }

  const IoctlOptions& o_;
  std::unique_ptr<IoctlCollector> c_;
  Writer out_;
  unsigned uvm_major_ = 0;
  std::map<gs_ioctl_key, gs_ioctl_val, bool (*)(const gs_ioctl_key&, const gs_ioctl_key&)> prev_{
      [](const gs_ioctl_key& a, const gs_ioctl_key& b) {
        return std::tie(a.pid, a.rdev, a.request) < std::tie(b.pid, b.rdev, b.request);
      }};
  std::map<std::pair<uint32_t, uint32_t>, gs_mmap_val> prev_mmap_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> prev_opens_;
  int64_t realtime_offset_ = realtime_minus_boottime_ns();
};

void IoctlCounter::on_event(const void* data, size_t size) {
  if (size < sizeof(gs_ioctl_event)) return;
  gs_ioctl_event e;
  memcpy(&e, data, sizeof e);
  auto req = decode_ioctl(kmajor(e.rdev), uvm_major_, e.request);
  std::string_view comm(e.comm, strnlen(e.comm, sizeof e.comm));
  std::string dev = nv_device_name(kmajor(e.rdev), kminor(e.rdev), uvm_major_);
  if (o_.json) {
    JsonLine j(out_.buf());
    j.str("type", "ioctl_event").num("ts_ns", static_cast<int64_t>(e.ts_boot_ns) + realtime_offset_);
    j.num("pid", e.pid).num("tid", e.tid).str("comm", comm).str("dev", dev_str(e.rdev)).str("device", dev);
    j.hex("request", e.request).str("name", req.name).num("ret", e.ret).num("dur_ns", e.dur_ns);
    j.end();
  } else {
    fmt::format_to(std::back_inserter(out_.buf()), "{:<16} {:>7} {:>7} {:<16} {:<36} ret={} dur={:.3f}us\n", comm,
                   e.pid, e.tid, dev, req.name.empty() ? fmt::format("0x{:x}", e.request) : req.name, e.ret,
                   static_cast<double>(e.dur_ns) / 1000.0);
  }
}

void IoctlCounter::print(bool final) {
  auto it = std::back_inserter(out_.buf());
  IoctlSnapshot snap = c_->snapshot();
  std::vector<std::pair<gs_ioctl_key, gs_ioctl_val>> rows;
  for (auto& [key, v, exited] : snap.ioctls) {
    gs_ioctl_val d = v;
    if (auto p = prev_.find(key); p != prev_.end()) {
      d.count -= p->second.count;
      d.errors -= p->second.errors;
      d.total_ns -= p->second.total_ns;
    }
    if (exited)
      prev_.erase(key);
    else
      prev_[key] = v;
    if (d.count) rows.push_back({key, d});
  }
  std::vector<gs_ioctl_key> read;
  for (auto& [k, v] : rows) read.push_back(k);
  c_->reset_max(read);
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) {
    return std::tie(a.first.pid, b.second.count, a.first.rdev, a.first.request) <
           std::tie(b.first.pid, a.second.count, b.first.rdev, b.first.request);
  });
  std::vector<std::pair<gs_mmap_key, gs_mmap_val>> maps;
  for (auto& [mk, v, exited] : snap.mmaps) {
    auto& p = prev_mmap_[{mk.pid, mk.rdev}];
    gs_mmap_val d = v;
    d.count -= p.count;
    d.bytes -= p.bytes;
    p = v;
    if (exited) prev_mmap_.erase({mk.pid, mk.rdev});
    if (d.count) maps.push_back({mk, d});
  }
  std::vector<std::pair<gs_open_key, gs_open_val>> opens;
  for (auto& [k, v, exited] : snap.opens) {
    auto& p = prev_opens_[{k.pid, k.rdev}];
    gs_open_val d = v;
    d.count -= p;
    p = v.count;
    if (exited) prev_opens_.erase({k.pid, k.rdev});
    if (d.count) opens.push_back({k, d});
  }
  std::sort(opens.begin(), opens.end(),
            [](auto& a, auto& b) { return std::tie(a.first.pid, a.first.rdev) < std::tie(b.first.pid, b.first.rdev); });
  if (o_.json) {
    for (auto& [k, v] : opens) {
      JsonLine j(out_.buf());
      j.str("type", "open").num("pid", k.pid).str("comm", comm_of(v)).str("dev", dev_str(k.rdev));
      j.str("device", nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_)).num("count", v.count);
      j.num("first_ts_ns", static_cast<int64_t>(v.first_boot_ns) + realtime_offset_).end();
    }
    for (auto& [k, v] : rows) {
      auto r = decode_ioctl(kmajor(k.rdev), uvm_major_, k.request);
      JsonLine j(out_.buf());
      j.str("type", "ioctl").num("pid", k.pid).str("comm", comm_of(v)).str("dev", dev_str(k.rdev));
      j.str("device", nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_)).hex("request", k.request);
      j.str("name", r.name);
      if (r.ioc) j.str("dir", ioc_dir_name(r.dir)).num("ioc_type", r.type).num("nr", r.nr).num("size", r.size);
      j.num("count", v.count).num("errors", v.errors).num("total_ns", v.total_ns).num("max_ns", v.max_ns);
      j.end();
    }
    for (auto& [k, v] : maps) {
      JsonLine j(out_.buf());
      j.str("type", "mmap").num("pid", k.pid).str("comm", comm_of(v)).str("dev", dev_str(k.rdev));
      j.str("device", nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_));
      j.num("count", v.count).num("bytes", v.bytes).end();
    }
  } else if (!o_.events || final) {
    if (o_.interval_s > 0) {
      time_t t = time(nullptr);
      struct tm tm;
      localtime_r(&t, &tm);
      fmt::format_to(it, "{:02}:{:02}:{:02}\n", tm.tm_hour, tm.tm_min, tm.tm_sec);
    }
    fmt::format_to(it, "{:>7} {:<16} {:<16} {:<40} {:>8} {:>7} {:>12} {:>10}\n", "PID", "COMM", "DEVICE", "REQUEST",
                   "COUNT", "ERRORS", "TOTAL_us", "MAX_us");
    for (auto& [k, v] : rows) {
      auto r = decode_ioctl(kmajor(k.rdev), uvm_major_, k.request);
      std::string req = r.name.empty() ? fmt::format("0x{:x}", k.request) : r.name;
      if (r.ioc) req += fmt::format(" ({} nr=0x{:x} size={})", ioc_dir_name(r.dir), r.nr, r.size);
      fmt::format_to(it, "{:>7} {:<16} {:<16} {:<40} {:>8} {:>7} {:>12.1f} {:>10.1f}\n", k.pid, comm_of(v),
                     nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_) + " " + dev_str(k.rdev), req, v.count,
                     v.errors, v.total_ns / 1000.0, v.max_ns / 1000.0);
    }
    if (rows.empty()) fmt::format_to(it, "  (no ioctls on NVIDIA devices)\n");
    for (size_t i = 0; i < opens.size();) {
      uint32_t pid = opens[i].first.pid;
      fmt::format_to(it, "opened: pid {} ({}):", pid, comm_of(opens[i].second));
      for (; i < opens.size() && opens[i].first.pid == pid; i++) {
        auto& [k, v] = opens[i];
        fmt::format_to(it, " {} {} x{}", nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_), dev_str(k.rdev),
                       v.count);
      }
      fmt::format_to(it, "\n");
    }
    for (auto& [k, v] : maps)
      fmt::format_to(it, "mmap: pid {} ({}) {} {}: {} calls, {} bytes\n", k.pid, comm_of(v),
                     nv_device_name(kmajor(k.rdev), kminor(k.rdev), uvm_major_), dev_str(k.rdev), v.count, v.bytes);
    fmt::format_to(it, "\n");
  }
  if (final) {
    IoctlStats s = c_->stats();
    uint64_t st = s.state_full, mf = s.map_full, rb = s.ringbuf;
    if (st || mf || rb)
      fprintf(stderr, "gpuscope: not counted: %llu (state map full), %llu (counter map full); %llu events lost\n",
              (unsigned long long)st, (unsigned long long)mf, (unsigned long long)rb);
  }
  out_.flush();
}

int IoctlCounter::run() {
  for (pid_t pid : o_.pids)
    if (!pid_exists(pid)) throw UsageError("pid " + std::to_string(pid) + " does not exist");
  require_bpf_privileges();
  set_libbpf_verbose(o_.verbose);
  c_ = std::make_unique<IoctlCollector>(IoctlCollector::Config{o_.pids, o_.comm, o_.events, o_.raw_syscalls});
  uvm_major_ = c_->uvm_major();
  bool raw = c_->raw();
  std::string why_raw = c_->why_raw();
  std::unique_ptr<RingBuffer> rb;
  if (o_.events)
    rb = std::make_unique<RingBuffer>(c_->events_fd(), [this](const void* d, size_t n) { on_event(d, n); });
  StopControl stop(o_.duration_s);
  fprintf(stderr, "gpuscope: counting ioctl/mmap on NVIDIA devices (major 195%s) via %s%s. Ctrl-C to end.\n",
          uvm_major_ ? fmt::format(", nvidia-uvm {}", uvm_major_).c_str() : "; no nvidia-uvm in /proc/devices",
          raw ? "raw_tp sys_enter/sys_exit" : "syscalls tracepoints", raw ? (" (" + why_raw + ")").c_str() : "");
  using clock = std::chrono::steady_clock;
  auto period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(o_.interval_s));
  auto next_print = clock::now() + period;
  while (!stop.should_stop()) {
    if (rb)
      rb->poll(100);
    else
      usleep(50000);
    out_.flush();
    if (o_.interval_s > 0 && clock::now() >= next_print) {
      print(false);
      next_print += period;
    }
    if (!o_.pids.empty()) {
      bool alive = false;
      for (pid_t p : o_.pids) alive |= pid_exists(p);
      if (!alive) break;
    }
  }
  c_->detach();
  if (rb) rb->drain();
  print(true);
  return 0;
}

}  // namespace

int run_ioctl(const IoctlOptions& opts) {
  IoctlCounter c(opts);
  return c.run();
}

}  // namespace gpuscope

#include "errors/errors_collector.h"

#include <bpf/bpf.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/bpf.h"
#include "core/clock.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/map_walk.h"
#include "core/system.h"
#include "errors.skel.h"
#include "errors/errors.h"
#include "errors/xid.h"

namespace gpuscope {

namespace {

// An Xid that the kernel log and NVML both report reaches us twice, this close.
constexpr uint64_t kSameXidNs = 2'000'000'000;

uint64_t mono_now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

// NVML writes the domain with 8 digits ("00000000:3B:00.0"), the kernel log with 4: kept in the
// kernel log's form.
std::string pci_key(const std::string& id) {
  std::string n = normalize_pci_bus_id(id);
  size_t colon = n.find(':');
  size_t zeros = 0;
  while (colon != std::string::npos && colon - zeros > 4 && n[zeros] == '0') zeros++;
  return n.substr(zeros);
}

uint64_t diff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

bool alive(uint32_t pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

}  // namespace

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::kXid: return "xid";
    case ErrorKind::kSticky: return "cuda_error";
    case ErrorKind::kNvmlEvent: return "nvml_event";
  }
  return "?";
}

ErrorsCollector::ErrorsCollector(UprobeSession& session, Config cfg, KernelsCollector* kernels)
    : cfg_(std::move(cfg)), skel_(nullptr, errors_bpf__destroy), kernels_(kernels) {
  real_minus_mono_ns_ = static_cast<int64_t>(realtime_ns()) - static_cast<int64_t>(mono_now_ns());
  if (cfg_.sticky) {
    bool multi = open_and_load_uprobes(skel_, errors_bpf__open, errors_bpf__load, [&](errors_bpf* skel) {
      apply_scope(skel, cfg_.scope);
      return std::vector<bpf_program*>{skel->progs.gs_err_ret};
    });
    session.add({{skel_->progs.gs_err_ret, true, apis_with_role(GS_ROLE_FAULT)}}, multi);
    hooks_.attach_exit(skel_->progs.gs_err_proc_exit);
    rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.err_events), [this](const void* d, size_t sz) {
      if (sz >= sizeof(gs_err_event)) on_sticky(*static_cast<const gs_err_event*>(d));
    });
    if (!kernels_) {
      KernelsCollector::Config kc;
      kc.scope = cfg_.scope;
      kc.track_last_launch = true;
      kc.stacks = cfg_.stacks;
      kc.stack_every = cfg_.stack_every;
      kc.site_skip = cfg_.site_skip;
      own_kernels_ = std::make_unique<KernelsCollector>(session, kc);
      // Its exits wait for poll(): a process's rows must outlive the reading of its sticky error.
      own_kernels_->defer_exits(true);
      kernels_ = own_kernels_.get();
    }
  }
  if (!cfg_.kmsg_path.empty()) {
    KmsgOptions ko;
    ko.path = cfg_.kmsg_path;
    ko.state_path = cfg_.kmsg_state;
    ko.from_start = cfg_.from_start;
    kmsg_ = KmsgReader::open(ko, &kmsg_error_);
    struct stat st;
    kmsg_file_ = kmsg_ && stat(cfg_.kmsg_path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }
  stats_.kmsg_open = kmsg_ != nullptr;
}

ErrorsCollector::~ErrorsCollector() {
  if (kmsg_) kmsg_->save_state();
}

void ErrorsCollector::start(UprobeSession& session) {
  if (own_kernels_) own_kernels_->start(session);
}

void ErrorsCollector::watch(EventLoop& loop) {
  // Before the kernels' ring: a sticky error is named before its process's exit is read.
  if (rb_) loop.watch(*rb_);
  if (own_kernels_) own_kernels_->watch(loop);
  loop.after_wakeup([this] { poll(); });
  loop.every(0.2, [this] { poll(); });
}

void ErrorsCollector::detach() { hooks_.detach(); }

uint64_t ErrorsCollector::mono_to_realtime(uint64_t mono_ns) const {
  return static_cast<uint64_t>(static_cast<int64_t>(mono_ns) + real_minus_mono_ns_);
}

void ErrorsCollector::poll() {
  if (rb_) rb_->drain();
  if (own_kernels_) {
    own_kernels_->tick();
    own_kernels_->finish_exits();
  }
  take_kmsg();
  if (skel_) read_counts();
}

ContainerInfo ErrorsCollector::container_of(uint32_t pid, uint64_t cgroup_id) {
  ContainerInfo c = cfg_.scope.containers->of(static_cast<pid_t>(pid));
  if (!c.resolved && cgroup_id) c = cfg_.scope.containers->of_cgroup(static_cast<pid_t>(pid), cgroup_id);
  return c;
}

void ErrorsCollector::on_sticky(const gs_err_event& e) {
  GpuError r;
  {
    // A second thread's, sent in the same instant as the first: counted, not a record.
    std::lock_guard lk(mu_);
    for (auto& o : records_)
      if (o.kind == ErrorKind::kSticky && o.pid == e.pid) {
        StickyKey k{e.pid, e.api, e.code};
        bpf_later_[k]++;
        if (auto it = sticky_counts_.find(k); it != sticky_counts_.end()) it->second.count++;
        return;
      }
  }
  r.kind = ErrorKind::kSticky;
  r.realtime_ns = mono_to_realtime(e.ts_ns);
  r.pid = e.pid;
  r.tid = e.tid;
  r.comm.assign(e.comm, strnlen(e.comm, sizeof e.comm));
  if (!cfg_.scope.wants(e.pid, r.comm)) return;
  r.cgroup_id = e.cgroup_id;
  r.container = container_of(e.pid, e.cgroup_id);
  r.api = e.api;
  r.api_name = api_symbol(e.api);
  const bool runtime = api_desc(e.api).layer == GS_LAYER_RUNTIME;
  r.layer = layer_name(api_desc(e.api).layer);
  r.code = e.code;
  r.code_name = runtime ? cuda_runtime_error_name(e.code) : cuda_driver_error_name(e.code);
  r.last_ok_sync_ns = e.last_ok_sync_ns ? mono_to_realtime(e.last_ok_sync_ns) : 0;
  if (kernels_) {
    r.kernels_since = kernels_->launched_since(e.pid, e.last_ok_sync_ns, cfg_.max_kernels + 1);
    if (r.kernels_since.size() > cfg_.max_kernels) {
      r.kernels_since.resize(cfg_.max_kernels);
      r.kernels_truncated = true;
    }
  }
  std::lock_guard lk(mu_);
  stats_.sticky_events++;
  add(std::move(r));
}

void ErrorsCollector::take_kmsg() {
  if (!kmsg_) return;
  std::vector<XidEvent> xs = kmsg_->poll();
  for (auto& x : xs) {
    GpuError r;
    r.kind = ErrorKind::kXid;
    // A replayed log's times are of another boot: its records are as of now.
    r.realtime_ns = !kmsg_file_ && x.ts_boot_us ? mono_to_realtime(x.ts_boot_us * 1000) : realtime_ns();
    r.device.pci_bus_id = x.pci_bus_id;
    r.xid = x.xid;
    r.info = xid_info(x.xid);
    r.from_kmsg = true;
    r.injected = x.injected;
    r.kmsg_seq = x.seq;
    r.kmsg_ts_us = x.ts_boot_us;
    r.message = x.message;
    r.gpu_instance = x.gpu_instance;
    r.compute_instance = x.compute_instance;
    if (x.pid) {
      r.pid = static_cast<uint32_t>(*x.pid);
      r.comm = x.comm;
      if (!cfg_.scope.wants_pid(*r.pid) || !(cfg_.scope.comm.empty() || cfg_.scope.comm == r.comm)) continue;
      // The pid of a saved log may be another process's by now: the container is read only
      // where the running process has the name the driver gave.
      std::string now = proc_comm(static_cast<pid_t>(*r.pid));
      if (!now.empty() && !r.comm.empty() && r.comm.compare(0, now.size(), now) == 0)
        r.container = container_of(*r.pid, 0);
      if (cfg_.scope.where.active() && !cfg_.scope.where.matches(r.container)) continue;
    }
    std::lock_guard lk(mu_);
    fill_device(r.device);
    add(std::move(r));
  }
  std::lock_guard lk(mu_);
  stats_.kmsg = kmsg_->stats();
}

void ErrorsCollector::add_nvml_event(const NvmlXid& e) {
  GpuError r;
  r.kind = e.event_type == kNvmlEventXid ? ErrorKind::kXid : ErrorKind::kNvmlEvent;
  r.realtime_ns = e.realtime_ns ? e.realtime_ns : realtime_ns();
  r.device = {e.gpu_index, e.uuid, pci_key(e.pci_bus_id)};
  if (r.kind == ErrorKind::kXid) {
    r.xid = static_cast<int>(e.data);
    r.info = xid_info(r.xid);
  }
  r.from_nvml = true;
  r.nvml_event_type = e.event_type;
  r.nvml_event = e.event_name.empty() && r.kind == ErrorKind::kXid ? "xid" : e.event_name;
  r.gpu_instance = e.gpu_instance;
  r.compute_instance = e.compute_instance;
  std::lock_guard lk(mu_);
  stats_.nvml_events++;
  fill_device(r.device);
  add(std::move(r));
}

void ErrorsCollector::set_devices(std::vector<GpuDevice> devices) {
  std::lock_guard lk(mu_);
  devices_ = std::move(devices);
}

void ErrorsCollector::fill_device(GpuDevice& d) const {
  for (auto& g : devices_) {
    bool same = (!d.pci_bus_id.empty() && pci_key(d.pci_bus_id) == pci_key(g.pci_bus_id)) ||
                (!d.uuid.empty() && d.uuid == g.uuid) || (d.pci_bus_id.empty() && d.uuid.empty() && d.index == g.index);
    if (!same) continue;
    if (d.index < 0) d.index = g.index;
    if (d.uuid.empty()) d.uuid = g.uuid;
    if (d.pci_bus_id.empty()) d.pci_bus_id = pci_key(g.pci_bus_id);
    return;
  }
}

void ErrorsCollector::add(GpuError r) {
  // One Xid, reported by both the kernel log and NVML: one record, with what each knows.
  if (r.kind == ErrorKind::kXid)
    for (auto& o : records_) {
      if (o.kind != ErrorKind::kXid || o.xid != r.xid || diff(o.realtime_ns, r.realtime_ns) > kSameXidNs) continue;
      if ((o.from_kmsg && r.from_kmsg) || (o.from_nvml && r.from_nvml)) continue;
      bool same_dev = (!o.device.pci_bus_id.empty() && pci_key(o.device.pci_bus_id) == pci_key(r.device.pci_bus_id)) ||
                      (o.device.index >= 0 && o.device.index == r.device.index);
      if (!same_dev) continue;
      o.from_kmsg |= r.from_kmsg;
      o.from_nvml |= r.from_nvml;
      if (o.device.index < 0) o.device.index = r.device.index;
      if (o.device.uuid.empty()) o.device.uuid = r.device.uuid;
      if (o.device.pci_bus_id.empty()) o.device.pci_bus_id = r.device.pci_bus_id;
      if (!o.pid && r.pid) o.pid = r.pid, o.comm = r.comm, o.container = r.container;
      if (r.from_kmsg) o.kmsg_seq = r.kmsg_seq, o.kmsg_ts_us = r.kmsg_ts_us, o.message = r.message;
      if (r.from_nvml) o.nvml_event_type = r.nvml_event_type, o.nvml_event = r.nvml_event;
      return;
    }
  r.id = next_id_++;
  const uint64_t window = static_cast<uint64_t>(cfg_.window_s * 1e9);
  if (r.pid && r.kind != ErrorKind::kNvmlEvent) {
    const ErrorKind other = r.kind == ErrorKind::kSticky ? ErrorKind::kXid : ErrorKind::kSticky;
    for (auto it = records_.rbegin(); it != records_.rend(); ++it)
      if (it->kind == other && it->pid == r.pid && !it->joined && diff(it->realtime_ns, r.realtime_ns) <= window) {
        it->joined = r.id;
        r.joined = it->id;
        break;
      }
  }
  if (r.kind != ErrorKind::kSticky) {
    XidKey k{r.device.index, r.device.uuid, r.device.pci_bus_id, r.xid, r.pid ? *r.pid + 1 : 0, r.comm};
    auto it = xid_counts_.find(k);
    if (it == xid_counts_.end() && xid_counts_.size() >= kMaxCounts)
      stats_.counts_dropped++;
    else if (it == xid_counts_.end())
      xid_counts_.emplace(k, XidCount{r.device, r.xid, r.info.cls, r.pid, r.comm, r.container, 1});
    else
      it->second.count++;
  } else {
    StickyKey k{*r.pid, r.api, r.code};
    if (sticky_counts_.size() >= kMaxCounts && !sticky_counts_.count(k)) {
      stats_.counts_dropped++;
    } else {
      auto& c = sticky_counts_[k];
      c = {*r.pid,           r.comm,
           r.container,      r.api,
           r.code,           r.kernels_since.empty() ? "" : r.kernels_since.front().kernel,
           1 + bpf_later_[k]};
    }
  }
  records_.push_back(std::move(r));
  waiting_.push_back(records_.back().id);
  if (records_.size() > cfg_.max_records) {
    std::erase(waiting_, records_.front().id);
    records_.pop_front();
    stats_.records_dropped++;
  }
}

// The later sticky errors of each (pid, api, code), counted in BPF; a process gone has its
// entries folded in here and deleted there.
void ErrorsCollector::read_counts() {
  int fd = bpf_map__fd(skel_->maps.err_counts);
  std::vector<gs_err_count_key> gone;
  std::map<StickyKey, uint64_t> now;
  for_each_entry<gs_err_count_key, uint64_t>(fd, [&](const gs_err_count_key& k, uint64_t n) {
    now[{k.pid, k.api, k.code}] = n;
    if (!alive(k.pid)) gone.push_back(k);
  });
  std::lock_guard lk(mu_);
  for (auto& [k, n] : now) {
    uint64_t& later = bpf_later_[k];
    const uint64_t before = later;
    later = std::max(later, n);
    auto it = sticky_counts_.find(k);
    if (it != sticky_counts_.end()) {
      // What BPF counted since the last read: a key first met here has no record of its own.
      it->second.count += later - before;
      continue;
    }
    if (sticky_counts_.size() >= kMaxCounts) {
      stats_.counts_dropped++;
      continue;
    }
    // Another call or code after the first: named as the process's first record names it.
    StickyCount c{std::get<0>(k), "", {}, std::get<1>(k), std::get<2>(k), "", later};
    for (auto& r : records_)
      if (r.kind == ErrorKind::kSticky && r.pid == std::get<0>(k)) {
        c.comm = r.comm, c.container = r.container;
        if (!r.kernels_since.empty()) c.first_kernel = r.kernels_since.front().kernel;
        break;
      }
    sticky_counts_.emplace(k, c);
  }
  for (auto& k : gone) bpf_map_delete_elem(fd, &k);
  // Only the keys of processes still counting are needed to take the maximum again.
  for (auto& k : gone) {
    StickyKey sk{k.pid, k.api, k.code};
    if (!sticky_counts_.count(sk)) bpf_later_.erase(sk);
  }
  if (bpf_later_.size() > kMaxCounts) bpf_later_.clear();
}

std::vector<GpuError> ErrorsCollector::take_ready(bool all) {
  std::lock_guard lk(mu_);
  std::vector<GpuError> out;
  const uint64_t now = realtime_ns();
  const uint64_t window = static_cast<uint64_t>(cfg_.window_s * 1e9);
  std::deque<uint64_t> still;
  for (uint64_t id : waiting_) {
    auto r = std::find_if(records_.begin(), records_.end(), [&](const GpuError& e) { return e.id == id; });
    if (r == records_.end()) continue;
    // Only a record that may still be joined waits, and only while the other source is read.
    bool may_join =
        r->pid && !r->joined && ((r->kind == ErrorKind::kSticky && kmsg_) || (r->kind == ErrorKind::kXid && skel_));
    if (all || !may_join || now >= r->realtime_ns + window)
      out.push_back(*r);
    else
      still.push_back(id);
  }
  waiting_ = std::move(still);
  return out;
}

std::vector<GpuError> ErrorsCollector::records() const {
  std::lock_guard lk(mu_);
  return {records_.begin(), records_.end()};
}

std::vector<XidCount> ErrorsCollector::xid_counts() const {
  std::lock_guard lk(mu_);
  std::vector<XidCount> v;
  for (auto& [_, c] : xid_counts_) v.push_back(c);
  return v;
}

std::vector<StickyCount> ErrorsCollector::sticky_counts() const {
  std::lock_guard lk(mu_);
  std::vector<StickyCount> v;
  for (auto& [_, c] : sticky_counts_) v.push_back(c);
  return v;
}

ErrorsStats ErrorsCollector::stats() const {
  std::lock_guard lk(mu_);
  ErrorsStats s = stats_;
  if (skel_) {
    int fd = bpf_map__fd(skel_->maps.err_drops);
    s.bpf_lost_events = percpu_sum(fd, GS_ERR_DROP_EVENTS);
    s.bpf_procs_full = percpu_sum(fd, GS_ERR_DROP_PROCS_FULL);
    s.bpf_counts_full = percpu_sum(fd, GS_ERR_DROP_COUNTS_FULL);
  }
  return s;
}

}  // namespace gpuscope

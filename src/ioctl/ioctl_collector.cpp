#include "ioctl/ioctl_collector.h"

#include <bpf/bpf.h>

#include <cstring>
#include <map>
#include <set>

#include "core/map_walk.h"
#include "core/system.h"
#include "ioctl.skel.h"
#include "ioctl/decode.h"

namespace gpuscope {

void IoctlCollector::SkelDeleter::operator()(ioctl_bpf* s) const { ioctl_bpf__destroy(s); }

IoctlCollector::IoctlCollector(Config cfg) : cfg_(std::move(cfg)) {
  uvm_major_ = parse_uvm_major(read_file_opt("/proc/devices").value_or(""));
  raw_ = cfg_.raw_syscalls;
  if (!raw_ && !ensure_tracefs(&why_raw_)) raw_ = true;
  if (cfg_.raw_syscalls) why_raw_ = "--raw-syscalls";
  skel_.reset(ioctl_bpf__open());
  if (!skel_) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
  skel_->rodata->uvm_major = uvm_major_;
  skel_->rodata->emit_events = cfg_.events;
  skel_->rodata->filter_pids = !cfg_.scope.pids.empty();
  apply_scope(skel_.get(), cfg_.scope);
  // tp/sys_exit_ioctl rather than raw_tp/sys_exit: the latter would tax every syscall on the
  // host (about +100 ns each, measured), the former only ioctls.
  for (bpf_program* p : {skel_->progs.gs_ioctl_enter, skel_->progs.gs_ioctl_exit, skel_->progs.gs_mmap_enter,
                         skel_->progs.gs_openat_exit, skel_->progs.gs_openat2_exit})
    bpf_program__set_autoload(p, !raw_);
  for (bpf_program* p : {skel_->progs.gs_raw_enter, skel_->progs.gs_raw_exit}) bpf_program__set_autoload(p, raw_);
  if (!cfg_.events) bpf_map__set_max_entries(skel_->maps.events, 4096);
  bpf_map__set_max_entries(skel_->maps.ioctls, cfg_.max_rows);
  if (int err = ioctl_bpf__load(skel_.get()))
    throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) + " (try 'gpuscope doctor')");
  for (pid_t pid : cfg_.scope.pids) {
    uint32_t k = pid;
    uint8_t one = 1;
    bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &k, &one, BPF_ANY);
  }
  // Exits first: an enter without its exit program would leave calls in flight.
  std::vector<bpf_program*> order =
      raw_ ? std::vector<bpf_program*>{skel_->progs.gs_raw_exit, skel_->progs.gs_raw_enter}
           : std::vector<bpf_program*>{skel_->progs.gs_ioctl_exit, skel_->progs.gs_ioctl_enter,
                                       skel_->progs.gs_mmap_enter, skel_->progs.gs_openat_exit,
                                       skel_->progs.gs_openat2_exit};
  for (bpf_program* p : order) {
    bpf_link* l = bpf_program__attach(p);
    if (!l && p == skel_->progs.gs_openat2_exit) continue;  // kernels before 5.6 have no openat2
    if (!l) {
      int err = errno;
      destroy_links(links_);
      throw UsageError(std::string("cannot attach ") + bpf_program__section_name(p) + ": " + strerror(err));
    }
    links_.emplace_back(l);
  }
}

IoctlCollector::~IoctlCollector() { detach(); }

void IoctlCollector::detach() { destroy_links(links_); }

IoctlSnapshot IoctlCollector::snapshot() {
  // Processes gone before the walk make no call during it: the walk holds their final values.
  std::set<uint32_t> gone;
  for (uint32_t pid : known_)
    if (!pid_exists(static_cast<pid_t>(pid))) gone.insert(pid);
  int fd = bpf_map__fd(skel_->maps.ioctls), mfd = bpf_map__fd(skel_->maps.mmaps), ofd = bpf_map__fd(skel_->maps.opens);
  IoctlSnapshot s;
  known_.clear();
  for_each_entry<gs_ioctl_key, gs_ioctl_val>(fd, [&](const gs_ioctl_key& k, const gs_ioctl_val& v) {
    s.ioctls.push_back({k, v, gone.count(k.pid) > 0});
    if (!s.ioctls.back().exited) known_.insert(k.pid);
  });
  for_each_entry<gs_mmap_key, gs_mmap_val>(mfd, [&](const gs_mmap_key& k, const gs_mmap_val& v) {
    s.mmaps.push_back({k, v, gone.count(k.pid) > 0});
    if (!s.mmaps.back().exited) known_.insert(k.pid);
  });
  for_each_entry<gs_open_key, gs_open_val>(ofd, [&](const gs_open_key& k, const gs_open_val& v) {
    s.opens.push_back({k, v, gone.count(k.pid) > 0});
    if (!s.opens.back().exited) known_.insert(k.pid);
  });
  for_each_entry<uint32_t, gs_drm_driver>(bpf_map__fd(skel_->maps.drm_drivers),
                                          [&](const uint32_t& rdev, const gs_drm_driver& d) {
                                            s.drm_drivers[rdev] = std::string(d.name, strnlen(d.name, sizeof d.name));
                                          });
  for (auto& r : s.ioctls)
    if (r.exited) bpf_map_delete_elem(fd, &r.key);
  for (auto& r : s.opens)
    if (r.exited) bpf_map_delete_elem(ofd, &r.key);
  for (auto& r : s.mmaps)
    if (r.exited) bpf_map_delete_elem(mfd, &r.key);
  return s;
}

void IoctlCollector::reset_max(const std::vector<gs_ioctl_key>& keys) {
  int fd = bpf_map__fd(skel_->maps.ioctls);
  for (auto& k : keys) {
    gs_ioctl_val v{};
    if (bpf_map_lookup_elem(fd, &k, &v) == 0) {
      v.max_ns = 0;
      bpf_map_update_elem(fd, &k, &v, BPF_EXIST);
    }
  }
}

int IoctlCollector::events_fd() const { return bpf_map__fd(skel_->maps.events); }

IoctlStats IoctlCollector::stats() const {
  int dfd = bpf_map__fd(skel_->maps.drops);
  return {percpu_sum(dfd, GS_IOCTL_DROP_STATE_FULL), percpu_sum(dfd, GS_IOCTL_DROP_MAP_FULL),
          percpu_sum(dfd, GS_IOCTL_DROP_RINGBUF)};
}

}  // namespace gpuscope

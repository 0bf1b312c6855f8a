#include "copies/copies_collector.h"

#include <bpf/bpf.h>

#include <cstring>
#include <tuple>

#include "copies.skel.h"
#include "copies/copies.h"
#include "core/map_walk.h"
#include "core/system.h"

namespace gpuscope {

const char* copy_direction_name(unsigned dir) {
  static const char* const names[GS_DIR_COUNT] = {"H2H", "H2D", "D2H", "D2D", "default", "peer", "memset"};
  return dir < GS_DIR_COUNT ? names[dir] : "?";
}

unsigned copy_direction_of_cupti(unsigned memcpy_kind) {
  // CUPTI_ACTIVITY_MEMCPY_KIND_: 1 HTOD, 2 DTOH, 3 HTOA, 4 ATOH, 5 ATOA, 6 ATOD, 7 DTOA, 8 DTOD,
  // 9 HTOH, 10 PTOP (cupti_activity.h).
  switch (memcpy_kind) {
    case 1:
    case 3: return GS_DIR_H2D;
    case 2:
    case 4: return GS_DIR_D2H;
    case 5:
    case 6:
    case 7:
    case 8: return GS_DIR_D2D;
    case 9: return GS_DIR_H2H;
    case 10: return GS_DIR_PEER;
  }
  return GS_DIR_DEFAULT;
}

CopiesCollector::CopiesCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), skel_(nullptr, copies_bpf__destroy) {
  bool multi = open_and_load_uprobes(skel_, copies_bpf__open, copies_bpf__load, [&](copies_bpf* skel) {
    apply_scope(skel, cfg_.scope);
    if (cfg_.max_rows) bpf_map__set_max_entries(skel->maps.counts, cfg_.max_rows);
    return std::vector<bpf_program*>{skel->progs.gs_cp_enter, skel->progs.gs_cp_exit};
  });
  std::vector<bool> rows = apis_with_role(GS_ROLE_COPY);
  session.add({{skel_->progs.gs_cp_enter, false, rows}, {skel_->progs.gs_cp_exit, true, rows}}, multi);
  hooks_.attach_exit(skel_->progs.gs_cp_proc_exit);
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.events), [this](const void* d, size_t sz) {
    if (sz < sizeof(gs_cp_event)) return;
    auto* e = static_cast<const gs_cp_event*>(d);
    std::string& c = comms_[e->pid];
    if (c.empty()) c.assign(e->comm, strnlen(e->comm, GS_COMM_LEN));
    exited_.insert(e->pid);
  });
}

CopiesCollector::~CopiesCollector() = default;

std::vector<CopyRow> CopiesCollector::snapshot() {
  // Exits first: a process whose exit is read here has all its copies in the map already.
  rb_->drain();
  std::set<uint32_t> gone = std::move(exited_);
  exited_.clear();
  std::map<std::pair<uint32_t, unsigned>, CopyRow> rows;
  std::vector<gs_cp_key> drop;
  int fd = bpf_map__fd(skel_->maps.counts);
  for_each_entry<gs_cp_key, gs_cp_val>(fd, [&](const gs_cp_key& k, const gs_cp_val& v) {
    CopyRow& r = rows[{k.pid, k.dir}];
    if (r.comm.empty()) {
      std::string& c = comms_[k.pid];
      if (c.empty()) c = proc_comm(static_cast<pid_t>(k.pid));
      r.pid = k.pid;
      r.comm = c;
      r.cgroup_id = v.cgroup_id;
      r.direction = k.dir;
      r.exited = gone.count(k.pid) != 0;
    }
    r.calls += v.calls;
    r.bytes += v.bytes;
    r.failed += v.failed;
    if (r.exited) drop.push_back(k);
  });
  for (auto& k : drop) bpf_map_delete_elem(fd, &k);
  for (uint32_t pid : gone) comms_.erase(pid);
  std::vector<CopyRow> out;
  out.reserve(rows.size());
  for (auto& [_, r] : rows) out.push_back(std::move(r));
  return out;
}

CopiesCollector::Stats CopiesCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.drops);
  return {percpu_sum(fd, GS_CP_DROP_ROWS_FULL), percpu_sum(fd, GS_CP_DROP_NO_STATE), percpu_sum(fd, GS_CP_DROP_EVENTS)};
}

}  // namespace gpuscope

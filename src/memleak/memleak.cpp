#include "memleak/memleak_collector.h"

#include <bpf/bpf.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/map_walk.h"
#include "core/system.h"
#include "memleak.skel.h"

namespace gpuscope {

namespace {

std::string error_name(unsigned layer, int code) {
  return layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(code) : cuda_driver_error_name(code);
}

uint64_t boot_ns() {
  timespec t;
  clock_gettime(CLOCK_BOOTTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

void add_device(std::map<int32_t, MemleakDevice>& devs, const gs_ml_key& k, const gs_ml_alloc& a) {
  if (k.space == GS_ML_SPACE_MAPPING || a.category == GS_MEM_PINNED) return;
  auto& d = devs[a.device];
  d.device = a.device;
  d.outstanding_bytes += a.size_bytes;
  d.outstanding_allocs++;
}

std::vector<MemleakDevice> device_list(const std::map<int32_t, MemleakDevice>& devs) {
  std::vector<MemleakDevice> r;
  for (auto& [dev, d] : devs) r.push_back(d);
  return r;
}

// Deletes the entries `pred` accepts.
template <class K, class V, class Pred>
void delete_where(int fd, Pred pred) {
  std::vector<K> dead;
  for_each_entry<K, V>(fd, [&](const K& k, const V& v) {
    if (pred(k, v)) dead.push_back(k);
  });
  for (auto& k : dead) bpf_map_delete_elem(fd, &k);
}

}  // namespace

MemleakCollector::MemleakCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), skel_(nullptr, memleak_bpf__destroy) {
  bool multi = open_and_load_uprobes(skel_, memleak_bpf__open, memleak_bpf__load, [&](memleak_bpf* skel) {
    auto* ro = skel->rodata;
    apply_scope(skel, cfg_.scope);
    ro->capture_stacks = cfg_.stacks;
    ro->py_walk = cfg_.stacks && cfg_.py_frames;
    if (!ro->py_walk) {
      // The walk's maps are never touched without it.
      bpf_map__set_max_entries(skel->maps.gs_py_procs, 1);
      bpf_map__set_max_entries(skel->maps.gs_py_tstates, 1);
      bpf_map__set_max_entries(skel->maps.gs_py_stacks, 1);
    }
    uint32_t allocs = cfg_.max_allocs ? cfg_.max_allocs : GS_ML_MAX_ALLOCS;
    bpf_map__set_max_entries(skel->maps.ml_allocs, allocs);
    if (cfg_.max_procs) bpf_map__set_max_entries(skel->maps.ml_procs, cfg_.max_procs);
    if (cfg_.stacks) bpf_map__set_max_entries(skel->maps.ml_stacks, allocs);
    return std::vector<bpf_program*>{skel->progs.ml_enter, skel->progs.ml_exit};
  });
  hooks_.attach_exit(skel_->progs.ml_proc_exit);
  exec_hook_ = hooks_.attach(skel_->progs.ml_proc_exec);
  auto rows = apis_with_role(GS_ROLE_MEM | GS_ROLE_CONTEXT);
  session.add({{skel_->progs.ml_enter, false, rows}, {skel_->progs.ml_exit, true, rows}}, multi,
              [this](const CudaObject&) { attached_new_ = true; });
  if (skel_->rodata->py_walk) {
    auto& m = skel_->maps;
    py_ = std::make_unique<PyStacks>(
        PyStacks::Maps{bpf_map__fd(m.gs_py_procs), bpf_map__fd(m.gs_py_tstates), bpf_map__fd(m.gs_py_stacks),
                       bpf_map__fd(m.gs_py_counters), bpf_map__fd(m.gs_py_events)},
        [this](const std::string& line) {
          if (note_) note_(line);
        });
  }
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.ml_events), [this](const void* d, size_t sz) {
    if (sz >= sizeof(gs_ml_event)) on_event(*static_cast<const gs_ml_event*>(d));
  });
}

MemleakCollector::~MemleakCollector() = default;

void MemleakCollector::set_watch_point() { skel_->bss->watch_since_ns = boot_ns(); }

void MemleakCollector::start(UprobeSession& session) {
  set_watch_point();
  skel_->bss->session_start_ns = skel_->bss->watch_since_ns;
  attached_new_ = false;
  if (cfg_.stacks) {
    for (pid_t p : cfg_.scope.pids) stacks_.snapshot(p);
    // A process that maps a CUDA library is about to allocate: its interpreter is found now.
    for (pid_t p : session.initial_pids())
      if (py_) py_->track(p);
    session.on_maps_changed([this](pid_t p) {
      stacks_.snapshot(p);
      if (py_) py_->track(p);
    });
  }
}

void MemleakCollector::watch(EventLoop& loop) {
  loop.watch(*rb_);
  if (py_) loop.watch(py_->events());
}

const std::string& MemleakCollector::comm_of(uint32_t pid) {
  auto& c = comms_[pid];
  if (c.empty()) c = proc_comm(static_cast<pid_t>(pid));
  return c;
}

void MemleakCollector::on_event(const gs_ml_event& e) {
  if (e.type == GS_ML_EV_EXIT || e.type == GS_ML_EV_EXEC) {
    std::string comm = comms_.count(e.pid) && !comms_[e.pid].empty()
                           ? comms_[e.pid]
                           : std::string(e.comm, strnlen(e.comm, sizeof e.comm));
    pending_.push_back(
        {{e.pid, e.counters.gen_ns}, e.type == GS_ML_EV_EXIT ? "exited" : "exec", comm, e.ts_boot_ns, e.counters});
    return;
  }
  auto& comm = comms_[e.pid];
  if (comm.empty()) comm = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  if (e.type == GS_ML_EV_CTX_RELEASED) {
    if (!ctx_sink_) return;
    bool primary = GS_ML_IS_PRIMARY_CTX(e.addr);
    ctx_sink_({e.pid, comm, e.addr, primary, e.device, e.site, e.layer, e.counters.outstanding_bytes,
               e.counters.outstanding_allocs, e.counters.pinned_bytes, e.counters.pinned_allocs});
    return;
  }
  if (free_sink_) free_sink_({e.type == GS_ML_EV_BAD_FREE, e.pid, comm, e.addr, e.site, e.layer, e.reason, e.ret});
}

std::map<MemleakCollector::Life, MemleakErrors> MemleakCollector::read_errors(uint8_t op,
                                                                              const std::set<uint32_t>* only) {
  std::map<Life, MemleakErrors> r;
  for_each_entry<gs_ml_err_key, gs_ml_err_val>(
      bpf_map__fd(skel_->maps.ml_errors), [&](const gs_ml_err_key& k, const gs_ml_err_val& v) {
        if (k.op != op || (only && !only->count(k.pid))) return;
        r[{k.pid, v.gen_ns}].emplace_back(error_name(k.layer, k.code), v.count);
      });
  return r;
}

MemleakLeak MemleakCollector::leak_row(const gs_ml_key& k, const gs_ml_alloc& a, uint64_t now, const std::string& comm,
                                       const std::string& state, uint64_t mapped_at) {
  MemleakLeak r;
  r.pid = k.pid;
  r.comm = comm;
  r.state = state;
  r.addr = k.space == GS_ML_SPACE_HANDLE && mapped_at ? mapped_at : k.addr;
  r.size = a.size_bytes;
  r.age_ns = now > a.ts_boot_ns ? now - a.ts_boot_ns : 0;
  r.ts_boot_ns = a.ts_boot_ns;
  r.api = a.site;
  r.layer = a.layer;
  r.category = a.category;
  r.device = a.device;
  if (k.space == GS_ML_SPACE_HANDLE) {
    r.vmm_handle = true;
    r.handle = k.addr;
    r.released = a.vmm_released != 0;
    r.mappings = a.vmm_mappings;
  }
  return r;
}

void MemleakCollector::read_stack(const gs_ml_key& k, MemleakLeak& row) {
  if (!cfg_.stacks) return;
  gs_ml_stack s{};
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.ml_stacks), &k, &s) == 0)
    for (uint64_t ip : s.ips) {
      // A frame-pointer walk that leaves code built without frame pointers (libc's start
      // code) reads data as the next return address: stop at one no user mapping can hold.
      if (!ip || ip >= 0x800000000000ULL) break;
      row.stack.push_back(stacks_.user(static_cast<pid_t>(k.pid), ip, true, true));
    }
  if (py_ && s.py_hash) row.stack = py_merge(row.stack, py_->frames(static_cast<pid_t>(k.pid), s.py_hash));
}

// Final rows of processes that exited or exec'd, then their state is deleted: allocations,
// stacks, freed addresses and error counts of that life of the pid, and nothing newer.
void MemleakCollector::finish(const std::vector<Ending>& ends) {
  if (ends.empty()) return;
  std::map<Life, const Ending*> by_life;
  std::set<uint32_t> pids;
  for (auto& e : ends) by_life[e.life] = &e, pids.insert(e.life.pid);
  auto alloc_errs = read_errors(GS_ML_OP_ALLOC, &pids);
  auto free_errs = read_errors(GS_ML_OP_FREE, &pids);

  struct Entry {
    gs_ml_key k;
    gs_ml_alloc a;
  };
  std::map<Life, std::vector<Entry>> entries;
  int afd = bpf_map__fd(skel_->maps.ml_allocs);
  for_each_entry<gs_ml_key, gs_ml_alloc>(afd, [&](const gs_ml_key& k, const gs_ml_alloc& a) {
    if (by_life.count({k.pid, k.gen_ns})) entries[{k.pid, k.gen_ns}].push_back({k, a});
  });

  for (auto& [life, end] : by_life) {
    auto& es = entries[life];
    std::map<uint64_t, uint64_t> mapped_at;  // handle -> lowest virtual address it is mapped at
    for (auto& e : es)
      if (e.k.space == GS_ML_SPACE_MAPPING && (!mapped_at.count(e.a.handle) || e.k.addr < mapped_at[e.a.handle]))
        mapped_at[e.a.handle] = e.k.addr;
    std::vector<MemleakLeak> rows;
    std::map<int32_t, MemleakDevice> devs;
    for (auto& e : es) add_device(devs, e.k, e.a);
    for (auto& e : es)
      if (e.k.space != GS_ML_SPACE_MAPPING) {
        rows.push_back(leak_row(e.k, e.a, end->ts_boot_ns, end->comm, end->state,
                                mapped_at.count(e.k.addr) ? mapped_at[e.k.addr] : 0));
        read_stack(e.k, rows.back());
      }
    std::sort(rows.begin(), rows.end(), [](const MemleakLeak& a, const MemleakLeak& b) { return a.age_ns > b.age_ns; });
    MemleakProcess summary{life.pid, end->comm, end->state, end->counters, {}, {}, device_list(devs)};
    if (auto ae = alloc_errs.find(life); ae != alloc_errs.end()) summary.alloc_errors = ae->second;
    if (auto fe = free_errs.find(life); fe != free_errs.end()) summary.free_errors = fe->second;
    if (end_sink_) end_sink_(summary, rows);
    for (auto& e : es) {
      bpf_map_delete_elem(afd, &e.k);
      if (cfg_.stacks) bpf_map_delete_elem(bpf_map__fd(skel_->maps.ml_stacks), &e.k);
    }
  }

  drop_ended(by_life, pids);
  for (auto& e : ends) {
    comms_.erase(e.life.pid);  // exec: the new image has its own name
    if (e.state == "exited") stacks_.forget(static_cast<pid_t>(e.life.pid));
    if (py_) {  // exec: new code objects, maybe another interpreter or none
      py_->forget(static_cast<pid_t>(e.life.pid));
      if (e.state == "exec") py_->track(static_cast<pid_t>(e.life.pid));
    }
  }
}

// The frees, contexts, error counts and orphan stacks of ended lives.
void MemleakCollector::drop_ended(const std::map<Life, const Ending*>& by_life, const std::set<uint32_t>& pids) {
  auto ended = [&](uint32_t pid, uint64_t gen_ns) { return by_life.count({pid, gen_ns}) > 0; };
  delete_where<gs_ml_key, gs_ml_freed>(bpf_map__fd(skel_->maps.ml_freed),
                                       [&](const gs_ml_key& k, const gs_ml_freed&) { return ended(k.pid, k.gen_ns); });
  delete_where<gs_ml_ctx_key, gs_ml_ctx>(
      bpf_map__fd(skel_->maps.ml_ctxs),
      [&](const gs_ml_ctx_key& k, const gs_ml_ctx& v) { return ended(k.pid, v.gen_ns); });
  delete_where<gs_ml_err_key, gs_ml_err_val>(
      bpf_map__fd(skel_->maps.ml_errors),
      [&](const gs_ml_err_key& k, const gs_ml_err_val& v) { return ended(k.pid, v.gen_ns); });
  if (!cfg_.stacks) return;
  // Stacks whose allocation is gone (a free raced the exit): nothing else owns them.
  int afd = bpf_map__fd(skel_->maps.ml_allocs);
  delete_where<gs_ml_key, gs_ml_stack>(bpf_map__fd(skel_->maps.ml_stacks), [&](const gs_ml_key& k, const gs_ml_stack&) {
    gs_ml_alloc a;
    return pids.count(k.pid) && bpf_map_lookup_elem(afd, &k, &a) != 0;
  });
}

// Processes whose exit event was lost (ring buffer full) or never came (no exit hook).
// Mappings read for stacks of processes that never allocated are dropped one sweep after
// the process is gone, when any exit record of it has been handled.
void MemleakCollector::sweep() {
  if (cfg_.stacks) {
    for (pid_t p : dying_)
      if (!pid_exists(p)) {
        stacks_.forget(p);
        if (py_) py_->forget(p);
      }
    dying_.clear();
    for (pid_t p : stacks_.pids())
      if (!pid_exists(p)) dying_.insert(p);
  }
  std::vector<Ending> gone;
  int fd = bpf_map__fd(skel_->maps.ml_procs);
  for_each_entry<uint32_t, gs_ml_proc>(fd, [&](uint32_t pid, const gs_ml_proc& c) {
    if (pid_exists(static_cast<pid_t>(pid))) return;
    if (bpf_map_delete_elem(fd, &pid) != 0) return;
    gone.push_back({{pid, c.gen_ns}, "exited", comm_of(pid), boot_ns(), c});
  });
  finish(gone);
}

MemleakSnapshot MemleakCollector::snapshot(std::optional<uint64_t> min_age_ns, const LeakFilter& select) {
  uint64_t now = boot_ns();
  std::map<uint32_t, gs_ml_proc> procs;
  for_each_entry<uint32_t, gs_ml_proc>(bpf_map__fd(skel_->maps.ml_procs),
                                       [&](uint32_t pid, const gs_ml_proc& c) { procs[pid] = c; });
  auto alloc_errs = read_errors(GS_ML_OP_ALLOC, nullptr);
  auto free_errs = read_errors(GS_ML_OP_FREE, nullptr);
  // One walk of the live allocations: per-device sums for every summary, old ones when asked.
  std::map<uint32_t, std::map<int32_t, MemleakDevice>> devs;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> mapped_at;
  std::vector<std::pair<gs_ml_key, gs_ml_alloc>> old;
  for_each_entry<gs_ml_key, gs_ml_alloc>(bpf_map__fd(skel_->maps.ml_allocs),
                                         [&](const gs_ml_key& k, const gs_ml_alloc& a) {
                                           auto p = procs.find(k.pid);
                                           if (p == procs.end() || p->second.gen_ns != k.gen_ns) return;
                                           add_device(devs[k.pid], k, a);
                                           if (!min_age_ns) return;
                                           if (k.space == GS_ML_SPACE_MAPPING) {
                                             auto& m = mapped_at[{k.pid, a.handle}];
                                             if (!m || k.addr < m) m = k.addr;
                                             return;
                                           }
                                           if (now - a.ts_boot_ns < *min_age_ns) return;
                                           old.emplace_back(k, a);
                                         });
  MemleakSnapshot snap;
  for (auto& [pid, c] : procs) {
    MemleakProcess p{pid, comm_of(pid), "running", c, {}, {}, device_list(devs[pid])};
    if (auto ae = alloc_errs.find({pid, c.gen_ns}); ae != alloc_errs.end()) p.alloc_errors = ae->second;
    if (auto fe = free_errs.find({pid, c.gen_ns}); fe != free_errs.end()) p.free_errors = fe->second;
    snap.processes.push_back(std::move(p));
  }
  if (!min_age_ns) return snap;
  for (auto& [k, a] : old) {
    auto m = mapped_at.find({k.pid, k.addr});
    MemleakLeak row = leak_row(k, a, now, comm_of(k.pid), "running", m == mapped_at.end() ? 0 : m->second);
    if (select && !select(row)) continue;
    if (cfg_.stacks && !stacks_.has(static_cast<pid_t>(k.pid))) stacks_.snapshot(static_cast<pid_t>(k.pid));
    read_stack(k, row);
    snap.allocations.push_back(std::move(row));
  }
  return snap;
}

// After each wake-up: final rows of processes that ended, and stacks of new processes
// snapshotted while they live.
void MemleakCollector::tick() {
  finish(pending_);
  pending_.clear();
  if (attached_new_) set_watch_point();
  attached_new_ = false;
  if (cfg_.stacks)
    for_each_entry<uint32_t, gs_ml_proc>(bpf_map__fd(skel_->maps.ml_procs), [&](uint32_t pid, const gs_ml_proc&) {
      if (!stacks_.has(static_cast<pid_t>(pid))) stacks_.snapshot(static_cast<pid_t>(pid));
      if (py_) py_->track(static_cast<pid_t>(pid));
    });
}

void MemleakCollector::drain() {
  rb_->drain();
  finish(pending_);
  pending_.clear();
}

MemleakCollector::Stats MemleakCollector::stats() const {
  int dfd = bpf_map__fd(skel_->maps.ml_drops);
  return {percpu_sum(dfd, GS_ML_DROP_ALLOCS_FULL),      percpu_sum(dfd, GS_ML_DROP_PROCS_FULL),
          percpu_sum(dfd, GS_ML_DROP_EVENTS),           percpu_sum(dfd, GS_ML_DROP_NO_STATE),
          percpu_sum(dfd, GS_ML_DROP_STACKS),           percpu_sum(dfd, GS_ML_DROP_ERRORS_FULL),
          py_ ? py_->counters() : PyStacks::Counters{}, percpu_sum(dfd, GS_ML_DROP_CTXS_FULL)};
}

}  // namespace gpuscope

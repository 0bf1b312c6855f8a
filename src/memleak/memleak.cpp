#include <bpf/bpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "core/bpf.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/event_loop.h"
#include "core/map_walk.h"
#include "core/uprobe_session.h"
#include "core/output.h"
#include "core/system.h"
#include "memleak.skel.h"
#include "memleak/memleak.h"
#include "memleak/memleak_cmd.h"
#include "core/symbolizer.h"

namespace gpuscope {

namespace {

using json = nlohmann::ordered_json;

struct SkelDeleter {
  void operator()(memleak_bpf* s) const { memleak_bpf__destroy(s); }
};

const char* site_name(unsigned s) { return api_symbol(s); }
const char* layer_str(unsigned l) { return l == GS_LAYER_RUNTIME ? "runtime" : "driver"; }
const char* category_str(unsigned c) {
  switch (c) {
    case GS_MEM_DEVICE: return "device";
    case GS_MEM_MANAGED: return "managed";
    case GS_MEM_PINNED: return "pinned";
    default: return "vmm";
  }
}
const Table& summary_table() {
  static const Table t({{"PID", 7},
                        {"COMM", -16},
                        {"OUTSTANDING", 12},
                        {"ALLOCS", 7},
                        {"PINNED", 10},
                        {"ALLOC OK", 9},
                        {"FAILED", 7},
                        {"FREE OK", 8},
                        {"FAILED", 7},
                        {"BAD", 4},
                        {"UNTRACKED", 10},
                        {"STATE", 0}});
  return t;
}
const char* reason_str(unsigned r) {
  switch (r) {
    case GS_ML_R_DOUBLE_FREE: return "double_free";
    case GS_ML_R_ERROR: return "error";
    default: return "unknown_address";
  }
}
std::string error_name(unsigned layer, int code) {
  return layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(code) : cuda_driver_error_name(code);
}
std::string hex(uint64_t v) { return fmt::format("0x{:x}", v); }
std::string human(uint64_t b) {
  if (b < 10240) return fmt::format("{} B", b);
  if (b < (10ull << 20)) return fmt::format("{:.1f} KiB", b / 1024.0);
  if (b < (10ull << 30)) return fmt::format("{:.1f} MiB", b / 1048576.0);
  return fmt::format("{:.1f} GiB", b / 1073741824.0);
}
std::string human_age(uint64_t ns) {
  if (ns < 1000000000ull) return fmt::format("{} ms", ns / 1000000);
  if (ns < 600000000000ull) return fmt::format("{:.1f} s", ns / 1e9);
  return fmt::format("{:.1f} min", ns / 6e10);
}

uint64_t boot_ns() {
  timespec t;
  clock_gettime(CLOCK_BOOTTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

// A process's life: its pid and the gen_ns of its counters.
struct Life {
  uint32_t pid;
  uint64_t gen_ns;
  bool operator<(const Life& o) const { return std::tie(pid, gen_ns) < std::tie(o.pid, o.gen_ns); }
};

struct Ending {
  Life life;
  std::string state;  // "exited", "exec"
  std::string comm;
  uint64_t ts_boot_ns;
  gs_ml_proc counters;
};

class Memleak {
 public:
  explicit Memleak(const MemleakOptions& o) : o_(o) {}
  int run();

 private:
  void open_and_load(UprobeSession& session);
  void tick();
  void on_event(const gs_ml_event& e);
  void finish(const std::vector<Ending>& ends);
  void interval(bool last);
  void sweep();
  std::map<Life, std::vector<std::pair<std::string, uint64_t>>> read_errors(uint8_t op, const std::set<uint32_t>* only);
  json leak_row(const gs_ml_key& k, const gs_ml_alloc& a, uint64_t now, const std::string& comm,
                const std::string& state, uint64_t mapped_at);
  void print_summary(uint32_t pid, const std::string& comm, const gs_ml_proc& c, const std::string& state,
                     const std::vector<std::pair<std::string, uint64_t>>& alloc_errs,
                     const std::vector<std::pair<std::string, uint64_t>>& free_errs);
  void print_leaks(uint32_t pid, const std::string& comm, const std::string& state, const std::vector<json>& rows);
  const std::string& comm_of(uint32_t pid);
  void set_watch_point() { skel_->bss->watch_since_ns = boot_ns(); }

  const MemleakOptions& o_;
  std::unique_ptr<memleak_bpf, SkelDeleter> skel_;
  std::vector<Link> links_;
  Writer out_;
  Symbolizer stacks_;  // snapshots maps and symbols while a process lives
  std::vector<Ending> pending_;
  std::set<pid_t> dying_;
  std::map<uint32_t, std::string> comms_;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t, uint64_t>> suspected_;  // (pid, space, addr, ts) listed
  bool exits_ = true, exec_hook_ = true, attached_new_ = false;
};

void Memleak::open_and_load(UprobeSession& session) {
  bool multi = open_and_load_uprobes(skel_, memleak_bpf__open, memleak_bpf__load, [&](memleak_bpf* skel) {
    auto* ro = skel->rodata;
    set_comm_filter(ro, o_.comm);
    ro->capture_stacks = o_.stacks;
    if (o_.stacks) bpf_map__set_max_entries(skel->maps.ml_stacks, GS_ML_MAX_ALLOCS);
    return std::vector<bpf_program*>{skel->progs.ml_enter, skel->progs.ml_exit};
  });
  if (bpf_link* l = bpf_program__attach(skel_->progs.ml_proc_exit))
    links_.emplace_back(l);
  else
    exits_ = false;
  if (bpf_link* l = bpf_program__attach(skel_->progs.ml_proc_exec))
    links_.emplace_back(l);
  else
    exec_hook_ = false;
  auto rows = apis_with_role(GS_ROLE_MEM);
  session.add({{skel_->progs.ml_enter, false, rows}, {skel_->progs.ml_exit, true, rows}}, multi,
              [this](const CudaObject&) { attached_new_ = true; });
}

const std::string& Memleak::comm_of(uint32_t pid) {
  auto& c = comms_[pid];
  if (c.empty()) c = proc_comm(static_cast<pid_t>(pid));
  return c;
}

void Memleak::on_event(const gs_ml_event& e) {
  if (e.type == GS_ML_EV_EXIT || e.type == GS_ML_EV_EXEC) {
    std::string comm = comms_.count(e.pid) && !comms_[e.pid].empty()
                           ? comms_[e.pid]
                           : std::string(e.comm, strnlen(e.comm, sizeof e.comm));
    pending_.push_back(
        {{e.pid, e.counters.gen_ns}, e.type == GS_ML_EV_EXIT ? "exited" : "exec", comm, e.ts_boot_ns, e.counters});
    return;
  }
  unsigned layer = e.layer;
  auto& comm = comms_[e.pid];
  if (comm.empty()) comm = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  bool bad = e.type == GS_ML_EV_BAD_FREE;
  if (o_.json) {
    json j{{"type", bad ? "bad_free" : "untracked_free"},
           {"pid", e.pid},
           {"comm", comm},
           {"addr", hex(e.addr)},
           {"api", site_name(e.site)},
           {"layer", layer_str(layer)}};
    if (bad) j["reason"] = reason_str(e.reason);
    if (e.ret) j["error"] = error_name(layer, e.ret);
    fmt::format_to(std::back_inserter(out_.buf()), "{}\n", j.dump());
  } else if (bad) {
    fmt::format_to(std::back_inserter(out_.buf()), "BAD FREE  pid {} ({}): {}({}) {}{}\n", e.pid, comm,
                   site_name(e.site), hex(e.addr), reason_str(e.reason),
                   e.ret ? " -> " + error_name(layer, e.ret) : "");
  }
}

std::map<Life, std::vector<std::pair<std::string, uint64_t>>> Memleak::read_errors(uint8_t op,
                                                                                   const std::set<uint32_t>* only) {
  std::map<Life, std::vector<std::pair<std::string, uint64_t>>> r;
  for_each_entry<gs_ml_err_key, gs_ml_err_val>(
      bpf_map__fd(skel_->maps.ml_errors), [&](const gs_ml_err_key& k, const gs_ml_err_val& v) {
        if (k.op != op || (only && !only->count(k.pid))) return;
        r[{k.pid, v.gen_ns}].emplace_back(error_name(k.layer, k.code), v.count);
      });
  return r;
}

json Memleak::leak_row(const gs_ml_key& k, const gs_ml_alloc& a, uint64_t now, const std::string& comm,
                       const std::string& state, uint64_t mapped_at) {
  json j{{"type", "leak"},
         {"pid", k.pid},
         {"comm", comm},
         {"addr", hex(k.space == GS_ML_SPACE_HANDLE && mapped_at ? mapped_at : k.addr)},
         {"size", a.size_bytes},
         {"age_ns", now > a.ts_boot_ns ? now - a.ts_boot_ns : 0},
         {"api", site_name(a.site)},
         {"device", a.device},
         {"stack", json::array()},
         {"layer", layer_str(a.layer)},
         {"category", category_str(a.category)},
         {"state", state}};
  if (k.space == GS_ML_SPACE_HANDLE) {
    j["handle"] = hex(k.addr);
    j["released"] = a.vmm_released != 0;
    j["mappings"] = a.vmm_mappings;
  }
  if (o_.stacks) {
    gs_ml_stack s;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.ml_stacks), &k, &s) == 0)
      for (uint64_t ip : s.ips) {
        // A frame-pointer walk that leaves code built without frame pointers (libc's start
        // code) reads data as the next return address: stop at one no user mapping can hold.
        if (!ip || ip >= 0x800000000000ULL) break;
        j["stack"].push_back(stacks_.user(static_cast<pid_t>(k.pid), ip, true, true));
      }
  }
  return j;
}

void Memleak::print_summary(uint32_t pid, const std::string& comm, const gs_ml_proc& c, const std::string& state,
                            const std::vector<std::pair<std::string, uint64_t>>& alloc_errs,
                            const std::vector<std::pair<std::string, uint64_t>>& free_errs) {
  auto it = std::back_inserter(out_.buf());
  if (o_.json) {
    json j{{"type", "summary"},
           {"pid", pid},
           {"comm", comm},
           {"outstanding_bytes", c.outstanding_bytes},
           {"outstanding_allocs", c.outstanding_allocs},
           {"allocs_ok", c.allocs_ok},
           {"allocs_failed", c.allocs_failed},
           {"frees_ok", c.frees_ok},
           {"frees_failed", c.frees_failed},
           {"pinned_bytes", c.pinned_bytes},
           {"pinned_allocs", c.pinned_allocs},
           {"allocs_untracked", c.allocs_untracked},
           {"frees_untracked", c.frees_untracked},
           {"bad_frees", c.bad_frees},
           {"double_frees", c.double_frees},
           {"alloc_errors", json::object()},
           {"free_errors", json::object()},
           {"state", state}};
    for (auto& [n, v] : alloc_errs) j["alloc_errors"][n] = j["alloc_errors"].value(n, uint64_t{0}) + v;
    for (auto& [n, v] : free_errs) j["free_errors"][n] = j["free_errors"].value(n, uint64_t{0}) + v;
    fmt::format_to(it, "{}\n", j.dump());
    return;
  }
  summary_table().row(
      out_.buf(),
      {std::to_string(pid), comm, human(c.outstanding_bytes), std::to_string(c.outstanding_allocs),
       human(c.pinned_bytes), std::to_string(c.allocs_ok), std::to_string(c.allocs_failed), std::to_string(c.frees_ok),
       std::to_string(c.frees_failed), std::to_string(c.bad_frees), std::to_string(c.frees_untracked), state});
  for (auto* errs : {&alloc_errs, &free_errs})
    for (auto& [n, v] : *errs)
      fmt::format_to(it, "{:>9}{} failed {} time{}: {}\n", "", errs == &alloc_errs ? "allocations" : "frees", v,
                     v == 1 ? "" : "s", n);
}

void Memleak::print_leaks(uint32_t pid, const std::string& comm, const std::string& state,
                          const std::vector<json>& rows) {
  auto it = std::back_inserter(out_.buf());
  if (o_.json) {
    for (auto& r : rows) fmt::format_to(it, "{}\n", r.dump());
    return;
  }
  if (rows.empty()) return;
  uint64_t total = 0;
  for (auto& r : rows) total += r["size"].get<uint64_t>();
  fmt::format_to(it, "\n{} pid {} ({}): {} allocation{} never freed, {} in all\n",
                 state == "running" ? "SUSPECTED LEAKS" : "LEAK REPORT", pid, comm, rows.size(),
                 rows.size() == 1 ? "" : "s", human(total));
  static const Table table({{"ADDR", -16}, {"SIZE", 12}, {"AGE", 10}, {"API", -24}, {"DEVICE", 6}, {"KIND", 0}});
  table.header(out_.buf());
  for (auto& r : rows) {
    std::string kind = r["category"].get<std::string>();
    if (r.contains("handle"))
      kind += fmt::format(" handle {}{}, {} mapping(s)", r["handle"].get<std::string>(),
                          r["released"].get<bool>() ? " released" : "", r["mappings"].get<unsigned>());
    int dev = r["device"].get<int>();
    table.row(out_.buf(),
              {r["addr"].get<std::string>(), human(r["size"].get<uint64_t>()), human_age(r["age_ns"].get<uint64_t>()),
               r["api"].get<std::string>(), dev < 0 ? "-" : std::to_string(dev), kind});
    for (auto& f : r["stack"]) fmt::format_to(it, "    {}\n", f.get<std::string>());
  }
  fmt::format_to(it, "\n");
}

// Final rows of processes that exited or exec'd, then their state is deleted: allocations,
// stacks, freed addresses and error counts of that life of the pid, and nothing newer.
void Memleak::finish(const std::vector<Ending>& ends) {
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
    std::vector<json> rows;
    for (auto& e : es)
      if (e.k.space != GS_ML_SPACE_MAPPING)
        rows.push_back(leak_row(e.k, e.a, end->ts_boot_ns, end->comm, end->state,
                                mapped_at.count(e.k.addr) ? mapped_at[e.k.addr] : 0));
    std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) { return a["age_ns"] > b["age_ns"]; });
    static const std::vector<std::pair<std::string, uint64_t>> none;
    auto ae = alloc_errs.find(life), fe = free_errs.find(life);
    if (!o_.json) summary_table().header(out_.buf());
    print_summary(life.pid, end->comm, end->counters, end->state, ae == alloc_errs.end() ? none : ae->second,
                  fe == free_errs.end() ? none : fe->second);
    print_leaks(life.pid, end->comm, end->state, rows);
    for (auto& e : es) {
      bpf_map_delete_elem(afd, &e.k);
      if (o_.stacks) bpf_map_delete_elem(bpf_map__fd(skel_->maps.ml_stacks), &e.k);
    }
  }
  out_.flush();

  auto drop_pid_keys = [&](int fd, auto key_tag, auto val_tag, auto owned) {
    using K = decltype(key_tag);
    using V = decltype(val_tag);
    std::vector<K> dead;
    for_each_entry<K, V>(fd, [&](const K& k, const V& v) {
      if (owned(k, v)) dead.push_back(k);
    });
    for (auto& k : dead) bpf_map_delete_elem(fd, &k);
  };
  drop_pid_keys(bpf_map__fd(skel_->maps.ml_freed), gs_ml_key{}, gs_ml_freed{},
                [&](const gs_ml_key& k, const gs_ml_freed&) {
                  return by_life.count({k.pid, k.gen_ns}) > 0;
                });
  drop_pid_keys(bpf_map__fd(skel_->maps.ml_errors), gs_ml_err_key{}, gs_ml_err_val{},
                [&](const gs_ml_err_key& k, const gs_ml_err_val& v) {
                  return by_life.count({k.pid, v.gen_ns}) > 0;
                });
  if (o_.stacks) {
    // Stacks whose allocation is gone (a free raced the exit): nothing else owns them.
    drop_pid_keys(bpf_map__fd(skel_->maps.ml_stacks), gs_ml_key{}, gs_ml_stack{},
                  [&](const gs_ml_key& k, const gs_ml_stack&) {
                    gs_ml_alloc a;
                    return pids.count(k.pid) && bpf_map_lookup_elem(afd, &k, &a) != 0;
                  });
  }
  for (auto& e : ends) {
    std::erase_if(suspected_, [&](auto& t) { return std::get<0>(t) == e.life.pid; });
    if (e.state == "exited") {
      comms_.erase(e.life.pid);
      stacks_.forget(static_cast<pid_t>(e.life.pid));
    } else {
      comms_.erase(e.life.pid);  // the new image has its own name
    }
  }
}

// Processes whose exit event was lost (ring buffer full) or never came (no exit hook).
// Mappings read for stacks of processes that never allocated are dropped one sweep after
// the process is gone, when any exit record of it has been handled.
void Memleak::sweep() {
  if (o_.stacks) {
    for (pid_t p : dying_)
      if (!pid_exists(p)) stacks_.forget(p);
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

void Memleak::interval(bool last) {
  uint64_t now = boot_ns();
  std::map<uint32_t, gs_ml_proc> procs;
  for_each_entry<uint32_t, gs_ml_proc>(bpf_map__fd(skel_->maps.ml_procs),
                                       [&](uint32_t pid, const gs_ml_proc& c) { procs[pid] = c; });
  auto alloc_errs = read_errors(GS_ML_OP_ALLOC, nullptr);
  auto free_errs = read_errors(GS_ML_OP_FREE, nullptr);
  auto it = std::back_inserter(out_.buf());
  if (!o_.json) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}  {} process{}\n", tm.tm_hour, tm.tm_min, tm.tm_sec, procs.size(),
                   procs.size() == 1 ? "" : "es");
    if (!procs.empty()) summary_table().header(out_.buf());
  }
  static const std::vector<std::pair<std::string, uint64_t>> none;
  for (auto& [pid, c] : procs) {
    auto ae = alloc_errs.find({pid, c.gen_ns}), fe = free_errs.find({pid, c.gen_ns});
    print_summary(pid, comm_of(pid), c, "running", ae == alloc_errs.end() ? none : ae->second,
                  fe == free_errs.end() ? none : fe->second);
  }
  if (o_.min_age_s > 0 && !last) {
    uint64_t min_age = static_cast<uint64_t>(o_.min_age_s * 1e9);
    std::map<uint32_t, std::vector<json>> rows;
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> mapped_at;
    std::vector<std::pair<gs_ml_key, gs_ml_alloc>> old;
    for_each_entry<gs_ml_key, gs_ml_alloc>(bpf_map__fd(skel_->maps.ml_allocs),
                                           [&](const gs_ml_key& k, const gs_ml_alloc& a) {
                                             auto p = procs.find(k.pid);
                                             if (p == procs.end() || p->second.gen_ns != k.gen_ns) return;
                                             if (k.space == GS_ML_SPACE_MAPPING) {
                                               auto& m = mapped_at[{k.pid, a.handle}];
                                               if (!m || k.addr < m) m = k.addr;
                                               return;
                                             }
                                             if (now - a.ts_boot_ns < min_age) return;
                                             if (!suspected_.insert({k.pid, k.space, k.addr, a.ts_boot_ns}).second)
                                               return;
                                             old.emplace_back(k, a);
                                           });
    for (auto& [k, a] : old) {
      auto m = mapped_at.find({k.pid, k.addr});
      if (o_.stacks && !stacks_.has(static_cast<pid_t>(k.pid))) stacks_.snapshot(static_cast<pid_t>(k.pid));
      rows[k.pid].push_back(leak_row(k, a, now, comm_of(k.pid), "running", m == mapped_at.end() ? 0 : m->second));
    }
    for (auto& [pid, r] : rows) print_leaks(pid, comm_of(pid), "running", r);
  }
  if (!o_.json) fmt::format_to(it, "\n");
  out_.flush();
}

// After each wake-up: final rows of processes that ended, and stacks of new processes
// snapshotted while they live.
void Memleak::tick() {
  finish(pending_);
  pending_.clear();
  out_.flush();
  if (attached_new_) set_watch_point();
  attached_new_ = false;
  if (o_.stacks)
    for_each_entry<uint32_t, gs_ml_proc>(bpf_map__fd(skel_->maps.ml_procs), [&](uint32_t pid, const gs_ml_proc&) {
      if (!stacks_.has(static_cast<pid_t>(pid))) stacks_.snapshot(static_cast<pid_t>(pid));
    });
}

int Memleak::run() {
  Scope scope{o_.pids, o_.comm, o_.libs};
  scope.validate();
  require_bpf_privileges();
  set_libbpf_verbose(o_.verbose);
  UprobeSession session(scope, o_.verbose);
  open_and_load(session);
  if (!exits_)
    fprintf(stderr, "gpuscope: no tp_btf (%s): exits are noticed by a sweep every interval\n", strerror(errno));
  session.start();
  set_watch_point();
  attached_new_ = false;
  if (o_.stacks) {
    for (pid_t p : o_.pids) stacks_.snapshot(p);
    session.on_maps_changed([this](pid_t p) { stacks_.snapshot(p); });
  }

  RingBuffer rb(bpf_map__fd(skel_->maps.ml_events), [&](const void* d, size_t sz) {
    if (sz >= sizeof(gs_ml_event)) on_event(*static_cast<const gs_ml_event*>(d));
  });
  EventLoop loop(o_.duration_s);
  loop.watch(rb);
  session.watch(loop);
  loop.after_wakeup([this] { tick(); });
  loop.every(o_.interval_s, [this] {
    sweep();
    interval(false);
  });
  auto st = session.stats();
  fprintf(stderr,
          "gpuscope: tracking GPU memory at %zu probes in %zu CUDA objects; summary every %g s. Ctrl-C to end.\n",
          st.probes, st.objects, o_.interval_s);
  loop.run();
  session.detach();
  rb.drain();
  finish(pending_);
  pending_.clear();
  sweep();
  interval(true);
  st = session.stats();
  int dfd = bpf_map__fd(skel_->maps.ml_drops);
  uint64_t full = percpu_sum(dfd, GS_ML_DROP_ALLOCS_FULL), procs_full = percpu_sum(dfd, GS_ML_DROP_PROCS_FULL),
           events = percpu_sum(dfd, GS_ML_DROP_EVENTS), state = percpu_sum(dfd, GS_ML_DROP_NO_STATE),
           stacks = percpu_sum(dfd, GS_ML_DROP_STACKS), errs = percpu_sum(dfd, GS_ML_DROP_ERRORS_FULL);
  if (o_.json) {
    json j{{"type", "drops"},
           {"allocs_not_recorded_map_full", full},
           {"calls_untracked_process_map_full", procs_full},
           {"events_lost_ringbuf_full", events},
           {"calls_without_thread_state", state},
           {"stacks_lost", stacks},
           {"error_codes_not_recorded", errs},
           {"probes", st.probes},
           {"objects", st.objects},
           {"attach_failures", st.attach_failures},
           {"attach_retries", st.attach_retries}};
    fmt::format_to(std::back_inserter(out_.buf()), "{}\n", j.dump());
  } else if (full || procs_full || events || state || stacks || errs) {
    fmt::format_to(std::back_inserter(out_.buf()),
                   "not recorded: {} allocations (map full), {} calls of untracked processes (map full), {} events "
                   "(ring buffer full), {} calls without thread state, {} stacks, {} error codes\n",
                   full, procs_full, events, state, stacks, errs);
  }
  out_.flush();
  return 0;
}

}  // namespace

int run_memleak(const MemleakOptions& opts) {
  Memleak m(opts);
  return m.run();
}

}  // namespace gpuscope

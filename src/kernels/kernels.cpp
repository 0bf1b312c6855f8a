#include "kernels/kernels_collector.h"

#include <bpf/bpf.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "common/events.h"
#include "core/cuda_api.h"
#include "core/demangle.h"
#include "core/elf_symbols.h"
#include "core/map_walk.h"
#include "core/system.h"
#include "kernels.skel.h"
#include "kernels/kernels.h"

namespace gpuscope {

namespace {

constexpr size_t kMaxObjectName = 1024;
constexpr int kMaxLayoutOffset = 128;  // searched in steps of 8
constexpr size_t kLayoutChecks = 16;   // named handles a layout must name right

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// A NUL-terminated string of the process, through /proc/PID/mem (which faults pages in).
std::string read_user_string(pid_t pid, uint64_t addr, size_t max) {
  if (!addr) return "";
  int fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string buf(max, '\0');
  ssize_t n = pread(fd, buf.data(), max, static_cast<off_t>(addr));
  close(fd);
  if (n <= 0) return "";
  buf.resize(strnlen(buf.data(), static_cast<size_t>(n)));
  return buf;
}

// nvcc's host stub `__device_stub__Z12alpha_kernelPf(float*)` and its static handle
// `_ZZ32__device_stub__Z12alpha_kernelPfPfE8__handle` both carry the kernel's own mangled
// name after the prefix: show that one, demangled, as CUPTI does.
// The kernel's own mangled name from nvcc's stub or handle-variable symbol; empty when the
// symbol is not one of those.
std::string kernel_mangled(const std::string& sym) {
  std::string_view v = sym;
  if (v.starts_with("_ZZ"))
    v.remove_prefix(3);
  else if (v.starts_with("_Z"))
    v.remove_prefix(2);
  else
    return "";
  if (v.starts_with("L")) v.remove_prefix(1);
  size_t len = 0, i = 0;
  while (i < v.size() && isdigit(static_cast<unsigned char>(v[i]))) len = len * 10 + (v[i++] - '0');
  std::string_view id = v.substr(i, len);
  constexpr std::string_view kStub = "__device_stub__";
  if (!id.starts_with(kStub)) return "";
  std::string m = "_";
  m += id.substr(kStub.size());
  return m;
}

std::string kernel_name(const std::string& sym) {
  std::string m = kernel_mangled(sym);
  return demangle(m.empty() ? sym : m);
}

// A kernel's mangled name as the driver keeps it: printable, no spaces, bounded. Anything
// else read through a guessed layout is not a name and is never shown.
bool looks_like_symbol(std::string_view s) {
  if (s.empty() || s.size() >= kMaxObjectName) return false;
  if (!(isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '$' || s[0] == '.')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// The name a driver object points at from `offset`, if it looks like one.
std::optional<std::string> object_name(int mem, uint64_t handle, int offset) {
  uint64_t p = 0;
  if (pread(mem, &p, sizeof p, static_cast<off_t>(handle + offset)) != sizeof p || p < 4096) return std::nullopt;
  char buf[kMaxObjectName];
  ssize_t n = pread(mem, buf, sizeof buf, static_cast<off_t>(p));
  if (n <= 0) return std::nullopt;
  size_t len = strnlen(buf, static_cast<size_t>(n));
  if (len == static_cast<size_t>(n)) return std::nullopt;  // no end within the bound
  std::string s(buf, len);
  if (!looks_like_symbol(s)) return std::nullopt;
  return s;
}

// Whether the host side's mangled name (from nvcc's stub) is the one the driver keeps: nvcc's
// extended lambdas (`__nv_hdl_wrapper_t`, mangled `Unvhdl`/`Unvdl`) are spelled differently on
// the device side, so such handles cannot check a layout.
bool spelled_alike(const std::string& mangled) {
  return !mangled.empty() && mangled.find("Unvhdl") == std::string::npos &&
         mangled.find("Unvdl") == std::string::npos && mangled.find("__nv_") == std::string::npos;
}

int open_mem(pid_t pid) { return open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC); }

// Handles and the exact mangled names they should point at.
using KnownHandles = std::vector<std::pair<uint64_t, const std::string*>>;

// What the first objects hold, for a user (or a bug report) to see why no layout matched.
std::string objects_seen(pid_t pid, const KnownHandles& known) {
  std::string seen;
  int m = open_mem(pid);
  if (m < 0) return seen;
  for (auto& [h, name] : known)
    if (auto n = object_name(m, h, 8); n && *n != *name) {
      seen += fmt::format("; first disagreement at +8: 0x{:x} should name {} but names {}", h, name->substr(0, 400),
                          n->substr(0, 400));
      break;
    }
  for (size_t i = 0; i < known.size() && i < 2; i++) {
    seen += fmt::format("; 0x{:x} should name {}:", known[i].first, *known[i].second);
    for (int off = 0; off <= 32; off += 8) {
      auto n = object_name(m, known[i].first, off);
      uint64_t v = 0;
      if (pread(m, &v, sizeof v, static_cast<off_t>(known[i].first + off)) != sizeof v) break;
      seen += fmt::format(" +{}=0x{:x}{}", off, v, n ? " (" + n->substr(0, 80) + ")" : "");
    }
  }
  close(m);
  return seen;
}

}  // namespace

void KernelsCollector::choose_layer() {
  switch (cfg_.layer) {
    case CountLayer::Driver:
      driver_only_ = true;
      layer_reason_ = "counting at the driver layer alone (--count-layer driver)";
      break;
    case CountLayer::Both: layer_reason_ = "counting runtime launches at the runtime layer (--count-layer both)"; break;
    case CountLayer::Auto:
      driver_only_ = access("/proc/driver/nvidia/version", F_OK) == 0;
      layer_reason_ = driver_only_ ? "counting at the driver layer alone, one probe per launch (the NVIDIA driver is "
                                     "loaded, so every launch that runs reaches it)"
                                   : "counting runtime launches at the runtime layer (no NVIDIA driver loaded: they "
                                     "fail before reaching a driver)";
      break;
  }
}

// One launch program per launch kind, so that the kind is a constant in BPF; the namers and
// capture calls share theirs (the row, the cookie, says which).
std::vector<SiteProbe> KernelsCollector::site_probes() const {
  auto& p = skel_->progs;
  auto launch = [](unsigned special, unsigned layer = GS_LAYER_COUNT) {
    return rows_where([=](const gs_api_desc& d) {
      return (d.roles & GS_ROLE_LAUNCH) && d.special == special && (layer == GS_LAYER_COUNT || d.layer == layer);
    });
  };
  auto graph = [](unsigned layer) {
    return rows_where([=](const gs_api_desc& d) { return (d.roles & GS_ROLE_GRAPH_LAUNCH) && d.layer == layer; });
  };
  auto runtime_launches = rows_where([](const gs_api_desc& d) {
    return (d.roles & (GS_ROLE_LAUNCH | GS_ROLE_GRAPH_LAUNCH)) && d.layer == GS_LAYER_RUNTIME;
  });
  auto namers = apis_with_role(GS_ROLE_NAMER);
  std::vector<SiteProbe> probes;
  if (name_session_)
    probes.push_back({p.gs_k_name_session, false, namers, true});
  else
    probes.insert(probes.end(), {{p.gs_k_name_enter, false, namers}, {p.gs_k_name_exit, true, namers}});
  std::vector<SiteProbe> counting{
      {p.gs_k_cu_launch, false, launch(GS_SP_CU_LAUNCH)},
      {p.gs_k_cu_launch_ex, false, launch(GS_SP_CU_LAUNCH_EX)},
      {p.gs_k_cu_graph, false, graph(GS_LAYER_DRIVER)},
      {p.gs_k_cu_host_func, false, launch(GS_SP_HOST_FUNC, GS_LAYER_DRIVER)},
      {p.gs_k_capture, false, apis_with_role(GS_ROLE_CAPTURE)},
  };
  if (timed_launches_) {
    bpf_program* timed[] = {p.gs_k_cu_launch_timed, p.gs_k_cu_launch_ex_timed, p.gs_k_cu_graph_timed,
                            p.gs_k_cu_host_func_timed};
    for (size_t i = 0; i < 4; i++) {
      counting[i].prog = timed[i];
      counting[i].session = true;
    }
  }
  if (!cfg_.naming_only) probes.insert(probes.end(), counting.begin(), counting.end());
  if (!driver_only_) {
    probes.push_back({p.gs_k_cuda_launch, false, launch(GS_SP_RT_LAUNCH)});
    probes.push_back({p.gs_k_cuda_launch_ex, false, launch(GS_SP_RT_LAUNCH_EX)});
    probes.push_back({p.gs_k_cuda_graph, false, graph(GS_LAYER_RUNTIME)});
    probes.push_back({p.gs_k_cuda_host_func, false, launch(GS_SP_HOST_FUNC, GS_LAYER_RUNTIME)});
    probes.push_back({p.gs_k_launch_exit, true, runtime_launches});
  }
  return probes;
}

KernelsCollector::KernelsCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), skel_(nullptr, kernels_bpf__destroy) {
  choose_layer();
  SessionLoad ld = open_and_load_with_session(
      skel_, kernels_bpf__open, kernels_bpf__load,
      [&](kernels_bpf* skel) {
        apply_scope(skel, cfg_.scope);
        skel->rodata->driver_only = driver_only_;
        skel->rodata->track_last_launch = cfg_.track_last_launch;
        if (cfg_.max_rows) bpf_map__set_max_entries(skel->maps.counts, cfg_.max_rows);
        skel->rodata->stacks_on = cfg_.stacks;
        skel->rodata->stack_every = cfg_.stack_every ? cfg_.stack_every : 1;
        skel->rodata->py_walk = cfg_.stacks && cfg_.py_frames;
        bpf_program__set_autoload(skel->progs.gs_py_exec, skel->rodata->py_walk);
        if (!cfg_.stacks)  // never touched: at their smallest
          for (bpf_map* m : {skel->maps.stacks, skel->maps.samples, skel->maps.stack_ticks})
            bpf_map__set_max_entries(m, 1);
        if (!skel->rodata->py_walk) {
          for (bpf_map* m : {skel->maps.gs_py_procs, skel->maps.gs_py_tstates, skel->maps.gs_py_stacks})
            bpf_map__set_max_entries(m, 1);
          bpf_map__set_max_entries(skel->maps.gs_py_events, 4096);
        }
        auto& p = skel->progs;
        std::vector<bpf_program*> timed{p.gs_k_cu_launch_timed, p.gs_k_cu_launch_ex_timed, p.gs_k_cu_graph_timed,
                                        p.gs_k_cu_host_func_timed};
        if (!cfg_.offer_launch_timing) {
          for (bpf_program* t : timed) bpf_program__set_autoload(t, false);
          timed.clear();
          // Latency's maps are made with the object either way: at their smallest where unused.
          for (bpf_map* m : {skel->maps.lat_stats, skel->maps.lat_rets, skel->maps.lat_sites})
            bpf_map__set_max_entries(m, 1);
        }
        SessionPrograms progs{{p.gs_k_name_enter, p.gs_k_name_exit},
                              {p.gs_k_cuda_launch, p.gs_k_cuda_launch_ex, p.gs_k_cuda_graph, p.gs_k_cuda_host_func,
                               p.gs_k_launch_exit, p.gs_k_capture},
                              timed};
        // With sessions, the timed programs take the driver's launches: the plain ones load only without.
        auto& plain = timed.empty() ? progs.shared : progs.legacy;
        plain.insert(plain.end(), {p.gs_k_cu_launch, p.gs_k_cu_launch_ex, p.gs_k_cu_graph, p.gs_k_cu_host_func});
        return progs;
      },
      [](kernels_bpf* skel) { return skel->progs.gs_k_name_session; });
  name_session_ = ld.session;
  timed_launches_ = ld.session && cfg_.offer_launch_timing;
  if (cfg_.naming_only) driver_only_ = true;  // nothing counted, so no runtime probes either
  session.add(site_probes(), ld.multi);
  hooks_.attach_exit(skel_->progs.gs_k_proc_exit);
  if (cfg_.stacks) site_skip_ = std::regex(cfg_.site_skip.empty() ? kDefaultSiteSkip : cfg_.site_skip);
  if (skel_->rodata->py_walk) {
    auto& m = skel_->maps;
    py_ = std::make_unique<PyStacks>(
        PyStacks::Maps{bpf_map__fd(m.gs_py_procs), bpf_map__fd(m.gs_py_tstates), bpf_map__fd(m.gs_py_stacks),
                       bpf_map__fd(m.gs_py_counters), bpf_map__fd(m.gs_py_events)},
        [this](const std::string& line) { notes_.push_back(line); });
    if (!hooks_.attach(skel_->progs.gs_py_exec))
      notes_.push_back(
          "kernels: cannot attach tp_btf/sched_process_exec: a Python process that execs keeps its "
          "old interpreter layout until it exits");
  }
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.events), [this](const void* d, size_t sz) {
    if (sz >= sizeof(gs_k_event)) on_event(*static_cast<const gs_k_event*>(d));
  });
}

KernelsCollector::~KernelsCollector() = default;

std::optional<LaunchTimingHost> KernelsCollector::launch_timing_host() {
  if (!timed_launches_) return std::nullopt;
  LaunchTimingHost h;
  auto& m = skel_->maps;
  for (bpf_map* map : {m.lat_stats, m.lat_zero_stats, m.lat_rets, m.lat_drops, m.lat_sites, m.lat_calls})
    h.maps[bpf_map__name(map)] = bpf_map__fd(map);
  h.rows.assign(GS_API_COUNT, false);
  for (auto& sp : site_probes())
    if (sp.session && sp.prog != skel_->progs.gs_k_name_session)
      for (size_t r = 0; r < sp.rows.size() && r < GS_API_COUNT; r++) h.rows[r] = h.rows[r] || sp.rows[r];
  auto* bss = skel_->bss;
  h.time = [bss](const std::vector<bool>& rows, unsigned sample) {
    for (size_t r = 0; r < GS_API_COUNT; r++) bss->lat_rows[r] = r < rows.size() && rows[r];
    __atomic_store_n(&bss->lat_sample, sample, __ATOMIC_RELEASE);
  };
  return h;
}

bool KernelRow::graph() const { return layer == GS_K_GRAPH; }

void KernelsCollector::start(UprobeSession& session) {
  // Processes already running: their handle variables are read now, so that the ELF files
  // are parsed before counting is announced rather than on their first launch.
  for (pid_t pid : session.initial_pids()) scan_handle_vars(pid);
  if (cfg_.stacks) {
    for (pid_t pid : session.initial_pids()) watch_stacks(pid);
    session.on_maps_changed([this](pid_t pid) {
      stack_watched_.erase(static_cast<uint32_t>(pid));
      watch_stacks(pid);
    });
    return;
  }
  if (!cfg_.naming_only && !cfg_.track_last_launch) return;
  // trace reads its events in batches, often after a short-lived process has gone: its
  // mappings are read while it runs, so that host functions and stubs still resolve. errors
  // names the kernels of a process that faulted, which often ends at once.
  for (pid_t pid : session.initial_pids()) syms_.snapshot(pid);
  session.on_maps_changed([this](pid_t pid) {
    syms_.forget(pid);
    syms_.snapshot(pid);
  });
}

void KernelsCollector::watch(EventLoop& loop) {
  loop.watch(*rb_);
  if (py_) loop.watch(py_->events());
}

void KernelsCollector::tick() {
  learn_new_keys();
  if (py_) py_->poll();
  if (!said_gone_.empty()) forget_announced(std::exchange(said_gone_, {}));
  auto now = std::chrono::steady_clock::now();
  // trace (and errors) snapshot every process they notice, but only those that launched report
  // their exit: the others are forgotten once seen gone twice, so that their symbol tables go.
  if ((cfg_.naming_only || cfg_.track_last_launch) && now >= next_sweep_) {
    next_sweep_ = now + std::chrono::seconds(2);
    std::set<pid_t> dead;
    std::set<uint32_t> gone;
    for (pid_t pid : syms_.pids())
      if (kill(pid, 0) != 0 && errno == ESRCH) {
        if (seen_dead_.count(pid))
          gone.insert(static_cast<uint32_t>(pid));
        else
          dead.insert(pid);
      }
    seen_dead_ = std::move(dead);
    if (!gone.empty()) forget(gone);
  }
  while (!forget_at_.empty() && forget_at_.front().second <= now) {
    forget({forget_at_.front().first});
    forget_at_.pop_front();
  }
}

void KernelsCollector::drain() {
  rb_->drain();
  finish_exits();
}

const KernelsCollector::HandleVars& KernelsCollector::handle_vars(pid_t pid, const MapEntry& m) {
  auto [it, fresh] = handle_vars_.try_emplace({m.dev, m.ino});
  HandleVars& hv = it->second;
  hv.users.insert(pid);
  if (!fresh) return hv;
  try {
    auto f = std::make_unique<ElfFile>("/proc/" + std::to_string(pid) + "/root" + m.path);
    const auto& secs = f->symbol_sections();
    for (uint32_t i = 0; i < secs.size(); i++) {
      if (secs[i].dynamic) continue;
      f->for_each_named(
          secs[i], [](const ElfFile::Sym& s) { return s.type == STT_OBJECT && s.shndx != SHN_UNDEF; },
          [&](uint64_t, const ElfFile::Sym& s, std::string_view n) {
            if (n.ends_with("E8__handle") && n.find("__device_stub__") != n.npos)
              hv.vars.push_back({s.value, i, s.name});
          });
    }
    std::sort(hv.vars.begin(), hv.vars.end(), [](auto& a, auto& b) { return a.vaddr < b.vaddr; });
    hv.vars.shrink_to_fit();
    hv.first_load_vaddr = f->first_load_vaddr();
    hv.is_exec = f->is_executable();
    if (!hv.vars.empty()) hv.file = std::move(f);  // else no name is ever read: the file is let go
  } catch (const std::exception&) {
  }
  return hv;
}

std::string KernelsCollector::HandleVars::symbol(const Var& v) const {
  return file ? file->name_at(file->symbol_sections().at(v.section), v.name) : std::string();
}

std::optional<KernelsCollector::Name> KernelsCollector::symbolize(pid_t pid, uint64_t addr, bool exact) {
  auto s = syms_.symbol_at(pid, addr);
  if (!s || (exact && s->offset != 0)) return std::nullopt;
  return Name{kernel_name(s->raw), s->module};
}

// Every nvcc handle variable of every file the process maps, at its address in the process
// (handle variables live in .bss, often outside any file mapping, hence the load bias).
void KernelsCollector::for_each_handle_var(
    pid_t pid, const std::vector<MapEntry>& maps,
    const std::function<void(uint64_t, const HandleVars::Var&, const HandleVars&, const std::string&)>& f) {
  std::set<std::pair<dev_t, ino_t>> seen;
  for (auto& m : maps) {
    if (!m.is_file() || !seen.insert({m.dev, m.ino}).second) continue;
    const HandleVars& hv = handle_vars(pid, m);
    if (hv.vars.empty()) continue;
    uint64_t base = UINT64_MAX;
    for (auto& x : maps)
      if (x.dev == m.dev && x.ino == m.ino && x.file_offset == 0) base = std::min(base, x.start);
    if (!hv.is_exec && base == UINT64_MAX) continue;
    uint64_t bias = hv.is_exec ? 0 : base - hv.first_load_vaddr;
    for (auto& v : hv.vars) f(v.vaddr + bias, v, hv, m.path);
  }
}

// Each __cudaGetKernel event names one handle: the process's mappings are read once for all of
// them (again only when the variable is not in those read: a library loaded since).
std::optional<KernelsCollector::Name> KernelsCollector::handle_var_name(pid_t pid, uint64_t addr) {
  std::optional<Name> r;
  auto [it, fresh] = var_maps_.try_emplace(pid);
  for (int pass = 0; pass < 2 && !r; pass++) {
    if (fresh || pass == 1) it->second = read_proc_maps(pid);
    for_each_handle_var(pid, it->second, [&](uint64_t at, auto& v, auto& hv, const std::string& path) {
      if (at != addr || r) return;
      std::string sym = hv.symbol(v);
      if (!sym.empty()) r = Name{kernel_name(sym), basename_of(path), false, kernel_mangled(sym)};
    });
    if (fresh) break;
  }
  return r;
}

// Processes that were running before gpuscope: their __cudaGetKernel calls are over, but
// each stub keeps the handle it got in a static variable that .symtab names.
void KernelsCollector::scan_handle_vars(pid_t pid) {
  auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = var_scans_.try_emplace(pid, now);
  if (!fresh && now - it->second < std::chrono::seconds(2)) return;
  it->second = now;
  auto maps = read_proc_maps(pid);
  int mem = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) return;
  for_each_handle_var(pid, maps, [&](uint64_t at, auto& v, auto& hv, const std::string& path) {
    uint64_t h = 0;
    // Named only when it holds a new handle: a PyTorch process has tens of thousands of these.
    if (pread(mem, &h, sizeof h, static_cast<off_t>(at)) != sizeof h || !h || names_.count({pid, h})) return;
    std::string sym = hv.symbol(v);
    if (sym.empty()) return;
    names_.emplace(std::pair{pid, h}, Name{kernel_name(sym), basename_of(path), false, kernel_mangled(sym)});
    learned_++;
  });
  close(mem);
}

KernelsCollector::Name KernelsCollector::resolve(const Key& k, uint64_t caller, bool may_scan) {
  auto [pid, layer, handle] = k;
  if (layer == GS_K_GRAPH) return {fmt::format("[graph 0x{:x}]", handle), module_of(pid, caller)};
  if (layer == GS_K_HOST) {
    if (auto s = symbolize(static_cast<pid_t>(pid), handle, false)) return {"[host fn] " + s->kernel, s->module};
    return {fmt::format("[host fn 0x{:x}]", handle), module_of(pid, caller)};
  }
  auto lookup = [&](uint64_t h) -> const Name* {
    for (int hops = 0; hops < 3; hops++) {
      if (auto it = names_.find({pid, h}); it != names_.end()) return &it->second;
      auto kf = kernel_of_.find({pid, h});
      if (kf == kernel_of_.end()) return nullptr;
      h = kf->second;
    }
    return nullptr;
  };
  auto alias = [&]() -> std::optional<uint64_t> {
    gs_k_alias_key ak{pid, 0, handle};
    uint64_t rt = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.aliases), &ak, &rt) == 0) return rt;
    return std::nullopt;
  };
  const Name* n = lookup(handle);
  if (!n)
    if (auto rt = alias()) n = lookup(*rt);
  if (!n && may_scan) {
    scan_handle_vars(static_cast<pid_t>(pid));
    n = lookup(handle);
    if (!n)
      if (auto rt = alias()) n = lookup(*rt);
  }
  if (n) return *n;
  // Without a GPU, libcudart hands out the stub's own address as the handle.
  if (auto s = symbolize(static_cast<pid_t>(pid), handle, true)) return *s;
  if (auto d = driver_object_name(static_cast<pid_t>(pid), handle, caller)) return *d;
  std::string mod = module_of(static_cast<pid_t>(pid), caller);
  return {"[unknown " + mod + "]", mod};
}

void KernelsCollector::on_event(const gs_k_event& e) {
  pid_t pid = static_cast<pid_t>(e.pid);
  // A naming call comes before the process's first launches: its maps and interpreter are read
  // now, so that its stacks resolve however soon it exits.
  if (cfg_.stacks && e.type == GS_K_EV_NAME) watch_stacks(pid);
  if (e.type == GS_K_EV_EXIT) {
    if (comms_[e.pid].empty()) comms_[e.pid] = std::string(e.name, strnlen(e.name, GS_COMM_LEN));
    if (cfg_.naming_only) {
      // Its last launches may still be queued in trace's ring buffer: its names stay a while.
      forget_at_.emplace_back(e.pid, std::chrono::steady_clock::now() + std::chrono::seconds(2));
      said_gone_.insert(e.pid);  // its 'announced' entries go at the next tick, with the others'
      return;
    }
    exits_.insert(e.pid);
    if (!defer_exits_) finish_exits();
    return;
  }
  learned_++;
  naming_events_++;
  switch (e.namer) {
    case GS_NAMER_MODULE_GET_FUNCTION:
    case GS_NAMER_LIBRARY_GET_KERNEL: {
      std::string name(e.name, strnlen(e.name, sizeof e.name));
      // The copy made in BPF is cut at GS_K_NAME_LEN, or empty when the page was not in
      // memory yet: the string is in the loaded image, so read it again here.
      if (name.empty() || name.size() >= sizeof e.name - 1) {
        std::string full = read_user_string(pid, e.name_ptr, 4096);
        if (!full.empty()) name = std::move(full);
      }
      names_[{e.pid, e.handle}] = {demangle(name), module_of(pid, e.caller), false, name};
      check_layout(pid, e.handle, name);
      break;
    }
    case GS_NAMER_KERNEL_GET_FUNCTION: kernel_of_[{e.pid, e.handle}] = e.src; break;
    case GS_NAMER_GET_KERNEL:
      // The handle variable's symbol carries the kernel's device-side name, as CUPTI shows
      // it; the stub's own symbol spells lambda kernels differently.
      if (auto n = handle_var_name(pid, e.name_ptr))
        names_[{e.pid, e.handle}] = *n;
      else if (auto n = symbolize(pid, e.src, false))
        names_[{e.pid, e.handle}] = *n;
      else
        break;
      check_layout(pid, e.handle, names_[{e.pid, e.handle}].mangled);
      break;
  }
}

std::map<KernelsCollector::Key, uint64_t> KernelsCollector::read_counts(const std::set<uint32_t>* only) {
  std::map<Key, uint64_t> r;
  for_each_entry<gs_k_key, gs_k_val>(bpf_map__fd(skel_->maps.counts), [&](const gs_k_key& key, const gs_k_val& v) {
    if (only && !only->count(key.pid)) return;
    Key k{key.pid, key.layer, key.handle};
    r[k] = v.count;
    callers_.try_emplace(k, v.caller);
    cgroups_.try_emplace(key.pid, v.cgroup_id);
  });
  return r;
}

// New rows are named while their process still runs: a short-lived one may be gone by the
// next interval, and with it its maps.
void KernelsCollector::learn_new_keys() {
  std::vector<Key> fresh;
  for_each_entry<gs_k_key, gs_k_val>(bpf_map__fd(skel_->maps.counts), [&](const gs_k_key& key, const gs_k_val& v) {
    Key k{key.pid, key.layer, key.handle};
    if (resolved_.count(k) || guessed_.count(k)) return;
    callers_.try_emplace(k, v.caller);
    cgroups_.try_emplace(key.pid, v.cgroup_id);
    fresh.push_back(k);
  });
  name_fresh(fresh);
}

// The rows of one read of the counts that are not named yet: a snapshot names exactly the rows
// it returns (a row counted between two reads would have no name).
void KernelsCollector::learn_keys(const std::map<Key, uint64_t>& counts) {
  std::vector<Key> fresh;
  for (auto& [k, _] : counts)
    if (!resolved_.count(k) && !guessed_.count(k)) fresh.push_back(k);
  name_fresh(fresh);
}

void KernelsCollector::name_fresh(const std::vector<Key>& fresh) {
  // A row counted after the last read of the ring has its naming call's event there: read it
  // before naming (exits it meets wait for the next finish_exits, as this may run inside one).
  if (!fresh.empty()) {
    bool deferred = std::exchange(defer_exits_, true);
    rb_->drain();
    defer_exits_ = deferred;
  }
  for (auto& k : fresh)
    if (std::get<1>(k) != GS_K_GRAPH && std::get<1>(k) != GS_K_HOST) launched_.insert({std::get<0>(k), std::get<2>(k)});
  for (auto& k : fresh) {
    if (comms_[std::get<0>(k)].empty()) comms_[std::get<0>(k)] = proc_comm(static_cast<pid_t>(std::get<0>(k)));
    Name nm = resolve(k, callers_[k]);
    (nm.kernel.starts_with("[unknown") ? guessed_ : resolved_)[k] = nm;
  }
}

std::vector<KernelRow> KernelsCollector::rows_of(const std::map<Key, uint64_t>& counts) {
  std::vector<KernelRow> rows;
  rows.reserve(counts.size());
  for (auto& [k, cum] : counts) {
    auto [pid, layer, handle] = k;
    auto it = resolved_.find(k);
    Name nm = it != resolved_.end() ? it->second : guessed_.count(k) ? guessed_[k] : Name{"[unknown ?]", "?"};
    rows.push_back({pid, comms_[pid], layer, handle, std::move(nm.kernel), std::move(nm.module), cum, cgroups_[pid]});
  }
  return rows;
}

std::vector<KernelRow> KernelsCollector::snapshot() {
  // A counted launch's naming call came before it, so its event is in the ring already: read
  // first, no row is taken for unknown while its name waits there.
  drain();  // with the exits it read: an exited process's rows leave through its exit, never as live ones
  auto counts = read_counts();
  learn_keys(counts);
  retry_unknown();
  if (cfg_.stacks)  // named while their process lives
    for_each_entry<gs_k_sample_key, uint64_t>(bpf_map__fd(skel_->maps.samples),
                                              [&](const gs_k_sample_key& k, uint64_t) { frames_of(k); });
  return rows_of(counts);
}

// Python frames in torch, site-packages, dist-packages, the standard library or frozen modules;
// native frames in the CUDA and framework libraries, the interpreter, ctypes/libffi, the C and
// C++ runtimes and the loader. What is left is code the user wrote.
const char* const kDefaultSiteSkip =
    "(^|/)(torch|site-packages|dist-packages)/|/lib/python3(\\.[0-9]+)?/|^<frozen |"
    "^(libcuda\\.so|libcudart|libtorch|libc10|libcublas|libcudnn|libnccl|libcupti|libgpuscope|libpython|python3|"
    "_ctypes|libffi|libc\\.so|libstdc\\+\\+|libgcc_s|libm\\.so|ld-linux)";

void KernelsCollector::watch_stacks(pid_t pid) {
  if (stack_watched_.insert(static_cast<uint32_t>(pid)).second) syms_.snapshot(pid);
  // Asked again at each naming call: a launcher (pyenv's shim, env) may have exec'd the
  // interpreter since the pid was first seen (track() reads only its exe link then).
  if (py_ && !py_->tracking(pid)) py_->track(pid);
}

// A sampled stack, symbolized once: the probed entry point, the caller the walk from it skips,
// then the frame-pointer chain; its site is the innermost frame that site_skip_ lets through.
const KernelsCollector::Frames& KernelsCollector::frames_of(const gs_k_sample_key& k) {
  StackKey key{k.pid, k.stack_id, k.caller, k.py_hash};
  if (auto it = frames_.find(key); it != frames_.end()) return it->second;
  pid_t pid = static_cast<pid_t>(k.pid);
  std::vector<uint64_t> ips;
  uint64_t buf[GS_K_STACK_DEPTH] = {};
  if (k.stack_id >= 0 && bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stacks), &k.stack_id, buf) == 0) {
    for (size_t i = 0; i < GS_K_STACK_DEPTH && buf[i]; i++) {
      ips.push_back(buf[i]);
      // Kernels from 6.13 put the caller there themselves (a uprobe at a function's entry).
      if (i == 0 && k.caller && buf[1] != k.caller) ips.push_back(k.caller);
    }
  } else if (k.caller) {
    ips.push_back(k.caller);  // no stack kept: the caller still says where
  }
  std::vector<std::string> native;
  std::string site, outermost;
  for (size_t i = 0; i < ips.size(); i++) {
    std::string name = syms_.user(pid, ips[i], i > 0);
    std::string module = syms_.module_of(pid, i > 0 ? ips[i] - 1 : ips[i]);
    // A bare address is in no mapping: no frame to name a site by.
    if (site.empty() && module != "?" && !std::regex_search(module, site_skip_)) site = name;
    native.push_back(std::move(name));
    outermost = std::move(module);
  }
  Frames f;
  f.stack = native;
  // Every thread starts in the C library (__libc_start_main, clone) or the loader (_start).
  f.cut_short = !outermost.starts_with("libc.so") && !outermost.starts_with("libc-") && !outermost.starts_with("ld-");
  if (py_ && k.py_hash) {
    auto py = py_->frames(pid, k.py_hash);
    f.stack = py_merge(native, py);
    // A Python frame in user code is the site before any native one: "py::name (file:line)".
    for (auto& p : py) {
      auto open = p.name.rfind(" (");
      auto colon = p.name.rfind(':');
      std::string file = open != std::string::npos && colon != std::string::npos && colon > open
                             ? p.name.substr(open + 2, colon - open - 2)
                             : std::string();
      if (!std::regex_search(file, site_skip_)) {
        site = p.name;
        break;
      }
    }
  }
  f.site = site.empty() ? "[no user frame]" : site;
  return frames_.emplace(key, std::move(f)).first->second;
}

// Each row's counted launches split across its sampled stacks in their sampled proportions
// (largest remainders, so that the parts add up to the count), then summed per (process,
// kernel, stack).
std::vector<LaunchSite> KernelsCollector::sites_of(const std::map<Key, uint64_t>& counts,
                                                   const std::set<uint32_t>* only) {
  std::map<Key, std::vector<std::pair<gs_k_sample_key, uint64_t>>> by_row;
  for_each_entry<gs_k_sample_key, uint64_t>(bpf_map__fd(skel_->maps.samples),
                                            [&](const gs_k_sample_key& k, uint64_t n) {
                                              if (!only || only->count(k.pid))
                                                by_row[{k.pid, k.layer, k.handle}].emplace_back(k, n);
                                            });
  std::map<std::tuple<uint32_t, std::string, std::string, std::vector<std::string>>, LaunchSite> out;
  for (auto& [row, samples] : by_row) {
    auto c = counts.find(row);
    if (c == counts.end()) continue;
    uint64_t total = 0;
    for (auto& [_, n] : samples) total += n;
    uint64_t launches = c->second;
    std::vector<std::pair<uint64_t, uint64_t>> parts;  // (share, remainder)
    uint64_t given = 0;
    for (auto& [_, n] : samples) {
      unsigned __int128 x = static_cast<unsigned __int128>(launches) * n;
      parts.emplace_back(static_cast<uint64_t>(x / total), static_cast<uint64_t>(x % total));
      given += parts.back().first;
    }
    std::vector<size_t> order(parts.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return parts[a].second > parts[b].second; });
    for (size_t i = 0; given < launches && i < order.size(); i++, given++) parts[order[i]].first++;
    auto it = resolved_.find(row);
    Name nm = it != resolved_.end() ? it->second : guessed_.count(row) ? guessed_[row] : Name{"[unknown ?]", "?"};
    for (size_t i = 0; i < samples.size(); i++) {
      const Frames& f = frames_of(samples[i].first);
      auto& s = out[{std::get<0>(row), nm.kernel, nm.module, f.stack}];
      s.pid = std::get<0>(row);
      s.comm = comms_[s.pid];
      s.cgroup_id = cgroups_[s.pid];
      s.kernel = nm.kernel;
      s.module = nm.module;
      s.stack = f.stack;
      s.site = f.site;
      s.launches += parts[i].first;
      s.samples += samples[i].second;
      s.estimated = s.estimated || total != launches;
      s.cut_short = f.cut_short;
    }
  }
  std::vector<LaunchSite> v;
  for (auto& [_, s] : out) v.push_back(std::move(s));
  return v;
}

std::vector<LaunchSite> KernelsCollector::sites() {
  if (!cfg_.stacks) return {};
  drain();
  auto counts = read_counts();
  learn_keys(counts);
  retry_unknown();
  std::vector<LaunchSite> v = exited_sites_;
  auto live = sites_of(counts, nullptr);
  v.insert(v.end(), live.begin(), live.end());
  return v;
}

std::vector<LaunchedKernel> KernelsCollector::launched_since(uint32_t pid, uint64_t since_ns, size_t max) {
  std::vector<std::pair<Key, gs_k_val>> rows;
  if (!cfg_.track_last_launch) return {};
  for_each_entry<gs_k_key, gs_k_val>(bpf_map__fd(skel_->maps.counts), [&](const gs_k_key& key, const gs_k_val& v) {
    if (key.pid == pid && v.last_launch_ns > since_ns) rows.emplace_back(Key{key.pid, key.layer, key.handle}, v);
  });
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.last_launch_ns > b.second.last_launch_ns; });
  if (rows.size() > max) rows.resize(max);
  std::vector<Key> fresh;
  for (auto& [k, v] : rows) {
    callers_.try_emplace(k, v.caller);
    cgroups_.try_emplace(pid, v.cgroup_id);
    if (!resolved_.count(k) && !guessed_.count(k)) fresh.push_back(k);
  }
  name_fresh(fresh);
  std::set<uint32_t> only{pid};
  retry_unknown(&only);
  // Each row's most sampled stack (a sample key has no time: the process's whole run counts).
  std::map<Key, std::pair<gs_k_sample_key, uint64_t>> top;
  std::map<Key, uint64_t> sampled;
  if (cfg_.stacks)
    for_each_entry<gs_k_sample_key, uint64_t>(bpf_map__fd(skel_->maps.samples),
                                              [&](const gs_k_sample_key& sk, uint64_t n) {
                                                if (sk.pid != pid) return;
                                                Key k{sk.pid, sk.layer, sk.handle};
                                                sampled[k] += n;
                                                auto [it, fresh_row] = top.try_emplace(k, sk, n);
                                                if (!fresh_row && n > it->second.second) it->second = {sk, n};
                                              });
  std::vector<LaunchedKernel> out;
  for (auto& [k, v] : rows) {
    auto it = resolved_.find(k);
    Name nm = it != resolved_.end() ? it->second : guessed_.count(k) ? guessed_[k] : Name{"[unknown ?]", "?"};
    LaunchedKernel lk{std::move(nm.kernel), std::move(nm.module), std::get<1>(k), v.count, v.last_launch_ns};
    if (auto t = top.find(k); t != top.end()) {
      const Frames& f = frames_of(t->second.first);
      lk.site = f.site;
      lk.stack = f.stack;
      lk.site_samples = t->second.second;
      lk.samples = sampled[k];
    }
    out.push_back(std::move(lk));
  }
  return out;
}

// Unknown rows get another chance from names learned since, without rescanning the process:
// that is for new rows, and would stall every refresh. A row counted before its naming call's
// event was read is named here.
void KernelsCollector::retry_unknown(const std::set<uint32_t>* only) {
  for (auto it = guessed_.begin(); it != guessed_.end();) {
    if (only && !only->count(std::get<0>(it->first))) {
      ++it;
      continue;
    }
    Name nm = resolve(it->first, callers_[it->first], false);
    if (nm.kernel.starts_with("[unknown")) {
      it->second = nm.module == "?" ? it->second : nm;
      ++it;
    } else {
      resolved_[it->first] = nm;
      it = guessed_.erase(it);
    }
  }
}

// The exits since the last call, together: each walk of the maps serves all of them (a storm of
// short-lived processes would otherwise walk them once per exit).
void KernelsCollector::finish_exits() {
  if (exits_.empty()) return;
  std::set<uint32_t> pids = std::exchange(exits_, {});
  learn_new_keys();
  retry_unknown(&pids);
  auto counts = read_counts(&pids);
  std::map<uint32_t, std::map<Key, uint64_t>> by_pid;
  for (auto& [k, n] : counts) by_pid[std::get<0>(k)].emplace(k, n);
  if (exit_sink_)
    for (uint32_t pid : pids) exit_sink_(pid, rows_of(by_pid[pid]));
  if (cfg_.stacks) {
    auto gone = sites_of(counts, &pids);
    if (exit_sites_sink_) {
      std::map<uint32_t, std::vector<LaunchSite>> of;
      for (auto& s : gone) of[s.pid].push_back(std::move(s));
      for (auto& [pid, v] : of) exit_sites_sink_(pid, std::move(v));
    } else {
      exited_sites_.insert(exited_sites_.end(), gone.begin(), gone.end());
    }
    std::vector<gs_k_sample_key> dead;
    for_each_entry<gs_k_sample_key, uint64_t>(bpf_map__fd(skel_->maps.samples),
                                              [&](const gs_k_sample_key& k, uint64_t) {
                                                if (pids.count(k.pid)) dead.push_back(k);
                                              });
    for (auto& k : dead) bpf_map_delete_elem(bpf_map__fd(skel_->maps.samples), &k);
    for (uint32_t pid : pids) bpf_map_delete_elem(bpf_map__fd(skel_->maps.stack_ticks), &pid);
  }
  int fd = bpf_map__fd(skel_->maps.counts);
  for (auto& [k, _] : counts) {
    gs_k_key key{std::get<0>(k), std::get<1>(k), std::get<2>(k)};
    bpf_map_delete_elem(fd, &key);
    resolved_.erase(k), guessed_.erase(k), callers_.erase(k);
  }
  forget(pids);
}

namespace {
// Deletes the entries of a map keyed by a struct with a pid whose pid is one of these.
template <class K>
void delete_pids(int fd, const std::set<uint32_t>& pids) {
  std::vector<K> dead;
  for_each_entry<K, uint64_t>(fd, [&](const K& k, uint64_t) {
    if (pids.count(k.pid)) dead.push_back(k);
  });
  for (auto& k : dead) bpf_map_delete_elem(fd, &k);
}
}  // namespace

void KernelsCollector::forget_announced(const std::set<uint32_t>& pids) {
  delete_pids<gs_k_named_key>(bpf_map__fd(skel_->maps.announced), pids);
}

void KernelsCollector::forget(const std::set<uint32_t>& pids) {
  delete_pids<gs_k_alias_key>(bpf_map__fd(skel_->maps.aliases), pids);
  forget_announced(pids);
  auto gone = [&](uint32_t pid) { return pids.count(pid) > 0; };
  std::erase_if(names_, [&](auto& kv) { return gone(kv.first.first); });
  std::erase_if(resolved_, [&](auto& kv) { return gone(std::get<0>(kv.first)); });
  std::erase_if(guessed_, [&](auto& kv) { return gone(std::get<0>(kv.first)); });
  std::erase_if(unknown_until_, [&](auto& kv) { return gone(std::get<0>(kv.first)); });
  std::erase_if(kernel_of_, [&](auto& kv) { return gone(kv.first.first); });
  std::erase_if(object_read_, [&](auto& ph) { return gone(ph.first); });
  std::erase_if(launched_, [&](auto& ph) { return gone(ph.first); });
  // A file with handle variables goes with its last user; one without stays known as such (a
  // few bytes), so that a new process mapping it does not read it again.
  for (auto it = handle_vars_.begin(); it != handle_vars_.end();) {
    std::erase_if(it->second.users, [&](pid_t p) { return gone(static_cast<uint32_t>(p)); });
    it = it->second.users.empty() && !it->second.vars.empty() ? handle_vars_.erase(it) : std::next(it);
  }
  std::erase_if(frames_, [&](auto& kv) { return gone(std::get<0>(kv.first)); });
  for (uint32_t pid : pids) {
    stack_watched_.erase(pid);
    if (py_) py_->forget(static_cast<pid_t>(pid));
    syms_.forget(static_cast<pid_t>(pid));
    var_scans_.erase(static_cast<pid_t>(pid));
    var_maps_.erase(static_cast<pid_t>(pid));
    driver_file_.erase(static_cast<pid_t>(pid));
    comms_.erase(pid);
    cgroups_.erase(pid);
  }
}

// The layout of the driver that the process maps, learned when it can be. Keyed by the
// driver file, so a process with no named handle of its own uses what another one taught.
KernelsCollector::DriverLayout* KernelsCollector::driver_layout(pid_t pid) {
  auto f = driver_file_.find(pid);
  if (f == driver_file_.end()) {
    for (auto& m : read_proc_maps(pid))
      if (m.is_file() && basename_of(m.path).starts_with("libcuda.so")) {
        f = driver_file_.emplace(pid, std::pair{m.dev, m.ino}).first;
        layouts_[f->second].lib = m.path;
        break;
      }
    if (f == driver_file_.end()) return nullptr;  // no driver: runtime handles are stubs here
  }
  DriverLayout& l = layouts_[f->second];
  if (l.offset < 0 && !l.failed) learn_layout(pid, l);
  return &l;
}

// Accepts the first offset at which every checked handle (named by its naming call or its
// handle variable) points at its own name; fails for good when none does.
void KernelsCollector::learn_layout(pid_t pid, DriverLayout& l) {
  // Only handles whose exact mangled name is known: a demangled name may be shown in part.
  // And only handles that were launched: the driver fills a kernel's object in when it is
  // first used (lazy loading), so an object behind an unused handle variable may hold nothing.
  using Known = KnownHandles;
  auto named = [&](auto first, auto last, auto handle_of) {
    Known k;
    for (auto it = first; it != last && k.size() < kLayoutChecks; ++it)
      if (auto n = names_.find({static_cast<uint32_t>(pid), handle_of(*it)});
          n != names_.end() && !n->second.from_driver_object && spelled_alike(n->second.mangled))
        k.emplace_back(n->first.second, &n->second.mangled);
    return k;
  };
  auto first_offset = [&](const Known& k) {
    int mem = open_mem(pid);
    if (mem < 0) return -2;  // gone, or not readable now: nothing learned either way
    int found = -1;
    for (int off = 0; off <= kMaxLayoutOffset && found < 0; off += 8)
      if (std::all_of(k.begin(), k.end(), [&](auto& hn) { return object_name(mem, hn.first, off) == *hn.second; }))
        found = off;
    close(mem);
    return found;
  };
  const uint32_t p = static_cast<uint32_t>(pid);
  Known known = named(launched_.lower_bound({p, 0}), launched_.upper_bound({p, UINT64_MAX}),
                      [](const PH& ph) { return ph.second; });
  if (known.empty()) {
    // Before any named handle's launch (trace's first event may be a cuBLASLt launch): the
    // handles named so far, most of them launched before gpuscope started, are tried; when they
    // do not all agree the layout is not given up, only left to the first named launch.
    Known tentative = named(names_.lower_bound({p, 0}), names_.upper_bound({p, UINT64_MAX}),
                            [](const auto& kv) { return kv.first.second; });
    if (int off = tentative.empty() ? -1 : first_offset(tentative); off >= 0) {
      l.offset = off;
      known = std::move(tentative);
    } else {
      if (!l.said_waiting)
        notes_.push_back(
            fmt::format("kernels: no named kernel handle yet in process {} to learn {}'s object layout "
                        "from: handles named before gpuscope started stay unknown until one is",
                        pid, basename_of(l.lib)));
      l.said_waiting = true;
      return;
    }
  } else if (int off = first_offset(known); off == -2) {
    return;
  } else {
    l.offset = off;
  }
  if (l.offset >= 0) {
    learned_++;
    notes_.push_back(
        fmt::format("kernels: {} keeps a kernel's name at +{} of its function objects (checked "
                    "against {} named handles): handles named before gpuscope started are read there",
                    basename_of(l.lib), l.offset, known.size()));
  } else {
    l.failed = true;
    notes_.push_back(
        fmt::format("kernels: {}'s function objects hold no name that matches {} named handles at any "
                    "offset up to +{}: handles named before gpuscope started stay unknown{}",
                    basename_of(l.lib), known.size(), kMaxLayoutOffset, objects_seen(pid, known)));
  }
}

// A handle no naming call or handle variable named (cuBLAS's, loaded before gpuscope):
// its name read once from the driver's object, through the learned layout.
std::optional<KernelsCollector::Name> KernelsCollector::driver_object_name(pid_t pid, uint64_t handle,
                                                                           uint64_t caller) {
  DriverLayout* l = driver_layout(pid);
  if (!l || l->offset < 0 || !object_read_.insert({static_cast<uint32_t>(pid), handle}).second) return std::nullopt;
  int mem = open_mem(pid);
  if (mem < 0) return std::nullopt;
  auto raw = object_name(mem, handle, l->offset);
  close(mem);
  if (!raw) return std::nullopt;
  Name n{demangle(*raw), module_of(pid, caller), true};
  names_[{static_cast<uint32_t>(pid), handle}] = n;
  return n;
}

// Each handle named by its naming call checks a learned layout again; one that disagrees
// withdraws the layout and every name read through it.
void KernelsCollector::check_layout(pid_t pid, uint64_t handle, const std::string& mangled) {
  auto f = driver_file_.find(pid);
  if (f == driver_file_.end() || !spelled_alike(mangled)) return;
  DriverLayout& l = layouts_[f->second];
  if (l.offset < 0) return;
  int mem = open_mem(pid);
  if (mem < 0) return;
  auto n = object_name(mem, handle, l.offset);
  close(mem);
  if (n && *n == mangled) return;
  notes_.push_back(fmt::format("kernels: {}'s object for {} does not name it at +{}: names read there are withdrawn",
                               basename_of(l.lib), mangled, l.offset));
  l.offset = -1;
  l.failed = true;
  std::erase_if(names_, [](auto& kv) { return kv.second.from_driver_object; });
  for (auto it = resolved_.begin(); it != resolved_.end();)
    if (it->second.from_driver_object) {
      guessed_[it->first] = {"[unknown " + it->second.module + "]", it->second.module};
      it = resolved_.erase(it);
    } else {
      ++it;
    }
}

std::string KernelsCollector::name_of(uint32_t pid, uint64_t handle, bool host_function) {
  Key k{pid, host_function ? GS_K_HOST : GS_K_DRIVER, handle};
  if (auto it = resolved_.find(k); it != resolved_.end()) return it->second.kernel;
  auto now = std::chrono::steady_clock::now();
  if (auto it = unknown_until_.find(k);
      it != unknown_until_.end() && now < it->second.until && it->second.learned == learned_)
    return "";
  rb_->drain();                                                              // a naming call just before this launch
  if (!host_function && launched_.insert({pid, handle}).second) learned_++;  // one the layout may be learned from
  if (comms_[pid].empty()) comms_[pid] = proc_comm(static_cast<pid_t>(pid));
  Name nm = resolve(k, 0);
  if (nm.kernel.starts_with("[unknown") || nm.kernel.starts_with("[host fn 0x")) {
    unknown_until_[k] = {now + std::chrono::seconds(1), learned_};
    return "";
  }
  unknown_until_.erase(k);
  return (resolved_[k] = std::move(nm)).kernel;
}

KernelsCollector::Stats KernelsCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.drops);
  return {percpu_sum(fd, GS_K_DROP_ROWS_FULL),
          percpu_sum(fd, GS_K_DROP_CAPTURED),
          percpu_sum(fd, GS_K_DROP_EVENTS) + percpu_sum(fd, GS_K_DROP_NO_STATE),
          naming_events_,
          percpu_sum(fd, GS_K_DROP_STACKS),
          percpu_sum(fd, GS_K_DROP_SAMPLES_FULL),
          py_ ? py_->counters() : PyStacks::Counters{}};
}

}  // namespace gpuscope

// gpuscope doctor: what this host supports and which subcommands will work. Changes nothing:
// every probe, program and event it opens is closed again, and nothing is mounted.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cmd/agent/registry.h"
#include "common/loadable.h"
#include "core/bpf.h"
#include "core/clock.h"
#include "core/discovery.h"
#include "core/host_needs.h"
#include "core/cuda_api.h"
#include "core/output.h"
#include "core/proc_maps.h"
#include "core/system.h"
#include "core/where.h"

namespace gpuscope {

namespace {

namespace fs = std::filesystem;

constexpr const char* kNeedsRoot = "needs root";
constexpr const char* kRootHint = "needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)";

struct Check {
  std::string section, name;
  bool ok;
  std::string detail;
  bool blocked_by_privileges;  // failed for want of privileges; may well pass as root
};

struct Doctor {
  std::vector<Check> checks;
  bool priv = has_bpf_privileges();

  void add(const char* section, std::string name, bool ok, std::string detail) {
    bool root = !ok && !priv && detail.find(kNeedsRoot) != std::string::npos;
    checks.push_back({section, std::move(name), ok, std::move(detail), root});
  }
  const Check& get(const std::string& name) const {
    for (auto& c : checks)
      if (c.name == name) return c;
    throw std::logic_error("doctor: no check " + name);
  }
  // "EPERM (Operation not permitted)", plus the hint that matters when we are not root.
  std::string err(int e) const {
    std::string s = fmt::format("{} ({})", strerrorname_np(e) ? strerrorname_np(e) : "?", strerror(e));
    if (!priv && (e == EPERM || e == EACCES)) s = s + "; " + kNeedsRoot;
    return s;
  }
};

bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

int pmu_type(const char* pmu) {
  auto s = read_file_opt(fmt::format("/sys/bus/event_source/devices/{}/type", pmu));
  return s ? atoi(s->c_str()) : -1;
}

// Opens (and closes) one perf event on this process; returns 0 or errno.
int try_perf_event(perf_event_attr attr, pid_t pid = 0, int cpu = -1) {
  attr.size = sizeof attr;
  attr.disabled = 1;
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) return errno;
  close(fd);
  return 0;
}

// File offset of `addr` in the file mapped there, from /proc/self/maps.
std::optional<uint64_t> self_file_offset(uintptr_t addr) {
  auto maps = read_proc_maps(getpid());
  const MapEntry* m = mapping_at(maps, addr);
  if (!m) return std::nullopt;
  return addr - m->start + m->file_offset;
}

void check_system(Doctor& d) {
  utsname u{};
  uname(&u);
  d.add("System", "kernel", true, u.release);

  std::error_code ec;
  auto size = fs::file_size("/sys/kernel/btf/vmlinux", ec);
  std::string btf = ec ? "/sys/kernel/btf/vmlinux missing (kernel built without CONFIG_DEBUG_INFO_BTF)"
                       : fmt::format("/sys/kernel/btf/vmlinux ({:.1f} MiB)", size / 1048576.0);
  std::vector<std::string> mods;
  for (const char* m : {"nvidia", "nvidia_uvm"})
    if (exists(std::string("/sys/kernel/btf/") + m)) mods.push_back(m);
  if (!mods.empty()) btf += fmt::format("; module BTF: {}", fmt::join(mods, ", "));
  d.add("System", "btf", !ec, btf);
}

// One BPF program "r0 = 0; exit", loaded and attached, then closed. Returns "" or why not.
std::string try_bpf_prog(const Doctor& d, bpf_prog_type type, bpf_attach_type attach, const char* target,
                         const char* what) {
  const bpf_insn insns[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  if (type == BPF_PROG_TYPE_TRACING) {
    int id = libbpf_find_vmlinux_btf_id(target, attach);
    if (id < 0) return fmt::format("no BTF id for {}: {}", target, d.err(-id));
    opts.expected_attach_type = attach;
    opts.attach_btf_id = static_cast<__u32>(id);
  }
  int fd = bpf_prog_load(type, "gs_doctor", "GPL", insns, 2, &opts);
  if (fd < 0) return fmt::format("{} program load failed: {}", what, d.err(errno));
  int link = bpf_raw_tracepoint_open(type == BPF_PROG_TYPE_TRACING ? nullptr : target, fd);
  int e = errno;
  close(fd);
  if (link < 0) return fmt::format("{} program loads, attach failed: {}", what, d.err(e));
  close(link);
  return "";
}

void check_probes(Doctor& d) {
  const char* S = "Probes";
  int type = pmu_type("uprobe");
  if (type < 0) {
    d.add(S, "uprobes", false, "no uprobe PMU (kernel built without CONFIG_UPROBE_EVENTS)");
  } else {
    // Planted on this process only, at a function of our own binary that runs no more.
    auto off = self_file_offset(reinterpret_cast<uintptr_t>(&check_system));
    perf_event_attr a{};
    a.type = type;
    a.config1 = reinterpret_cast<uintptr_t>("/proc/self/exe");
    a.config2 = off.value_or(0);
    int e = off ? try_perf_event(a) : ENOENT;
    d.add(S, "uprobes", e == 0,
          e == 0 ? fmt::format("uprobe on /proc/self/exe+{:#x} opened and closed", *off)
                 : "uprobe perf_event_open failed: " + d.err(e));
  }

  type = pmu_type("kprobe");
  if (type < 0) {
    d.add(S, "kprobes", false, "no kprobe PMU (kernel built without CONFIG_KPROBES)");
  } else {
    perf_event_attr a{};
    a.type = type;
    a.config1 = reinterpret_cast<uintptr_t>("do_sys_openat2");
    int e = try_perf_event(a);
    d.add(S, "kprobes", e == 0,
          e == 0 ? "kprobe on do_sys_openat2 opened and closed" : "kprobe perf_event_open failed: " + d.err(e));
  }

  auto prog = [&](const char* name, bpf_prog_type t, bpf_attach_type at, const char* target) {
    auto why = try_bpf_prog(d, t, at, target, name);
    d.add(S, name, why.empty(), why.empty() ? fmt::format("{} on {} loads and attaches", name, target) : why);
  };
  prog("fentry", BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, "do_sys_openat2");
  prog("raw_tp", BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_TRACE_RAW_TP, "sched_process_exit");
  prog("tp_btf", BPF_PROG_TYPE_TRACING, BPF_TRACE_RAW_TP, "sched_process_exit");

  int map = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "gs_doctor", 0, 0, 4096, nullptr);
  int e = errno;
  if (map >= 0) close(map);
  d.add(S, "ringbuf", map >= 0,
        map >= 0 ? "BPF ring buffer map created" : "creating a BPF ring buffer map failed: " + d.err(e));

  perf_event_attr a{};
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.exclude_kernel = 1;
  e = try_perf_event(a);
  a.exclude_kernel = 0;
  int wide = try_perf_event(a, -1, 0);
  auto paranoid = read_file("/proc/sys/kernel/perf_event_paranoid");
  while (!paranoid.empty() && paranoid.back() == '\n') paranoid.pop_back();
  d.add(S, "perf_events", e == 0,
        fmt::format("cpu-clock on self: {}; system-wide on cpu 0: {}; perf_event_paranoid={}", e ? d.err(e) : "ok",
                    wide ? d.err(wide) : "ok", paranoid.empty() ? "?" : paranoid));
}

bool fs_supported(const char* type) {
  return read_file("/proc/filesystems").find(std::string("\t") + type + "\n") != std::string::npos;
}

void check_mounts(Doctor& d) {
  const char* S = "Mounts";
  // Usable means mounted, or mountable by gpuscope when a subcommand needs it: doctor mounts nothing.
  auto mount = [&](const char* name, const char* type, const char* dir, long magic) {
    struct statfs s {};
    if (statfs(dir, &s) == 0 && static_cast<long>(s.f_type) == magic)
      return d.add(S, name, true, fmt::format("mounted at {}", dir));
    bool can = fs_supported(type) && exists(dir) && d.priv;
    d.add(S, name, can,
          fmt::format("not mounted at {}; {}", dir,
                      !fs_supported(type) ? "kernel lacks it"
                      : !exists(dir)      ? "mount point missing"
                      : can               ? "gpuscope mounts it when needed"
                                          : "gpuscope mounts it when needed; needs root"));
  };
  mount("tracefs", "tracefs", "/sys/kernel/tracing", TRACEFS_MAGIC);
  mount("bpffs", "bpf", "/sys/fs/bpf", BPF_FS_MAGIC);
}

void check_privileges(Doctor& d) {
  const char* S = "Privileges";
  const std::pair<const char*, int> caps[] = {
      {"CAP_BPF", kCapBpf}, {"CAP_PERFMON", kCapPerfmon}, {"CAP_SYS_ADMIN", kCapSysAdmin}};
  for (auto [name, cap] : caps) {
    bool has = has_capability(cap);
    d.add(S, name, has, has ? "effective" : "missing");
  }
  d.add(S, "privileges", d.priv,
        fmt::format("uid {}: {}", geteuid(),
                    d.priv ? "enough to load BPF programs" : std::string("not enough: ") + kRootHint));
}

void check_nvidia(Doctor& d) {
  const char* S = "NVIDIA";
  void* h = nullptr;
  char why[PATH_MAX + 128];
  if (gs_dlopen_checked("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL, &h, why, sizeof why) == GS_LIB_DAMAGED) {
    d.add(S, "nvml", false, why);
  } else if (!h) {
    d.add(S, "nvml", false, "libnvidia-ml.so.1 not found");
  } else {
    // NVML's C API: nvmlReturn_t is an int enum, 0 = NVML_SUCCESS.
    using Init = int (*)();
    using Version = int (*)(char*, unsigned);
    using Count = int (*)(unsigned*);
    auto init = reinterpret_cast<Init>(dlsym(h, "nvmlInit_v2"));
    auto version = reinterpret_cast<Version>(dlsym(h, "nvmlSystemGetDriverVersion"));
    auto count = reinterpret_cast<Count>(dlsym(h, "nvmlDeviceGetCount_v2"));
    auto shutdown = reinterpret_cast<Init>(dlsym(h, "nvmlShutdown"));
    if (!init || !version || !count || !shutdown) {
      d.add(S, "nvml", false, "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetCount_v2 (driver too old)");
    } else if (int r = init(); r != 0) {
      d.add(S, "nvml", false, fmt::format("nvmlInit_v2 failed with NVML error {}", r));
    } else {
      char ver[96] = "?";
      unsigned n = 0;
      version(ver, sizeof ver);
      int r2 = count(&n);
      d.add(S, "nvml", r2 == 0,
            r2 == 0 ? fmt::format("driver {}, {} GPU(s)", ver, n)
                    : fmt::format("driver {}, nvmlDeviceGetCount_v2 failed with NVML error {}", ver, r2));
      shutdown();
    }
    dlclose(h);
  }
  for (const char* m : {"nvidia", "nvidia_uvm"}) {
    bool loaded = exists(std::string("/sys/module/") + m);
    d.add(S, m, loaded, loaded ? "kernel module loaded" : "kernel module not loaded");
  }
  // DRM nodes: ioctl counts their calls beside /dev/nvidia*'s where there are any.
  std::vector<std::string> dri;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/dev/dri", ec)) dri.push_back(e.path().filename().string());
  std::sort(dri.begin(), dri.end());
  d.add(S, "dri", !dri.empty(),
        dri.empty() ? "no /dev/dri: no DRM device nodes, ioctl sees NVIDIA's only"
                    : fmt::format("/dev/dri: {}", fmt::join(dri, " ")));
  // The graphics libraries frames probes host-wide (a process's own copies are found at run time).
  std::vector<std::string> gfx;
  for (auto& e : ld_cache_entries())
    for (const char* n : {"libvulkan.so.1", "libEGL.so.1", "libGLX.so.0", "libGL.so.1"})
      if (e.name == n) gfx.push_back(e.path);
  d.add(S, "graphics_libraries", !gfx.empty(),
        gfx.empty() ? "no Vulkan loader, libEGL, libGLX or libGL in the dynamic linker's cache"
                    : fmt::format("{}", fmt::join(gfx, " ")));
}

struct Library {
  std::string path;
  pid_t pid;
  size_t symbols;
  bool static_cudart;
};

std::string where(const Library& l) { return l.pid ? fmt::format("pid {} ({})", l.pid, proc_comm(l.pid)) : "ld cache"; }

std::vector<Library> find_libraries() {
  std::set<std::string, std::less<>> names;
  for (unsigned i = 0; i < GS_API_COUNT; i++)
    for (const char* suf : kApiVariantSuffixes) names.insert(std::string(api_symbol(i)) + suf);
  auto wanted = [&](std::string_view n) { return names.count(n) > 0; };
  std::vector<Library> out;
  auto add = [&](std::vector<CudaObject> objs) {
    for (auto& o : objs)
      out.push_back({o.path, o.seen_in, o.symbols->all().size(),
                     !Discovery::looks_like_cuda_library(fs::path(o.path).filename().string())});
  };
  // Separate scans, so a process mapping the ld cache's copy is listed too.
  add(Discovery(wanted, {}).scan_ld_cache());
  add(Discovery(wanted, {}).scan_processes());
  return out;
}

struct Sub {
  std::string name, status, reason;
};

// What keeps a subcommand from working; without privileges that is said once, and what would
// likely work as root is left out.
std::vector<std::string> missing(const Doctor& d, const HostNeeds& n) {
  std::vector<std::string> out;
  if (!d.priv && !n.all.empty()) out.push_back(kRootHint);
  for (auto& group : n.all) {
    bool met = false, root = false;
    for (auto& c : group) met |= d.get(c).ok, root |= d.get(c).blocked_by_privileges;
    if (met || root || group[0] == "privileges") continue;
    if (group.size() == 1)
      out.push_back(group[0] + ": " + d.get(group[0]).detail);
    else
      out.push_back(fmt::format("neither {}: {}, nor {}: {}", group[0], d.get(group[0]).detail, group[1],
                                d.get(group[1]).detail));
  }
  return out;
}

Sub verdict(const Doctor& d, const HostNeeds& n) {
  if (auto m = missing(d, n); !m.empty()) return {n.name, "unavailable", fmt::format("{}", fmt::join(m, "; "))};
  std::vector<std::string> lacking;
  for (auto& c : n.optional)
    if (!d.get(c).ok)
      lacking.push_back(c + ": " + d.get(c).detail + " (exits are noticed by a sweep each interval, not at once)");
  if (lacking.empty()) return {n.name, "ok", ""};
  return {n.name, "partial", fmt::format("{}", fmt::join(lacking, "; "))};
}

// The agent's collectors, from its registry (in its order), each with the subcommand whose BPF
// programs, and so whose needs, it shares.
const std::vector<std::pair<std::string, std::string>>& agent_collectors() {
  static const std::vector<std::pair<std::string, std::string>> c = [] {
    std::vector<std::pair<std::string, std::string>> v;
    for (auto& a : make_agent_collectors()) v.emplace_back(a->name(), a->subcommand());
    return v;
  }();
  return c;
}

// The agent is judged by its own collectors only: what it does not run (uvm, say) is no lack.
Sub agent_verdict(const std::vector<Sub>& subs, bool priv) {
  std::vector<std::string> off, partial;
  for (auto& [collector, sub] : agent_collectors()) {
    auto s = std::find_if(subs.begin(), subs.end(), [&](const Sub& x) { return x.name == sub; });
    if (s == subs.end() || s->status == "unavailable")
      off.push_back(collector);
    else if (s->status == "partial")
      partial.push_back(collector);
  }
  if (off.size() == agent_collectors().size())
    return {"agent", "unavailable", priv ? "none of its collectors works here" : kRootHint};
  std::vector<std::string> why;
  if (!off.empty()) why.push_back(fmt::format("without {}", fmt::join(off, ", ")));
  if (!partial.empty()) why.push_back(fmt::format("{} partial", fmt::join(partial, ", ")));
  return {"agent", why.empty() ? "ok" : "partial", fmt::format("{}", fmt::join(why, "; "))};
}

// Each subcommand's needs, as it declared them (GPUSCOPE_NEEDS), then the agent's.
std::vector<Sub> judge(const Doctor& d) {
  std::vector<Sub> out;
  for (auto& n : registered_host_needs()) out.push_back(verdict(d, n));
  out.push_back(agent_verdict(out, d.priv));
  return out;
}

void print_json(const Doctor& d, const std::vector<Library>& libs, const std::vector<Sub>& subs) {
  Writer w;
  auto& b = w.buf();
  WhereView view{Scope{}};
  const uint64_t now = realtime_ns();
  for (auto& c : d.checks)
    JsonLine(b).record("check", now).str("name", c.name).boolean("ok", c.ok).str("detail", c.detail).end();
  for (auto& l : libs) {
    JsonLine j(b);
    j.record("library", now);
    if (l.pid) view.process(j, l.pid, {});
    j.str("path", l.path);
    j.str("where", where(l)).num("api_symbols", l.symbols).boolean("static_cudart", l.static_cudart).end();
  }
  for (auto& s : subs)
    JsonLine(b).record("subcommand", now).str("name", s.name).str("status", s.status).str("reason", s.reason).end();
}

void print_text(const Doctor& d, const std::vector<Library>& libs, const std::vector<Sub>& subs) {
  std::string section;
  for (auto& c : d.checks) {
    if (c.section != section) fmt::print("{}{}\n", section.empty() ? "" : "\n", section = c.section);
    fmt::print("  {:<14} {:<3} {}\n", c.name, c.name == "kernel" ? "" : c.ok ? "ok" : "no", c.detail);
  }
  fmt::print("\nCUDA libraries ({})\n", libs.size());
  if (libs.empty()) fmt::print("  none in the ld cache or mapped by a running process\n");
  size_t w = 0, ww = 0;
  for (auto& l : libs) w = std::max(w, l.path.size()), ww = std::max(ww, where(l).size());
  for (auto& l : libs)
    fmt::print("  {:<{}}  {:<{}}  {:>2} API symbols{}\n", l.path, w, where(l), ww, l.symbols,
               l.static_cudart ? ", static cudart" : "");
  if (!d.priv) fmt::print("  (not root: other users' processes are not visible)\n");
  fmt::print("\nSubcommands\n");
  for (auto& s : subs) fmt::print("  {:<14} {}{}{}\n", s.name, s.status, s.reason.empty() ? "" : ": ", s.reason);
}

}  // namespace

int run_doctor(bool json) {
  set_libbpf_verbose(false);
  Doctor d;
  check_system(d);
  check_probes(d);
  check_mounts(d);
  check_privileges(d);
  check_nvidia(d);
  auto libs = find_libraries();
  auto subs = judge(d);
  if (json)
    print_json(d, libs, subs);
  else
    print_text(d, libs, subs);
  return 0;
}

}  // namespace gpuscope

// gpuscope memleak: the command and its views (summary tables and leak reports, JSON lines), with
// Vulkan device memory (the graphics collector's vkAllocateMemory/vkFreeMemory) as its own category.
#include <memory>
#include <time.h>

#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "core/cli.h"
#include "core/cuda_api.h"
#include "core/cuda_errors.h"
#include "core/event_loop.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/clock.h"
#include "core/where.h"
#include "graphics/frames.h"
#include "graphics/graphics_collector.h"
#include "memleak/memleak_collector.h"

namespace gpuscope {

namespace {

struct MemleakOptions {
  CommonFlags common;
  Scope scope;
  double interval_s = 5;
  double min_age_s = 0;  // 0: no suspected leaks while processes run
  bool stacks = false;
  bool no_py_frames = false;
};

const char* layer_str(unsigned l) { return l == GS_LAYER_RUNTIME ? "runtime" : "driver"; }
const char* category_str(unsigned c) {
  switch (c) {
    case GS_MEM_DEVICE: return "device";
    case GS_MEM_MANAGED: return "managed";
    case GS_MEM_PINNED: return "pinned";
    default: return "vmm";
  }
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
// Where the container columns go: after PID and COMM.
constexpr size_t kWhereAt = 2;

Table summary_table(const WhereView& w) {
  return w.table({{"PID", 7},
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
                  {"STATE", -8},
                  {"DEVICES", 0}},
                 kWhereAt);
}

// The memleak view: a summary row per process, leak reports, bad frees and the drops line.
class MemleakView {
 public:
  explicit MemleakView(const MemleakOptions& o) : o_(o), where_(o.scope), summary_table_(summary_table(where_)) {}
  void free_event(const MemleakFreeEvent& e);
  void context_released(const MemleakContextRelease& c);
  void ended(const MemleakProcess& p, const std::vector<MemleakLeak>& leaks);
  void interval(const MemleakSnapshot& s);
  // Each suspected leak is listed once (a process's are forgotten when it ends).
  bool newly_suspected(const MemleakLeak& l) {
    return suspected_.insert({l.pid, l.vmm_handle, l.vmm_handle ? l.handle : l.addr, l.ts_boot_ns}).second;
  }
  void drops(const MemleakCollector::Stats& d, const SessionStats& st);
  // A process's Vulkan device memory not freed: at its end, or older than min_age while it runs.
  void vulkan(uint32_t pid, const GfxProcess& p, const std::string& state, uint64_t min_age_ns);
  void flush() { out_.flush(); }

 private:
  void summary(const MemleakProcess& p);
  void leaks(uint32_t pid, const std::string& comm, const std::string& state, const std::vector<MemleakLeak>& rows);
  void leak_json(const MemleakLeak& r);

  const MemleakOptions& o_;
  WhereView where_;
  Table summary_table_;
  Writer out_;
  std::set<std::tuple<uint32_t, bool, uint64_t, uint64_t>> suspected_;  // (pid, handle?, addr, ts) listed
};

void MemleakView::free_event(const MemleakFreeEvent& e) {
  if (o_.common.json) {
    JsonLine j(out_.buf());
    j.record(e.bad ? "bad_free" : "untracked_free", realtime_ns());
    where_.process(j, static_cast<pid_t>(e.pid), e.comm);
    j.str("addr", hex(e.addr)).str("api", api_symbol(e.api)).str("layer", layer_str(e.layer));
    if (e.bad) j.str("reason", reason_str(e.reason));
    if (e.ret) j.str("error", error_name(e.layer, e.ret));
    j.end();
  } else if (e.bad) {
    fmt::format_to(std::back_inserter(out_.buf()), "BAD FREE  pid {} ({}): {}({}) {}{}\n", e.pid, e.comm,
                   api_symbol(e.api), hex(e.addr), reason_str(e.reason),
                   e.ret ? " -> " + error_name(e.layer, e.ret) : "");
  }
}

void MemleakView::context_released(const MemleakContextRelease& c) {
  if (o_.common.json) {
    JsonLine j(out_.buf());
    j.record("context_released", realtime_ns());
    where_.process(j, static_cast<pid_t>(c.pid), c.comm);
    j.str("ctx", c.primary ? "primary" : hex(c.ctx))
        .boolean("primary", c.primary)
        .num("device", c.device)
        .str("api", api_symbol(c.api))
        .str("layer", layer_str(c.layer))
        .num("allocs", c.allocs)
        .num("bytes", c.bytes)
        .num("pinned_allocs", c.pinned_allocs)
        .num("pinned_bytes", c.pinned_bytes)
        .end();
    return;
  }
  std::string what =
      c.primary ? fmt::format("the primary context of device {}", c.device)
                : fmt::format("context {}{}", hex(c.ctx), c.device < 0 ? "" : fmt::format(" (device {})", c.device));
  std::string pinned = c.pinned_allocs ? fmt::format(" and {} pinned block{}, {}", c.pinned_allocs,
                                                     c.pinned_allocs == 1 ? "" : "s", human(c.pinned_bytes))
                                       : "";
  fmt::format_to(std::back_inserter(out_.buf()),
                 "CONTEXT RELEASED  pid {} ({}): {} ended {} with {} allocation{}, {}{} never freed\n", c.pid, c.comm,
                 api_symbol(c.api), what, c.allocs, c.allocs == 1 ? "" : "s", human(c.bytes), pinned);
}

std::string devices_str(const std::vector<MemleakDevice>& devs) {
  std::string r;
  for (auto& d : devs)
    r += fmt::format("{}{}:{}", r.empty() ? "" : " ", d.device < 0 ? "?" : std::to_string(d.device),
                     human(d.outstanding_bytes));
  return r.empty() ? "-" : r;
}

void MemleakView::summary(const MemleakProcess& p) {
  auto it = std::back_inserter(out_.buf());
  const gs_ml_proc& c = p.counters;
  if (o_.common.json) {
    JsonLine j(out_.buf());
    j.record("summary", realtime_ns());
    where_.process(j, static_cast<pid_t>(p.pid), p.comm);
    j.num("outstanding_bytes", c.outstanding_bytes);
    j.num("outstanding_allocs", c.outstanding_allocs).num("allocs_ok", c.allocs_ok);
    j.num("allocs_failed", c.allocs_failed).num("frees_ok", c.frees_ok).num("frees_failed", c.frees_failed);
    j.num("pinned_bytes", c.pinned_bytes).num("pinned_allocs", c.pinned_allocs);
    j.num("allocs_untracked", c.allocs_untracked).num("frees_untracked", c.frees_untracked);
    j.num("bad_frees", c.bad_frees).num("double_frees", c.double_frees);
    j.begin_array("devices");
    for (auto& d : p.devices)
      j.begin_object()
          .num("device", d.device)
          .num("outstanding_bytes", d.outstanding_bytes)
          .num("outstanding_allocs", d.outstanding_allocs)
          .end_object();
    j.end_array();
    // One key per name, in the order names first come, their counts summed.
    for (auto* errs : {&p.alloc_errors, &p.free_errors}) {
      std::vector<std::pair<std::string, uint64_t>> merged;
      for (auto& [n, v] : *errs) {
        auto m = std::find_if(merged.begin(), merged.end(), [&](auto& x) { return x.first == n; });
        if (m == merged.end())
          merged.emplace_back(n, v);
        else
          m->second += v;
      }
      j.begin_object(errs == &p.alloc_errors ? "alloc_errors" : "free_errors");
      for (auto& [n, v] : merged) j.num(n, v);
      j.end_object();
    }
    j.str("state", p.state).end();
    return;
  }
  summary_table_.row(
      out_.buf(),
      where_.row({std::to_string(p.pid), p.comm, human(c.outstanding_bytes), std::to_string(c.outstanding_allocs),
                  human(c.pinned_bytes), std::to_string(c.allocs_ok), std::to_string(c.allocs_failed),
                  std::to_string(c.frees_ok), std::to_string(c.frees_failed), std::to_string(c.bad_frees),
                  std::to_string(c.frees_untracked), p.state, devices_str(p.devices)},
                 kWhereAt, static_cast<pid_t>(p.pid)));
  for (auto* errs : {&p.alloc_errors, &p.free_errors})
    for (auto& [n, v] : *errs)
      fmt::format_to(it, "{:>9}{} failed {} time{}: {}\n", "", errs == &p.alloc_errors ? "allocations" : "frees", v,
                     v == 1 ? "" : "s", n);
}

void MemleakView::leak_json(const MemleakLeak& r) {
  JsonLine j(out_.buf());
  j.record("leak", realtime_ns());
  where_.process(j, static_cast<pid_t>(r.pid), r.comm);
  j.str("addr", hex(r.addr))
      .num("size", r.size)
      .num("age_ns", r.age_ns)
      .str("api", api_symbol(r.api))
      .num("device", r.device);
  j.begin_array("stack");
  for (auto& f : r.stack) j.str(f);
  j.end_array();
  j.str("layer", layer_str(r.layer)).str("category", category_str(r.category)).str("state", r.state);
  if (r.vmm_handle) j.str("handle", hex(r.handle)).boolean("released", r.released).num("mappings", r.mappings);
  j.end();
}

void MemleakView::leaks(uint32_t pid, const std::string& comm, const std::string& state,
                        const std::vector<MemleakLeak>& rows) {
  auto it = std::back_inserter(out_.buf());
  if (o_.common.json) {
    for (auto& r : rows) leak_json(r);
    return;
  }
  if (rows.empty()) return;
  uint64_t total = 0;
  for (auto& r : rows) total += r.size;
  fmt::format_to(it, "\n{} pid {} ({}): {} allocation{} never freed, {} in all\n",
                 state == "running" ? "SUSPECTED LEAKS" : "LEAK REPORT", pid, comm, rows.size(),
                 rows.size() == 1 ? "" : "s", human(total));
  static const Table table({{"ADDR", -16}, {"SIZE", 12}, {"AGE", 10}, {"API", -24}, {"DEVICE", 6}, {"KIND", 0}});
  table.header(out_.buf());
  for (auto& r : rows) {
    std::string kind = category_str(r.category);
    if (r.vmm_handle)
      kind += fmt::format(" handle {}{}, {} mapping(s)", hex(r.handle), r.released ? " released" : "", r.mappings);
    table.row(out_.buf(), {hex(r.addr), human(r.size), human_age(r.age_ns), api_symbol(r.api),
                           r.device < 0 ? "-" : std::to_string(r.device), kind});
    for (auto& f : r.stack) fmt::format_to(it, "    {}\n", f);
  }
  fmt::format_to(it, "\n");
}

void MemleakView::ended(const MemleakProcess& p, const std::vector<MemleakLeak>& rows) {
  if (!o_.common.json) summary_table_.header(out_.buf());
  summary(p);
  leaks(p.pid, p.comm, p.state, rows);
  std::erase_if(suspected_, [&](auto& t) { return std::get<0>(t) == p.pid; });
}

void MemleakView::interval(const MemleakSnapshot& s) {
  auto it = std::back_inserter(out_.buf());
  if (!o_.common.json) {
    time_t t = time(nullptr);
    struct tm tm;
    localtime_r(&t, &tm);
    fmt::format_to(it, "{:02}:{:02}:{:02}  {} process{}\n", tm.tm_hour, tm.tm_min, tm.tm_sec, s.processes.size(),
                   s.processes.size() == 1 ? "" : "es");
    if (!s.processes.empty()) summary_table_.header(out_.buf());
  }
  for (auto& p : s.processes) summary(p);
  std::map<uint32_t, std::vector<MemleakLeak>> by_pid;
  for (auto& l : s.allocations) by_pid[l.pid].push_back(l);
  for (auto& [pid, rows] : by_pid) leaks(pid, rows.front().comm, "running", rows);
  if (!o_.common.json) fmt::format_to(it, "\n");
  out_.flush();
}

void MemleakView::drops(const MemleakCollector::Stats& d, const SessionStats& st) {
  if (o_.common.json) {
    JsonLine j(out_.buf());
    j.record("drops", realtime_ns()).num("allocs_not_recorded_map_full", d.allocs_map_full);
    j.num("calls_untracked_process_map_full", d.procs_map_full).num("events_lost_ringbuf_full", d.events_lost);
    j.num("calls_without_thread_state", d.no_thread_state).num("stacks_lost", d.stacks_lost);
    j.num("error_codes_not_recorded", d.error_codes_lost).num("py_chains_truncated", d.py.truncated);
    j.num("py_walks_unreadable", d.py.read_errors).num("py_chains_not_kept", d.py.stacks_full);
    j.num("py_notices_lost", d.py.events_lost).num("contexts_not_recorded_map_full", d.contexts_lost);
    j.num("probes", st.probes).num("objects", st.objects).num("attach_failures", st.attach_failures);
    j.num("attach_retries", st.attach_retries).end();
  } else if (d.allocs_map_full || d.procs_map_full || d.events_lost || d.no_thread_state || d.stacks_lost ||
             d.error_codes_lost || d.contexts_lost || d.py.truncated || d.py.read_errors || d.py.stacks_full ||
             d.py.events_lost) {
    fmt::format_to(std::back_inserter(out_.buf()),
                   "not recorded: {} allocations (map full), {} calls of untracked processes (map full), {} events "
                   "(ring buffer full), {} calls without thread state, {} stacks, {} error codes, {} contexts (map "
                   "full); Python chains: {} cut at {} frames, {} unreadable mid-walk, {} not kept (map full), {} "
                   "named late\n",
                   d.allocs_map_full, d.procs_map_full, d.events_lost, d.no_thread_state, d.stacks_lost,
                   d.error_codes_lost, d.contexts_lost, d.py.truncated, GS_PY_MAX_DEPTH, d.py.read_errors,
                   d.py.stacks_full, d.py.events_lost);
  }
  out_.flush();
}

void MemleakView::vulkan(uint32_t pid, const GfxProcess& p, const std::string& state, uint64_t min_age_ns) {
  const uint64_t now = boottime_ns();
  std::vector<std::pair<uint64_t, const GfxMemory::Block*>> rows;
  for (auto& [handle, b] : p.memory.live) {
    const uint64_t age = now > b.at_ns ? now - b.at_ns : 0;
    if (state != "running" || age >= min_age_ns) rows.emplace_back(handle, &b);
  }
  if (rows.empty()) return;
  auto it = std::back_inserter(out_.buf());
  uint64_t total = 0;
  for (auto& [h, b] : rows) {
    const uint64_t age = now > b->at_ns ? now - b->at_ns : 0;
    total += b->size_bytes;
    if (!o_.common.json) continue;
    JsonLine j(out_.buf());
    j.record("leak", realtime_ns());
    where_.process(j, static_cast<pid_t>(pid), p.comm);
    j.str("addr", hex(h)).num("size", b->size_bytes).num("age_ns", age).str("api", "vkAllocateMemory");
    j.num("device", -1).begin_array("stack").end_array();
    j.str("layer", "vulkan").str("category", "vulkan").str("state", state).num("memory_type", b->mem_type).end();
  }
  if (o_.common.json) return;
  fmt::format_to(it, "\n{} pid {} ({}): {} Vulkan allocation{} never freed, {} in all\n",
                 state == "running" ? "SUSPECTED LEAKS" : "LEAK REPORT", pid, p.comm, rows.size(),
                 rows.size() == 1 ? "" : "s", human(total));
  static const Table table({{"MEMORY", -16}, {"SIZE", 12}, {"AGE", 10}, {"API", -24}, {"DEVICE", 6}, {"KIND", 0}});
  table.header(out_.buf());
  for (auto& [h, b] : rows)
    table.row(out_.buf(), {hex(h), human(b->size_bytes), human_age(now > b->at_ns ? now - b->at_ns : 0),
                           "vkAllocateMemory", "-", fmt::format("vulkan memory type {}", b->mem_type)});
  fmt::format_to(it, "\n");
}

int run_memleak(const MemleakOptions& o) {
  require_bpf_privileges();
  set_libbpf_verbose(o.common.verbose);
  UprobeSession session(o.scope, o.common.verbose);
  MemleakCollector memleak(session, {o.scope, o.stacks, !o.no_py_frames});
  memleak.on_note([](const std::string& line) { fprintf(stderr, "gpuscope: %s\n", line.c_str()); });
  if (!memleak.exits_hooked())
    fprintf(stderr, "gpuscope: no tp_btf (%s): exits are noticed by a sweep every interval\n",
            memleak.exit_hook_error().c_str());
  MemleakView view(o);
  memleak.on_free([&](const MemleakFreeEvent& e) { view.free_event(e); });
  memleak.on_context_released([&](const MemleakContextRelease& c) { view.context_released(c); });
  memleak.on_end([&](const MemleakProcess& p, const std::vector<MemleakLeak>& l) { view.ended(p, l); });
  // Vulkan memory: its allocations and frees, from the graphics collector on the same session.
  FrameTracker vk([](const Frame&) {});
  std::set<uint32_t> vk_suspected;
  GraphicsCollector gfx(session, {o.scope}, [&](const gs_gfx_event& e, std::string_view comm) { vk.add(e, comm); });
  session.start();
  memleak.start(session);
  if (o.scope.pids.empty()) gfx.attach_system_libraries();
  // Processes that exited leave their report; those still running list what is past --min-age once.
  auto vulkan_report = [&](bool at_end) {
    gfx.drain();
    std::vector<uint32_t> gone;
    for (auto& [pid, p] : vk.processes()) {
      if (!process_running(static_cast<pid_t>(pid))) {
        view.vulkan(pid, p, "exited", 0);
        gone.push_back(pid);
      } else if (!at_end && o.min_age_s > 0 && !vk_suspected.count(pid)) {
        const size_t n = p.memory.live.size();
        view.vulkan(pid, p, "running", static_cast<uint64_t>(o.min_age_s * 1e9));
        if (n) vk_suspected.insert(pid);
      }
    }
    for (uint32_t pid : gone) vk.forget(pid), vk_suspected.erase(pid);
  };

  std::optional<uint64_t> min_age;
  if (o.min_age_s > 0) min_age = static_cast<uint64_t>(o.min_age_s * 1e9);
  auto suspected = [&](const MemleakLeak& l) { return view.newly_suspected(l); };
  EventLoop loop(o.common.duration_s);
  memleak.watch(loop);
  session.watch(loop);
  gfx.watch(loop);
  loop.after_wakeup([&] {
    memleak.tick();
    view.flush();
  });
  loop.every(o.interval_s, [&] {
    memleak.sweep();
    view.interval(memleak.snapshot(min_age, suspected));
    vulkan_report(false);
    view.flush();
  });
  auto st = session.stats();
  fprintf(stderr,
          "gpuscope: tracking GPU memory at %zu probes in %zu CUDA objects and Vulkan memory through %zu graphics "
          "library files; summary every %g s. Ctrl-C to end.\n",
          st.probes, st.objects, gfx.library_files(), o.interval_s);
  loop.run();
  session.detach();
  gfx.detach();
  memleak.drain();
  memleak.sweep();
  view.interval(memleak.snapshot());
  vulkan_report(true);
  view.drops(memleak.stats(), session.stats());
  if (auto g = gfx.stats(); g.lost_ringbuf || g.lost_state)
    fprintf(stderr, "gpuscope: not recorded: %llu Vulkan calls (ring buffer full), %llu (no room for their state)\n",
            (unsigned long long)g.lost_ringbuf, (unsigned long long)g.lost_state);
  return 0;
}

}  // namespace

void register_memleak(CLI::App& app) {
  auto [cmd, o] = new_command<MemleakOptions>(
      app, "memleak", "Track live GPU allocations (CUDA and Vulkan) per process; leak report when a process exits",
      run_memleak);
  add_number(cmd, "--interval", o->interval_s, "Print the per-process summary every SECONDS (default 5)", "seconds",
             0.01, 86400);
  add_number(cmd, "--min-age", o->min_age_s,
             "List live allocations older than SECONDS as suspected leaks (default: none while processes run)",
             "seconds", 0.001, 31536000);
  cmd->add_flag("--stacks", o->stacks, "Record and symbolize the allocating user stack");
  cmd->add_flag("--no-py-frames", o->no_py_frames,
                "With --stacks: do not read CPython frames from the interpreter's memory");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope memleak                        # every process, summary every 5 s, leak report at exit\n"
      "  gpuscope memleak -p 1234 --min-age 60   # also list allocations older than a minute\n"
      "  gpuscope memleak -c python3 --stacks --json");
}
GPUSCOPE_COMMAND(register_memleak, 40);
GPUSCOPE_NEEDS(memleak, 40, {{"privileges"}, {"btf"}, {"uprobes"}, {"ringbuf"}}, {"tp_btf"});

}  // namespace gpuscope

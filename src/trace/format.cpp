#include <time.h>

#include <cstring>
#include <iterator>

#include "core/cuda_errors.h"
#include "core/output.h"
#include "trace/trace.h"

namespace gpuscope {

const char* memcpy_kind_name(unsigned kind) {
  static const char* const names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                      "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
  return kind < 5 ? names[kind] : "unknown";
}

void normalize_event(gs_call_event& e) {
  const gs_api_desc& d = api_desc(e.api);
  if (e.phase == GS_PHASE_ENTER) {
    uint32_t f = 0;
    if (d.size) f |= GS_F_SIZE;
    if (d.ptr) f |= GS_F_PTR;
    if (d.dst) f |= GS_F_DST;
    if (d.src) f |= GS_F_SRC;
    if (d.kind || d.kind_fixed) f |= GS_F_KIND;
    if (d.stream) f |= GS_F_STREAM;
    if (d.event) f |= GS_F_EVENT;
    if (d.graph) f |= GS_F_GRAPH;
    if (d.handle) f |= GS_F_HANDLE;
    if (d.device) f |= GS_F_DEVICE;
    if (d.func) f |= GS_F_FUNC;
    if (d.ctx) f |= GS_F_CTX;
    if (d.special >= GS_SP_RT_LAUNCH && d.special <= GS_SP_CU_LAUNCH_EX)
      f |= GS_F_FUNC | GS_F_LAUNCH | GS_F_STREAM | (e.fields & (GS_F_CLUSTER | GS_F_CAPTURED));
    e.fields = f;
    return;
  }
  if (!(e.fields & GS_F_OUT)) {
    e.fields = 0;
    return;
  }
  // By enum gs_out: where an exit's out value goes, and the field that says so.
  struct Out {
    uint32_t field;
    decltype(gs_call_args::ptr) gs_call_args::*member;  // nullptr: the device, the one 32-bit out value
  };
  static constexpr Out kOut[] = {{0, nullptr},
                                 {GS_F_PTR, &gs_call_args::ptr},
                                 {GS_F_STREAM, &gs_call_args::stream},
                                 {GS_F_EVENT, &gs_call_args::event},
                                 {GS_F_GRAPH, &gs_call_args::graph},
                                 {GS_F_HANDLE, &gs_call_args::handle},
                                 {GS_F_DEVICE, nullptr},
                                 {GS_F_CTX, &gs_call_args::ctx}};
  const uint64_t v = e.args.ptr;
  e.args.ptr = 0;
  const Out o = d.out < std::size(kOut) ? kOut[d.out] : Out{0, nullptr};
  e.fields = o.field;
  if (o.member)
    e.args.*o.member = v;
  else if (o.field == GS_F_DEVICE)
    e.args.device = static_cast<int32_t>(v);
}

static std::string_view comm_view(const char* c) { return std::string_view(c, strnlen(c, GS_COMM_LEN)); }

static std::string ret_name(const gs_call_event& e) {
  return e.layer == GS_LAYER_RUNTIME ? cuda_runtime_error_name(e.ret) : cuda_driver_error_name(e.ret);
}

static void put_ret_name(JsonLine& j, const gs_call_event& e) {
  const char* n = e.layer == GS_LAYER_RUNTIME ? cuda_runtime_error_cstr(e.ret) : cuda_driver_error_cstr(e.ret);
  if (n)
    j.str("ret_name", n);
  else
    j.str("ret_name", ret_name(e));
}

void format_event_json(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out) {
  JsonLine j(out);
  j.record("call", static_cast<uint64_t>(static_cast<int64_t>(e.ts_boot_ns) + ctx.realtime_offset_ns));
  if (ctx.where) {
    ctx.where->process(j, static_cast<pid_t>(e.pid), comm_view(e.comm), e.cgroup_id);
  } else {
    static const ContainerInfo unknown;
    put_process_fields(j, e.pid, comm_view(e.comm), unknown);
  }
  j.num("tid", e.tid).str("thread", comm_view(e.thread));
  if (ctx.cgroups) j.str("cgroup", ctx.cgroups->path(e.cgroup_id));
  j.str("layer", layer_name(e.layer)).str("api", api_symbol(e.api));
  j.str("phase", e.phase == GS_PHASE_ENTER ? "enter" : "exit");
  if (e.phase == GS_PHASE_EXIT) {
    j.num("ret", e.ret);
    put_ret_name(j, e);
    j.num("dur_ns", e.dur_ns);
  }
  const auto& a = e.args;
  const uint32_t f = e.fields;
  if (f & GS_F_SIZE) j.num("size", a.size_bytes);
  if (f & GS_F_PTR) j.hex("ptr", a.ptr);
  if (f & GS_F_DST) j.hex("dst", a.dst);
  if (f & GS_F_SRC) j.hex("src", a.src);
  if (f & GS_F_KIND) j.str("kind", memcpy_kind_name(a.kind));
  if (f & GS_F_FUNC) {
    j.hex("func", a.func);
    if (ctx.kernel_name) {
      std::string k = ctx.kernel_name(e.pid, a.func, api_desc(e.api).special == GS_SP_HOST_FUNC);
      if (!k.empty()) j.str("kernel", k);
    }
  }
  if (f & GS_F_LAUNCH) j.triple("grid", a.grid).triple("block", a.block).num("shared_mem", a.shared_mem_bytes);
  if (f & GS_F_CLUSTER) j.triple("cluster", a.cluster);
  if (f & GS_F_STREAM) j.hex("stream", a.stream);
  if (f & GS_F_GRAPH) j.hex("graph", a.graph);
  if (f & GS_F_EVENT) j.hex("event", a.event);
  if (f & GS_F_HANDLE) j.hex("handle", a.handle);
  if (f & GS_F_DEVICE) j.num("device", a.device);
  if (f & GS_F_CTX) j.hex("ctx", a.ctx);
  if (f & GS_F_LAUNCH) j.boolean("captured", f & GS_F_CAPTURED);
  j.end();
}

void format_table_header(const FormatContext& ctx, fmt::memory_buffer& out) {
  if (ctx.timestamps) fmt::format_to(std::back_inserter(out), "{:<15} ", "TIME");
  fmt::format_to(std::back_inserter(out), "{:<16} {:>7} {:>7} ", "COMM", "PID", "TID");
  if (ctx.where) ctx.where->put_header(out);
  fmt::format_to(std::back_inserter(out), "{:<7} {:<28} {:<5} {}\n", "LAYER", "API", "PHASE", "DETAILS");
}

void format_event_table(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out) {
  auto it = std::back_inserter(out);
  if (ctx.timestamps) {
    int64_t ns = static_cast<int64_t>(e.ts_boot_ns) + ctx.realtime_offset_ns;
    time_t secs = ns / 1000000000;
    // localtime_r consults the time zone each call; one lookup per second of events is enough.
    if (secs != ctx.tm_secs) {
      localtime_r(&secs, &ctx.tm_cache);
      ctx.tm_secs = secs;
    }
    const struct tm& tm = ctx.tm_cache;
    fmt::format_to(it, "{:02}:{:02}:{:02}.{:06} ", tm.tm_hour, tm.tm_min, tm.tm_sec, (ns % 1000000000) / 1000);
  }
  fmt::format_to(it, "{:<16} {:>7} {:>7} ", comm_view(e.comm), e.pid, e.tid);
  if (ctx.where) ctx.where->put_cells(out, static_cast<pid_t>(e.pid), e.cgroup_id);
  fmt::format_to(it, "{:<7} {:<28} {:<5} ", layer_name(e.layer), api_symbol(e.api),
                 e.phase == GS_PHASE_ENTER ? "enter" : "exit");
  const auto& a = e.args;
  const uint32_t f = e.fields;
  if (e.phase == GS_PHASE_EXIT)
    fmt::format_to(it, "ret={} dur={:.3f}us ", ret_name(e), static_cast<double>(e.dur_ns) / 1000.0);
  if (f & GS_F_SIZE) fmt::format_to(it, "size={} ", a.size_bytes);
  if (f & GS_F_PTR) fmt::format_to(it, "ptr=0x{:x} ", a.ptr);
  if (f & GS_F_DST) fmt::format_to(it, "dst=0x{:x} ", a.dst);
  if (f & GS_F_SRC) fmt::format_to(it, "src=0x{:x} ", a.src);
  if (f & GS_F_KIND) fmt::format_to(it, "kind={} ", memcpy_kind_name(a.kind));
  if (f & GS_F_FUNC) {
    std::string k = ctx.kernel_name ? ctx.kernel_name(e.pid, a.func, api_desc(e.api).special == GS_SP_HOST_FUNC) : "";
    if (k.empty())
      fmt::format_to(it, "func=0x{:x} ", a.func);
    else
      fmt::format_to(it, "kernel={} func=0x{:x} ", k, a.func);
  }
  if (f & GS_F_LAUNCH)
    fmt::format_to(it, "grid=({},{},{}) block=({},{},{}) smem={} ", a.grid[0], a.grid[1], a.grid[2], a.block[0],
                   a.block[1], a.block[2], a.shared_mem_bytes);
  if (f & GS_F_CLUSTER) fmt::format_to(it, "cluster=({},{},{}) ", a.cluster[0], a.cluster[1], a.cluster[2]);
  if (f & GS_F_STREAM) fmt::format_to(it, "stream=0x{:x} ", a.stream);
  if (f & GS_F_GRAPH) fmt::format_to(it, "graph=0x{:x} ", a.graph);
  if (f & GS_F_EVENT) fmt::format_to(it, "event=0x{:x} ", a.event);
  if (f & GS_F_HANDLE) fmt::format_to(it, "handle=0x{:x} ", a.handle);
  if (f & GS_F_DEVICE) fmt::format_to(it, "device={} ", a.device);
  if (f & GS_F_CTX) fmt::format_to(it, "ctx=0x{:x} ", a.ctx);
  if (f & GS_F_CAPTURED) fmt::format_to(it, "captured ");
  if (out.size() > 0 && out.data()[out.size() - 1] == ' ') out.resize(out.size() - 1);
  out.push_back('\n');
}

}  // namespace gpuscope

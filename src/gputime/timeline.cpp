#include "gputime/timeline.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>
#include <variant>

#include "core/cuda_api.h"
#include "core/output.h"

namespace gpuscope {

namespace {

// GPU tracks and the device counters live on synthetic thread and process ids, far above
// any real one (pid_max is at most 2^22).
constexpr uint64_t kGpuTidBase = 1ull << 30;
constexpr uint64_t kFramesTidBase = 1ull << 29;  // a process's frames, a track per API

uint64_t frames_tid(const char* api) { return kFramesTidBase + (api[0] == 'v' ? 0 : api[0] == 'e' ? 1 : 2); }
constexpr uint32_t kCountersPid = (1u << 31) - 1;
// A source's marks of no process: a process per source below the counters', a track per name.
constexpr uint32_t kUnownedPidTop = (1u << 31) - 2;

struct UnownedTracks {
  uint32_t pid = 0;
  std::map<std::string, uint64_t> tids;  // track name -> its tid, from 1
};
// For each of in.sources, in order, those with marks of no process taking pids down from kUnownedPidTop.
std::vector<UnownedTracks> unowned_tracks(const TimelineInput& in) {
  std::vector<UnownedTracks> out(in.sources.size());
  uint32_t pid = kUnownedPidTop;
  for (size_t i = 0; i < in.sources.size(); i++) {
    for (auto& m : in.sources[i].marks)
      if (!m.pid) out[i].tids.emplace(m.track, 0);
    if (out[i].tids.empty()) continue;
    out[i].pid = pid--;
    uint64_t tid = 1;
    for (auto& [_, t] : out[i].tids) t = tid++;
  }
  return out;
}

uint64_t gpu_tid(const gs_gt_record& r) { return kGpuTidBase + (uint64_t)r.device * (1u << 20) + (r.stream & 0xfffff); }

class TraceWriter {
 public:
  TraceWriter(std::string& out, uint64_t origin_ns) : out_(out), origin_(origin_ns) {}
  JsonLine event() {
    flush();
    if (!first_) buf_.push_back(',');
    first_ = false;
    return JsonLine(buf_);
  }
  double us(uint64_t ts_ns) const { return ts_ns >= origin_ ? (ts_ns - origin_) / 1e3 : -((origin_ - ts_ns) / 1e3); }
  void flush() {
    if (buf_.size() < (1u << 20)) return;
    out_.append(buf_.data(), buf_.size());
    buf_.clear();
  }
  void finish() {
    out_.append(buf_.data(), buf_.size());
    buf_.clear();
  }
  fmt::memory_buffer& raw() { return buf_; }

 private:
  std::string& out_;
  fmt::memory_buffer buf_;
  uint64_t origin_;
  bool first_ = true;
};

struct Slice {
  uint64_t start_ns, end_ns;
};
// Each thread's traced calls, by start.
using ThreadSlices = std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>>;

uint64_t origin_of(const TimelineInput& in) {
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  for (auto& c : in.calls) origin = std::min<uint64_t>(origin, c.start_ns);
  for (auto& g : in.gpu) origin = std::min<uint64_t>(origin, g.r.start_ns);
  for (auto& c : in.counters) origin = std::min<uint64_t>(origin, c.ts_boot_ns);
  for (auto& g : in.graphics) origin = std::min<uint64_t>(origin, g.start_ns);
  for (auto& src : in.sources) {
    for (auto& s : src.spans) origin = std::min<uint64_t>(origin, s.start_ns);
    for (auto& m : src.marks) origin = std::min<uint64_t>(origin, m.ts_ns);
  }
  return origin == std::numeric_limits<uint64_t>::max() ? 0 : origin;
}

// A metadata event ("M"), its args open: a process's or a track's name, or a track's place.
JsonLine meta(TraceWriter& w, const char* what, uint32_t pid, const uint64_t* tid = nullptr) {
  JsonLine j = w.event();
  j.str("ph", "M").str("name", what).num("pid", pid);
  if (tid) j.num("tid", *tid);
  j.begin_object("args");
  return j;
}

// Names of processes and tracks; GPU tracks (one per device and stream) after the threads.
void write_names(TraceWriter& w, const TimelineInput& in) {
  std::set<uint32_t> pids;
  for (auto& c : in.calls) pids.insert(c.pid);
  for (auto& g : in.graphics) pids.insert(g.pid);
  for (auto& src : in.sources) {
    for (auto& s : src.spans) pids.insert(s.pid);
    for (auto& m : src.marks)
      if (m.pid) pids.insert(*m.pid);
  }
  std::set<std::pair<uint32_t, const char*>> frame_tracks;
  for (auto& f : in.frames) frame_tracks.insert({f.pid, f.api});
  std::set<std::tuple<uint32_t, uint64_t, uint32_t, uint32_t>> gpu_tracks;  // pid, tid, device, stream
  for (auto& g : in.gpu) {
    pids.insert(g.pid);
    if (g.r.kind != GS_GT_API) gpu_tracks.insert({g.pid, gpu_tid(g.r), g.r.device, g.r.stream});
  }
  for (uint32_t pid : pids) {
    auto it = in.comms.find(pid);
    std::string name = (it != in.comms.end() ? it->second : std::string("pid")) + " " + std::to_string(pid);
    meta(w, "process_name", pid).str("name", name).end_object().end();
  }
  for (auto& [pt, name] : in.threads) {
    uint64_t tid = pt.second;
    meta(w, "thread_name", pt.first, &tid).str("name", name + " " + std::to_string(tid)).end_object().end();
  }
  for (auto& [pid, api] : frame_tracks) {
    uint64_t tid = frames_tid(api);
    meta(w, "thread_name", pid, &tid).str("name", fmt::format("frames ({})", api)).end_object().end();
    meta(w, "thread_sort_index", pid, &tid).num("sort_index", -1).end_object().end();
  }
  for (auto& [pid, tid, dev, stream] : gpu_tracks) {
    meta(w, "thread_name", pid, &tid).str("name", fmt::format("GPU {} stream {}", dev, stream)).end_object().end();
    meta(w, "thread_sort_index", pid, &tid).num("sort_index", 1000000 + tid - kGpuTidBase).end_object().end();
  }
  const auto unowned = unowned_tracks(in);
  for (size_t i = 0; i < unowned.size(); i++) {
    if (unowned[i].tids.empty()) continue;
    meta(w, "process_name", unowned[i].pid).str("name", in.sources[i].info.unowned_process).end_object().end();
    for (auto& [name, tid] : unowned[i].tids)
      meta(w, "thread_name", unowned[i].pid, &tid).str("name", name).end_object().end();
  }
}

// CPU side: each call a complete slice on its thread.
ThreadSlices write_calls(TraceWriter& w, const TimelineInput& in, TimelineStats& st) {
  ThreadSlices by_thread;
  for (auto& c : in.calls) {
    uint64_t start = c.start_ns;
    JsonLine j = w.event();
    j.str("ph", "X")
        .str("cat", "cuda_api")
        .str("name", api_symbol(c.api))
        .num("pid", c.pid)
        .num("tid", c.tid)
        .real("ts", w.us(start), 3)
        .real("dur", c.dur_ns / 1e3, 3)
        .begin_object("args")
        .str("layer", layer_name(c.layer))
        .num("ret", c.ret);
    if (c.copy) j.str("direction", c.copy).num("bytes", c.copy_bytes);
    j.end_object().end();
    by_thread[{c.pid, c.tid}].push_back({start, start + c.dur_ns});
    st.cpu_spans++;
  }
  for (auto& [_, v] : by_thread)
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  return by_thread;
}

// Graphics calls on their threads (presents and swaps marked), frames on their process's track.
void write_graphics(TraceWriter& w, const TimelineInput& in, TimelineStats& st) {
  for (auto& g : in.graphics) {
    for (const char* ph : {"X", "i"}) {
      if (*ph == 'i' && !g.frame_end) continue;
      JsonLine j = w.event();
      j.str("ph", ph).str("cat", "graphics").str("name", g.name).num("pid", g.pid).num("tid", g.tid);
      j.real("ts", w.us(g.start_ns), 3);
      if (*ph == 'X')
        j.real("dur", g.dur_ns / 1e3, 3);
      else
        j.str("s", "p");
      j.end();
    }
    st.graphics_spans++;
  }
  for (auto& f : in.frames) {
    w.event()
        .str("ph", "X")
        .str("cat", "frame")
        .str("name", fmt::format("frame {}", f.number))
        .num("pid", f.pid)
        .num("tid", frames_tid(f.api))
        .real("ts", w.us(f.start_ns), 3)
        .real("dur", f.dur_ns / 1e3, 3)
        .begin_object("args")
        .str("api", f.api)
        .num("submits", f.submits)
        .num("waits", f.waits)
        .num("wait_ns", f.wait_ns)
        .num("cuda_launches", f.cuda_launches)
        .end_object()
        .end();
    st.frame_spans++;
  }
}

void write_args(JsonLine& j, const TimelineArgs& args) {
  j.begin_object("args");
  for (auto& [k, v] : args)
    std::visit(
        [&, &k = k](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::nullptr_t>)
            j.null(k);
          else if constexpr (std::is_same_v<T, bool>)
            j.boolean(k, x);
          else if constexpr (std::is_same_v<T, std::string>)
            j.str(k, x);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            j.begin_array(k);
            for (auto& s : x) j.str(s);
            j.end_array();
          } else
            j.num(k, x);
        },
        v);
  j.end_object();
}

// The sources' spans on their threads, then their marks: on a thread, a process, or a track of
// the source's own process.
void write_sources(TraceWriter& w, const TimelineInput& in, TimelineStats& st) {
  const auto unowned = unowned_tracks(in);
  for (size_t i = 0; i < in.sources.size(); i++) {
    auto& src = in.sources[i];
    for (auto& s : src.spans) {
      JsonLine j = w.event();
      j.str("ph", "X").str("cat", s.category).str("name", s.name).num("pid", s.pid).num("tid", s.tid);
      j.real("ts", w.us(s.start_ns), 3).real("dur", s.dur_ns / 1e3, 3);
      write_args(j, s.args);
      j.end();
    }
    for (auto& m : src.marks) {
      JsonLine j = w.event();
      j.str("ph", "i").str("cat", m.category).str("name", m.name);
      if (m.pid && m.tid)
        j.num("pid", *m.pid).num("tid", *m.tid).str("s", "t");
      else if (m.pid)
        j.num("pid", *m.pid).num("tid", *m.pid).str("s", "p");
      else
        j.num("pid", unowned[i].pid).num("tid", unowned[i].tids.at(m.track)).str("s", "t");
      j.real("ts", w.us(m.ts_ns), 3);
      write_args(j, m.args);
      j.end();
    }
    st.source_items.push_back(src.spans.size() + src.marks.size());
  }
}

std::string span_name(const TimelineInput& in, const GpuRecord& g) {
  const auto& r = g.r;
  if (r.kind == GS_GT_MEMCPY) return std::string("memcpy ") + gpu_copy_kind_name(r.sub_kind);
  if (r.kind != GS_GT_KERNEL) return gpu_kind_name(r.kind);
  std::string name = in.kernel_name ? in.kernel_name(g.pid, r.name_id) : "";
  return name.empty() ? "[kernel " + std::to_string(r.name_id) + "]" : name;
}

void write_gpu_span(TraceWriter& w, const TimelineInput& in, const GpuRecord& g) {
  const auto& r = g.r;
  uint64_t dur = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
  auto j = w.event();
  j.str("ph", "X")
      .str("cat", std::string("gpu_") + gpu_kind_name(r.kind))
      .str("name", span_name(in, g))
      .num("pid", g.pid)
      .num("tid", gpu_tid(r))
      .real("ts", w.us(r.start_ns), 3)
      .real("dur", dur / 1e3, 3)
      .begin_object("args")
      .num("device", r.device)
      .num("context", r.context)
      .num("stream", r.stream)
      .num("correlation", r.correlation);
  if (r.kind == GS_GT_KERNEL) j.triple("grid", r.grid).triple("block", r.block);
  if (r.kind == GS_GT_MEMCPY || r.kind == GS_GT_MEMSET) j.num("bytes", r.bytes);
  j.end_object().end();
}

// Where the arrow from launch `a` starts: the middle of the traced call around it, if any.
std::optional<uint64_t> traced_launch(const ThreadSlices& by_thread, uint32_t pid, const gs_gt_record& a) {
  auto t = by_thread.find({pid, a.tid});
  if (t == by_thread.end()) return std::nullopt;
  auto& v = t->second;
  auto it = std::upper_bound(v.begin(), v.end(), a.end_ns, [](uint64_t x, const Slice& s) { return x < s.start_ns; });
  while (it != v.begin()) {
    --it;
    if (it->end_ns >= a.start_ns) return it->start_ns + (it->end_ns - it->start_ns) / 2;
    if (a.start_ns - it->end_ns > 1000000000ull) break;
  }
  return std::nullopt;
}

// The arrow from launch `a` to what it launched, from inside the CPU slice that made it.
void write_flow(TraceWriter& w, const ThreadSlices& by_thread, const GpuRecord& g, const gs_gt_record& a) {
  std::optional<uint64_t> from_ts = traced_launch(by_thread, g.pid, a);
  if (!from_ts) {
    // No traced call around it: the library's own record of the launch carries the arrow.
    from_ts = a.start_ns + (a.end_ns - a.start_ns) / 2;
    w.event()
        .str("ph", "X")
        .str("cat", "cupti_api")
        .str("name", a.sub_kind == 1 ? "launch (runtime)" : "launch (driver)")
        .num("pid", g.pid)
        .num("tid", a.tid)
        .real("ts", w.us(a.start_ns), 3)
        .real("dur", (a.end_ns - a.start_ns) / 1e3, 3)
        .begin_object("args")
        .num("cbid", a.name_id)
        .num("correlation", a.correlation)
        .end_object()
        .end();
  }
  uint64_t id = ((uint64_t)g.pid << 32) | g.r.correlation;
  w.event()
      .str("ph", "s")
      .str("cat", "launch")
      .str("name", "launch")
      .num("id", id)
      .num("pid", g.pid)
      .num("tid", a.tid)
      .real("ts", w.us(*from_ts), 3)
      .end();
  w.event()
      .str("ph", "f")
      .str("bp", "e")
      .str("cat", "launch")
      .str("name", "launch")
      .num("id", id)
      .num("pid", g.pid)
      .num("tid", gpu_tid(g.r))
      .real("ts", w.us(g.r.start_ns), 3)
      .end();
}

// GPU side: kernels, copies and memsets on their streams' tracks, each with its launch's arrow.
void write_gpu(TraceWriter& w, const TimelineInput& in, const ThreadSlices& by_thread, TimelineStats& st) {
  // Launch calls as the library saw them, by (pid, correlation id).
  std::map<std::pair<uint32_t, uint32_t>, const GpuRecord*> launches;
  for (auto& g : in.gpu)
    if (g.r.kind == GS_GT_API) launches[{g.pid, g.r.correlation}] = &g;
  for (auto& g : in.gpu) {
    if (g.r.kind == GS_GT_API) continue;
    write_gpu_span(w, in, g);
    st.gpu_spans++;
    auto l = launches.find({g.pid, g.r.correlation});
    if (l == launches.end() || g.r.correlation == 0) continue;
    write_flow(w, by_thread, g, l->second->r);
    st.flows++;
  }
}

void counter(TraceWriter& w, const CounterSample& c, const std::string& name, const char* key, double v, int decimals) {
  w.event()
      .str("ph", "C")
      .str("name", name)
      .num("pid", kCountersPid)
      .real("ts", w.us(c.ts_boot_ns), 3)
      .begin_object("args")
      .real(key, v, decimals)
      .end_object()
      .end();
}

void write_counters(TraceWriter& w, const std::vector<CounterSample>& counters, TimelineStats& st) {
  if (!counters.empty())
    meta(w, "process_name", kCountersPid).str("name", "GPU devices (gpuscope bridge)").end_object().end();
  for (auto& c : counters) {
    counter(w, c, fmt::format("GPU {} utilization %", c.device), "sm_util_pct", c.sm_util_pct, 0);
    counter(w, c, fmt::format("GPU {} memory used MiB", c.device), "mem_used_mib", c.mem_used_bytes / 1048576.0, 1);
    st.counters += 2;
  }
}

void write_metadata(std::string& out, const TimelineInput& in, const TimelineStats& st, uint64_t origin) {
  fmt::memory_buffer meta;
  JsonLine m(meta);
  m.str("tool", "gpuscope timeline").str("clock", "CLOCK_BOOTTIME").num("origin_boot_ns", origin);
  m.str("gpu_spans", in.gpu_note.empty() ? "present" : in.gpu_note);
  m.str("counters", in.counter_note.empty() ? "present" : in.counter_note);
  m.num("cpu_span_count", st.cpu_spans).num("gpu_span_count", st.gpu_spans).num("flow_count", st.flows);
  m.num("counter_count", st.counters).num("graphics_span_count", st.graphics_spans);
  m.num("frame_count", st.frame_spans);
  for (size_t i = 0; i < in.sources.size(); i++) m.num(in.sources[i].info.count_key, st.source_items[i]);
  m.begin_object("lost");
  for (auto& [k, v] : in.lost) m.num(k, v);
  m.end_object().end();
  out += "],\n\"metadata\":";
  out.append(meta.data(), meta.size());
  out += "}\n";
}

}  // namespace

TimelineStats write_timeline(const TimelineInput& in, std::string& out) {
  TimelineStats st;
  const uint64_t origin = origin_of(in);
  out.clear();
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  TraceWriter w(out, origin);
  write_names(w, in);
  ThreadSlices by_thread = write_calls(w, in, st);
  write_gpu(w, in, by_thread, st);
  write_graphics(w, in, st);
  write_sources(w, in, st);
  write_counters(w, in.counters, st);
  w.finish();
  write_metadata(out, in, st, origin);
  return st;
}

}  // namespace gpuscope

#include "gputime/timeline.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

#include "core/cuda_api.h"
#include "core/output.h"

namespace gpuscope {

namespace {

// GPU tracks and the device counters live on synthetic thread and process ids, far above
// any real one (pid_max is at most 2^22).
constexpr uint64_t kGpuTidBase = 1ull << 30;
constexpr uint32_t kCountersPid = (1u << 31) - 1;

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

}  // namespace

TimelineStats write_timeline(const TimelineInput& in, std::string& out) {
  TimelineStats st;
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  for (auto& c : in.calls) origin = std::min<uint64_t>(origin, c.start_ns);
  for (auto& g : in.gpu) origin = std::min<uint64_t>(origin, g.r.start_ns);
  for (auto& c : in.counters) origin = std::min<uint64_t>(origin, c.ts_boot_ns);
  if (origin == std::numeric_limits<uint64_t>::max()) origin = 0;

  out.clear();
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  TraceWriter w(out, origin);

  // Names of processes and tracks.
  std::set<uint32_t> pids;
  const auto& thread_names = in.threads;
  for (auto& c : in.calls) pids.insert(c.pid);
  std::set<std::tuple<uint32_t, uint64_t, uint32_t, uint32_t>> gpu_tracks;  // pid, tid, device, stream
  for (auto& g : in.gpu) {
    pids.insert(g.pid);
    if (g.r.kind != GS_GT_API) gpu_tracks.insert({g.pid, gpu_tid(g.r), g.r.device, g.r.stream});
  }
  for (uint32_t pid : pids) {
    auto it = in.comms.find(pid);
    std::string name = (it != in.comms.end() ? it->second : std::string("pid")) + " " + std::to_string(pid);
    w.event()
        .str("ph", "M")
        .str("name", "process_name")
        .num("pid", pid)
        .begin_object("args")
        .str("name", name)
        .end_object()
        .end();
  }
  for (auto& [pt, name] : thread_names)
    w.event()
        .str("ph", "M")
        .str("name", "thread_name")
        .num("pid", pt.first)
        .num("tid", pt.second)
        .begin_object("args")
        .str("name", name + " " + std::to_string(pt.second))
        .end_object()
        .end();
  for (auto& [pid, tid, dev, stream] : gpu_tracks) {
    w.event()
        .str("ph", "M")
        .str("name", "thread_name")
        .num("pid", pid)
        .num("tid", tid)
        .begin_object("args")
        .str("name", fmt::format("GPU {} stream {}", dev, stream))
        .end_object()
        .end();
    // GPU tracks after the threads.
    w.event()
        .str("ph", "M")
        .str("name", "thread_sort_index")
        .num("pid", pid)
        .num("tid", tid)
        .begin_object("args")
        .num("sort_index", 1000000 + tid - kGpuTidBase)
        .end_object()
        .end();
  }

  // CPU side: each call a complete slice on its thread.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> by_thread;
  for (auto& c : in.calls) {
    uint64_t start = c.start_ns;
    w.event()
        .str("ph", "X")
        .str("cat", "cuda_api")
        .str("name", api_symbol(c.api))
        .num("pid", c.pid)
        .num("tid", c.tid)
        .real("ts", w.us(start), 3)
        .real("dur", c.dur_ns / 1e3, 3)
        .begin_object("args")
        .str("layer", layer_name(c.layer))
        .num("ret", c.ret)
        .end_object()
        .end();
    by_thread[{c.pid, c.tid}].push_back({start, start + c.dur_ns});
    st.cpu_spans++;
  }
  for (auto& [_, v] : by_thread)
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });

  // Launch calls as the library saw them, by (pid, correlation id).
  std::map<std::pair<uint32_t, uint32_t>, const GpuRecord*> launches;
  for (auto& g : in.gpu)
    if (g.r.kind == GS_GT_API) launches[{g.pid, g.r.correlation}] = &g;

  for (auto& g : in.gpu) {
    const auto& r = g.r;
    if (r.kind == GS_GT_API) continue;
    uint64_t tid = gpu_tid(r);
    uint64_t dur = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
    std::string name;
    if (r.kind == GS_GT_KERNEL) {
      name = in.kernel_name ? in.kernel_name(g.pid, r.name_id) : "";
      if (name.empty()) name = "[kernel " + std::to_string(r.name_id) + "]";
    } else if (r.kind == GS_GT_MEMCPY) {
      name = std::string("memcpy ") + gpu_copy_kind_name(r.sub_kind);
    } else {
      name = gpu_kind_name(r.kind);
    }
    auto j = w.event();
    j.str("ph", "X")
        .str("cat", std::string("gpu_") + gpu_kind_name(r.kind))
        .str("name", name)
        .num("pid", g.pid)
        .num("tid", tid)
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
    st.gpu_spans++;

    // The arrow from the launch to what it launched, from inside the CPU slice that made it.
    auto l = launches.find({g.pid, r.correlation});
    if (l == launches.end() || r.correlation == 0) continue;
    const gs_gt_record& a = l->second->r;
    uint64_t from_ts = a.start_ns + (a.end_ns - a.start_ns) / 2;
    bool bound = false;
    auto t = by_thread.find({g.pid, a.tid});
    if (t != by_thread.end()) {
      auto& v = t->second;
      auto it =
          std::upper_bound(v.begin(), v.end(), a.end_ns, [](uint64_t x, const Slice& s) { return x < s.start_ns; });
      while (it != v.begin()) {
        --it;
        if (it->end_ns >= a.start_ns) {
          from_ts = it->start_ns + (it->end_ns - it->start_ns) / 2;
          bound = true;
          break;
        }
        if (a.start_ns - it->end_ns > 1000000000ull) break;
      }
    }
    if (!bound) {
      // No traced call around it: the library's own record of the launch carries the arrow.
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
    uint64_t id = ((uint64_t)g.pid << 32) | r.correlation;
    w.event()
        .str("ph", "s")
        .str("cat", "launch")
        .str("name", "launch")
        .num("id", id)
        .num("pid", g.pid)
        .num("tid", a.tid)
        .real("ts", w.us(from_ts), 3)
        .end();
    w.event()
        .str("ph", "f")
        .str("bp", "e")
        .str("cat", "launch")
        .str("name", "launch")
        .num("id", id)
        .num("pid", g.pid)
        .num("tid", tid)
        .real("ts", w.us(r.start_ns), 3)
        .end();
    st.flows++;
  }

  if (!in.counters.empty())
    w.event()
        .str("ph", "M")
        .str("name", "process_name")
        .num("pid", kCountersPid)
        .begin_object("args")
        .str("name", "GPU devices (gpuscope bridge)")
        .end_object()
        .end();
  for (auto& c : in.counters) {
    w.event()
        .str("ph", "C")
        .str("name", fmt::format("GPU {} utilization %", c.device))
        .num("pid", kCountersPid)
        .real("ts", w.us(c.ts_boot_ns), 3)
        .begin_object("args")
        .num("sm_util_pct", c.sm_util_pct)
        .end_object()
        .end();
    w.event()
        .str("ph", "C")
        .str("name", fmt::format("GPU {} memory used MiB", c.device))
        .num("pid", kCountersPid)
        .real("ts", w.us(c.ts_boot_ns), 3)
        .begin_object("args")
        .real("mem_used_mib", c.mem_used_bytes / 1048576.0, 1)
        .end_object()
        .end();
    st.counters += 2;
  }
  w.finish();

  fmt::memory_buffer meta;
  JsonLine m(meta);
  m.str("tool", "gpuscope timeline").str("clock", "CLOCK_BOOTTIME").num("origin_boot_ns", origin);
  m.str("gpu_spans", in.gpu_note.empty() ? "present" : in.gpu_note);
  m.str("counters", in.counter_note.empty() ? "present" : in.counter_note);
  m.num("cpu_span_count", st.cpu_spans).num("gpu_span_count", st.gpu_spans).num("flow_count", st.flows);
  m.num("counter_count", st.counters).begin_object("lost");
  for (auto& [k, v] : in.lost) m.num(k, v);
  m.end_object().end();
  out += "],\n\"metadata\":";
  out.append(meta.data(), meta.size());
  out += "}\n";
  return st;
}

}  // namespace gpuscope

// The consumer path: a ring-buffer record -> decoded event -> JSON line, on one core.
// Records are a recorded mix (launch enters, allocation exits, copies); the goal is at
// least 1 million events per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "trace/trace.h"

using namespace gpuscope;

static std::vector<gs_call_event> recorded() {
  std::vector<gs_call_event> v;
  auto base = [](unsigned api, unsigned phase) {
    gs_call_event e{};
    e.ts_boot_ns = 123456789012345ull;
    e.pid = 31337;
    e.tid = 31340;
    e.api = static_cast<uint16_t>(api);
    e.layer = api_desc(api).layer;
    e.phase = static_cast<uint8_t>(phase);
    strcpy(e.comm, "python3");
    strcpy(e.thread, "pt_autograd_0");
    return e;
  };
  auto l = base(GS_API_CU_LAUNCH_KERNEL, GS_PHASE_ENTER);
  l.args.func = 0x7f12a4c0ffee;
  l.args.grid[0] = 1024, l.args.grid[1] = 1, l.args.grid[2] = 1;
  l.args.block[0] = 256, l.args.block[1] = 1, l.args.block[2] = 1;
  l.args.stream = 0x5e0000000100;
  auto lx = base(GS_API_CU_LAUNCH_KERNEL, GS_PHASE_EXIT);
  lx.dur_ns = 1830;
  auto m = base(GS_API_CUDA_MALLOC, GS_PHASE_EXIT);
  m.fields = GS_F_OUT;
  m.args.ptr = 0x7e0000200000;
  m.dur_ns = 65000;
  auto c = base(GS_API_CUDA_MEMCPY_ASYNC, GS_PHASE_ENTER);
  c.args.size_bytes = 1 << 20, c.args.dst = 0x7e0000200000, c.args.src = 0x55aa00001000, c.args.kind = 1;
  for (int i = 0; i < 64; i++) v.insert(v.end(), {l, lx, l, lx, m, c});
  return v;
}

static void BM_RecordToJsonLine(benchmark::State& state) {
  auto recs = recorded();
  CgroupNames cgroups;
  FormatContext ctx;
  ctx.realtime_offset_ns = 1700000000000000000;
  ctx.cgroups = &cgroups;
  fmt::memory_buffer out;
  size_t i = 0;
  for (auto _ : state) {
    gs_call_event e;
    memcpy(&e, &recs[i++ % recs.size()], sizeof e);
    normalize_event(e);
    format_event_json(e, ctx, out);
    if (out.size() > (1 << 20)) out.clear();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordToJsonLine);

static void BM_RecordToTableLine(benchmark::State& state) {
  auto recs = recorded();
  FormatContext ctx;
  fmt::memory_buffer out;
  size_t i = 0;
  for (auto _ : state) {
    gs_call_event e;
    memcpy(&e, &recs[i++ % recs.size()], sizeof e);
    normalize_event(e);
    format_event_table(e, ctx, out);
    if (out.size() > (1 << 20)) out.clear();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordToTableLine);

BENCHMARK_MAIN();

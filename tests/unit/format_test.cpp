// Record -> line decoding, without BPF: every field of a launch, an allocation exit and a
// memcpy, and the --api/--layer selection rules.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "trace/trace.h"

using namespace gpuscope;
using nlohmann::json;

static gs_call_event make(unsigned api, unsigned phase) {
  gs_call_event e{};
  e.ts_boot_ns = 5'000'000'000ull;
  e.pid = 42;
  e.tid = 43;
  e.api = static_cast<uint16_t>(api);
  e.layer = api_desc(api).layer;
  e.phase = static_cast<uint8_t>(phase);
  strcpy(e.comm, "python3");
  strcpy(e.thread, "pt_main\"thread");
  return e;
}

static json to_json(const gs_call_event& e) {
  FormatContext ctx;
  ctx.realtime_offset_ns = 1'700'000'000'000'000'000;
  fmt::memory_buffer b;
  format_event_json(e, ctx, b);
  EXPECT_EQ(b.data()[b.size() - 1], '\n');
  return json::parse(std::string(b.data(), b.size()));
}

TEST(Format, LaunchEnter) {
  auto e = make(GS_API_CU_LAUNCH_KERNEL, GS_PHASE_ENTER);
  e.fields = GS_F_FUNC | GS_F_LAUNCH | GS_F_STREAM | GS_F_CLUSTER | GS_F_CAPTURED;
  e.args.func = 0xabc;
  unsigned g[3] = {11, 22, 33}, b[3] = {4, 5, 6}, c[3] = {2, 1, 1};
  memcpy(e.args.grid, g, sizeof g);
  memcpy(e.args.block, b, sizeof b);
  memcpy(e.args.cluster, c, sizeof c);
  e.args.shared_mem_bytes = 256;
  e.args.stream = 0x7000;
  auto j = to_json(e);
  EXPECT_EQ(j["ts_ns"], 1'700'000'005'000'000'000);
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["tid"], 43);
  EXPECT_EQ(j["comm"], "python3");
  EXPECT_EQ(j["thread"], "pt_main\"thread");
  EXPECT_EQ(j["layer"], "driver");
  EXPECT_EQ(j["api"], "cuLaunchKernel");
  EXPECT_EQ(j["phase"], "enter");
  EXPECT_EQ(j["func"], "0xabc");
  EXPECT_EQ(j["grid"], json::array({11, 22, 33}));
  EXPECT_EQ(j["block"], json::array({4, 5, 6}));
  EXPECT_EQ(j["cluster"], json::array({2, 1, 1}));
  EXPECT_EQ(j["shared_mem"], 256);
  EXPECT_EQ(j["stream"], "0x7000");
  EXPECT_EQ(j["captured"], true);
  EXPECT_FALSE(j.contains("ret"));
  EXPECT_FALSE(j.contains("size"));
}

TEST(Format, AllocExitAndErrors) {
  auto e = make(GS_API_CUDA_MALLOC, GS_PHASE_EXIT);
  e.fields = GS_F_PTR;
  e.args.ptr = 0x7e0000000200;
  e.ret = 0;
  e.dur_ns = 1234;
  auto j = to_json(e);
  EXPECT_EQ(j["ret"], 0);
  EXPECT_EQ(j["ret_name"], "cudaSuccess");
  EXPECT_EQ(j["dur_ns"], 1234);
  EXPECT_EQ(j["ptr"], "0x7e0000000200");
  e.ret = 35;
  EXPECT_EQ(to_json(e)["ret_name"], "cudaErrorInsufficientDriver");
  auto d = make(GS_API_CU_MEM_ALLOC, GS_PHASE_EXIT);
  d.ret = 2;
  EXPECT_EQ(to_json(d)["ret_name"], "CUDA_ERROR_OUT_OF_MEMORY");
}

TEST(Format, MemcpyKindsAndTable) {
  auto e = make(GS_API_CUDA_MEMCPY_ASYNC, GS_PHASE_ENTER);
  e.fields = GS_F_SIZE | GS_F_DST | GS_F_SRC | GS_F_KIND | GS_F_STREAM;
  e.args.size_bytes = 4096;
  e.args.dst = 0x10;
  e.args.src = 0x20;
  e.args.kind = 2;
  auto j = to_json(e);
  EXPECT_EQ(j["kind"], "cudaMemcpyDeviceToHost");
  EXPECT_EQ(j["size"], 4096);
  EXPECT_EQ(j["dst"], "0x10");
  EXPECT_EQ(j["src"], "0x20");
  FormatContext ctx;
  ctx.timestamps = false;
  fmt::memory_buffer b;
  format_event_table(e, ctx, b);
  std::string line(b.data(), b.size());
  EXPECT_NE(line.find("cudaMemcpyAsync"), std::string::npos);
  EXPECT_NE(line.find("size=4096 dst=0x10 src=0x20 kind=cudaMemcpyDeviceToHost"), std::string::npos) << line;
}

TEST(ApiSelection, VariantsLayersAndUnknowns) {
  auto s = select_apis({"cudaMemcpyAsync_ptsz", "cuMemAlloc_v2"}, "all");
  EXPECT_TRUE(s[GS_API_CUDA_MEMCPY_ASYNC]);
  EXPECT_TRUE(s[GS_API_CU_MEM_ALLOC]);
  EXPECT_FALSE(s[GS_API_CUDA_MALLOC]);
  auto r = select_apis({}, "runtime");
  for (unsigned i = 0; i < GS_API_COUNT; i++)
    EXPECT_EQ(r[i], api_desc(i).layer == GS_LAYER_RUNTIME && api_has_role(i, GS_ROLE_CALL)) << api_symbol(i);
  EXPECT_THROW(select_apis({"cudaNope"}, "all"), UsageError);
  EXPECT_THROW(select_apis({}, "gpu"), UsageError);
}

TEST(Normalize, FieldsFromApiRowAndOutValue) {
  auto e = make(GS_API_CUDA_MALLOC_ASYNC, GS_PHASE_ENTER);
  e.fields = GS_F_CAPTURED;  // dynamic bits survive only where BPF may set them
  normalize_event(e);
  EXPECT_EQ(e.fields, GS_F_SIZE | GS_F_STREAM);
  auto l = make(GS_API_CUDA_LAUNCH_KERNEL_EXC, GS_PHASE_ENTER);
  l.fields = GS_F_CLUSTER | GS_F_CAPTURED;
  normalize_event(l);
  EXPECT_EQ(l.fields, GS_F_FUNC | GS_F_LAUNCH | GS_F_STREAM | GS_F_CLUSTER | GS_F_CAPTURED);
  auto x = make(GS_API_CUDA_STREAM_CREATE, GS_PHASE_EXIT);
  x.fields = GS_F_OUT;
  x.args.ptr = 0x5e00;
  normalize_event(x);
  EXPECT_EQ(x.fields, GS_F_STREAM);
  EXPECT_EQ(x.args.stream, 0x5e00u);
  EXPECT_EQ(x.args.ptr, 0u);
  auto g = make(GS_API_CUDA_GET_DEVICE, GS_PHASE_EXIT);
  g.fields = GS_F_OUT;
  g.args.ptr = 0xffffffff00000003ull;  // an int out-parameter: only the low 32 bits are the value
  normalize_event(g);
  EXPECT_EQ(g.fields, GS_F_DEVICE);
  EXPECT_EQ(g.args.device, 3);
  auto f = make(GS_API_CUDA_MALLOC, GS_PHASE_EXIT);
  normalize_event(f);
  EXPECT_EQ(f.fields, 0u) << "a failed call returns nothing";
}

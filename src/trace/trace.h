#pragma once
#include <sys/types.h>

#include <time.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/api.h"
#include "common/events.h"
#include "core/probes.h"
#include "core/system.h"

namespace gpuscope {

struct TraceOptions {
  std::vector<pid_t> pids;
  std::string comm;
  std::vector<std::string> libs;
  std::vector<std::string> apis;
  std::string layer = "all";
  bool hide_exits = false;
  bool no_timestamps = false;
  bool verbose = false;
  bool json = false;
  double duration_s = 0;
  uint32_t ringbuf_kb = 4096;
};

int run_trace(const TraceOptions& opts);

// The API table, by row.
const char* api_symbol(unsigned api);
const gs_api_desc& api_desc(unsigned api);
const char* layer_name(unsigned layer);
// --api names, matching variants (cudaMemcpyAsync_ptsz -> cudaMemcpyAsync); throws UsageError.
std::vector<bool> select_apis(const std::vector<std::string>& names, const std::string& layer);

// Fills in `fields` from the API row and moves an exit's out value to its member.
void normalize_event(gs_call_event& e);

struct FormatContext {
  int64_t realtime_offset_ns = 0;
  bool timestamps = true;
  CgroupNames* cgroups = nullptr;
  time_t tm_secs = -1;
  struct tm tm_cache {};
};
void format_event_json(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out);
void format_event_table(const gs_call_event& e, FormatContext& ctx, fmt::memory_buffer& out);
void format_table_header(const FormatContext& ctx, fmt::memory_buffer& out);
const char* memcpy_kind_name(unsigned kind);

}  // namespace gpuscope

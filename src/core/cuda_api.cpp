#include "core/cuda_api.h"

#include <cstring>

#include "core/system.h"

namespace gpuscope {

const char* const kApiVariantSuffixes[3] = {"", "_ptsz", "_ptds"};

namespace {
#define GS_API_NAME(id, sym, ...) #sym,
const char* const kApiNames[GS_API_COUNT] = {GS_APIS(GS_API_NAME)};
#undef GS_API_NAME
const gs_api_desc kApiDescs[GS_API_COUNT] = GS_API_DESC_TABLE;
}  // namespace

const char* api_symbol(unsigned api) { return api < GS_API_COUNT ? kApiNames[api] : "?"; }
const gs_api_desc& api_desc(unsigned api) { return kApiDescs[api < GS_API_COUNT ? api : 0]; }
const char* layer_name(unsigned layer) { return layer == GS_LAYER_RUNTIME ? "runtime" : "driver"; }

std::vector<bool> apis_with_role(unsigned roles) {
  std::vector<bool> sel(GS_API_COUNT);
  for (unsigned i = 0; i < GS_API_COUNT; i++) sel[i] = (kApiDescs[i].roles & roles) != 0;
  return sel;
}

std::vector<bool> select_apis(const std::vector<std::string>& names, const std::string& layer) {
  if (layer != "all" && layer != "runtime" && layer != "driver")
    throw UsageError("--layer must be runtime, driver or all, not '" + layer + "'");
  std::vector<bool> sel = names.empty() ? apis_with_role(GS_ROLE_CALL) : std::vector<bool>(GS_API_COUNT);
  for (const auto& raw : names) {
    std::string n = raw;
    for (const char* suf : {"_ptsz", "_ptds"}) {
      size_t l = strlen(suf);
      if (n.size() > l && n.compare(n.size() - l, l, suf) == 0) n.resize(n.size() - l);
    }
    bool found = false;
    for (unsigned i = 0; i < GS_API_COUNT; i++)
      if (n == kApiNames[i] && (kApiDescs[i].roles & GS_ROLE_CALL)) sel[i] = found = true;
    if (!found) throw UsageError("--api: unknown or untraced CUDA API '" + raw + "'");
  }
  for (unsigned i = 0; i < GS_API_COUNT; i++) {
    if (layer == "runtime" && kApiDescs[i].layer != GS_LAYER_RUNTIME) sel[i] = false;
    if (layer == "driver" && kApiDescs[i].layer != GS_LAYER_DRIVER) sel[i] = false;
  }
  return sel;
}

}  // namespace gpuscope

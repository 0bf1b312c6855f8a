#pragma once
// The C++ side of the CUDA site table (common/cuda_api.h): names, rows and selections.
#include <string>
#include <vector>

#include "common/cuda_api.h"

namespace gpuscope {

// CUDA's per-thread-default-stream variants of an API's symbol, the plain name first.
extern const char* const kApiVariantSuffixes[3];

const char* api_symbol(unsigned api);
const gs_api_desc& api_desc(unsigned api);
const char* layer_name(unsigned layer);
inline bool api_has_role(unsigned api, unsigned role) { return api < GS_API_COUNT && (api_desc(api).roles & role); }
// The rows with any of `roles`.
std::vector<bool> apis_with_role(unsigned roles);
// --api names (variants accepted: cudaMemcpyAsync_ptsz -> cudaMemcpyAsync) among the rows with
// GS_ROLE_CALL, all of them when `names` is empty, restricted to --layer; throws UsageError.
std::vector<bool> select_apis(const std::vector<std::string>& names, const std::string& layer);

}  // namespace gpuscope

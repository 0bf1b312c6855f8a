// The CUDA site table checked against the toolkit's own headers: every row names a function
// declared there with the row's layer, and every argument position points at a parameter of
// the right kind.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "core/cuda_api.h"
#include "core/system.h"

namespace gpuscope {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const std::string& runtime_headers() {
  static const std::string s =
      slurp(CUDA_INCLUDE_DIR "/cuda_runtime_api.h") + slurp(CUDA_INCLUDE_DIR "/crt/device_functions.h");
  return s;
}
const std::string& driver_header() {
  static const std::string s = slurp(CUDA_INCLUDE_DIR "/cuda.h");
  return s;
}

// The parameters of the first declaration of `name` returning `ret`, or nothing.
std::optional<std::vector<std::string>> params_of(const std::string& text, const std::string& ret,
                                                  const std::string& name) {
  std::regex re(ret + R"(\s+)" + name + R"(\s*\(([^;]*?)\)\s*;)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return std::nullopt;
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : m[1].str()) {
    if (c == '(') depth++;
    if (c == ')') depth--;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  auto trimmed = std::regex_replace(cur, std::regex(R"(^\s+|\s+$)"), "");
  if (!trimmed.empty() && trimmed != "void") out.push_back(cur);
  return out;
}

// The name cuda.h declares for an exported versioned symbol: `#define cuMemAlloc cuMemAlloc_v2`.
std::string declared_name(const std::string& sym) {
  std::regex re(R"(#define\s+(\w+)\s+(?:__CUDA_API_PTS[ZD]\()?)" + sym + R"(\b)");
  std::smatch m;
  if (std::regex_search(driver_header(), m, re)) return m[1].str();
  return sym;
}

struct Decl {
  std::vector<std::string> params;
};

Decl decl_of(unsigned api) {
  const gs_api_desc& d = api_desc(api);
  std::string sym = api_symbol(api);
  std::optional<std::vector<std::string>> p;
  if (d.layer == GS_LAYER_RUNTIME)
    p = params_of(runtime_headers(), R"(cudaError_t\s+CUDARTAPI)", sym);
  else
    p = params_of(driver_header(), R"(CUresult\s+CUDAAPI)", declared_name(sym));
  EXPECT_TRUE(p.has_value()) << sym << " is not declared with the " << layer_name(d.layer) << " layer's return type";
  return {p.value_or(std::vector<std::string>{})};
}

TEST(CudaApiTable, EveryRowIsDeclaredInTheToolkitWithItsLayer) {
  std::set<std::string> seen;
  for (unsigned i = 0; i < GS_API_COUNT; i++) {
    EXPECT_TRUE(seen.insert(api_symbol(i)).second) << api_symbol(i) << " appears twice";
    EXPECT_NE(api_desc(i).roles, 0) << api_symbol(i) << " plays no role";
    decl_of(i);
  }
}

TEST(CudaApiTable, ArgumentPositionsPointAtParametersOfTheRightKind) {
  for (unsigned i = 0; i < GS_API_COUNT; i++) {
    const gs_api_desc& d = api_desc(i);
    auto params = decl_of(i).params;
    SCOPED_TRACE(api_symbol(i));
    auto param = [&](unsigned char pos) -> std::string {
      EXPECT_LE(pos, params.size()) << "argument " << int(pos) - 1 << " of " << params.size();
      return pos && pos <= params.size() ? params[pos - 1] : std::string();
    };
    if (d.outp) {
      EXPECT_NE(param(d.outp).find('*'), std::string::npos) << "out argument must be a pointer";
    }
    if (d.size) {
      EXPECT_NE(param(d.size).find("size_t"), std::string::npos);
    }
    if (d.stream) {
      EXPECT_TRUE(std::regex_search(param(d.stream), std::regex("cudaStream_t|CUstream")));
    }
    if (d.event) {
      EXPECT_TRUE(std::regex_search(param(d.event), std::regex("cudaEvent_t|CUevent")));
    }
    if (d.graph) {
      EXPECT_TRUE(std::regex_search(param(d.graph), std::regex("[Gg]raph")));
    }
    if (d.kind) {
      EXPECT_NE(param(d.kind).find("cudaMemcpyKind"), std::string::npos);
    }
    if (d.device) {
      EXPECT_TRUE(std::regex_search(param(d.device), std::regex(R"(\bint\b|CUdevice\b)")));
    }
    if (d.ctx) {
      EXPECT_TRUE(std::regex_search(param(d.ctx), std::regex(R"(CUcontext\s+\w+$)")));
    }
    if (d.out == GS_OUT_CTX) {
      EXPECT_TRUE(std::regex_search(param(d.outp), std::regex(R"(CUcontext\s*\*)")));
    }
    if (d.roles & GS_ROLE_CONTEXT) {
      EXPECT_NE(d.ctx_op, GS_CTX_NONE) << "a context row says what it does";
      switch (d.ctx_op) {
        case GS_CTX_CREATE:
        case GS_CTX_PRIMARY_RETAIN:
          EXPECT_EQ(d.out, GS_OUT_CTX);
          EXPECT_NE(d.device, 0);
          break;
        case GS_CTX_POP: EXPECT_EQ(d.out, GS_OUT_CTX); break;
        case GS_CTX_DESTROY:
        case GS_CTX_SET_CURRENT:
        case GS_CTX_PUSH: EXPECT_NE(d.ctx, 0); break;
        case GS_CTX_PRIMARY_RELEASE:
        case GS_CTX_PRIMARY_RESET:
        case GS_CTX_RT_SET_DEVICE: EXPECT_NE(d.device, 0); break;
        case GS_CTX_RT_DEVICE_RESET: EXPECT_TRUE(params.empty()); break;
      }
    }
    if (d.handle) {
      EXPECT_NE(param(d.handle).find("CUmemGenericAllocationHandle"), std::string::npos);
    }
    for (unsigned char pos : {d.ptr, d.dst, d.src})
      if (pos) {
        EXPECT_TRUE(std::regex_search(param(pos), std::regex(R"(\*|CUdeviceptr)")));
      }
    if (d.roles & GS_ROLE_MEM) {
      if (d.mem_op == GS_MEM_ALLOC || d.mem_op == GS_MEM_ALLOC_PITCH || d.mem_op == GS_MEM_VMM_CREATE) {
        EXPECT_TRUE(std::regex_search(param(1), std::regex(R"(\*\s*\*|CUdeviceptr\s*\*|Handle\s*\*|\*\s*\w+$)")));
      }
      if (d.mem_op == GS_MEM_ALLOC || d.mem_op == GS_MEM_VMM_CREATE) {
        EXPECT_NE(param(2).find("size_t"), std::string::npos) << "memleak reads the size from the second argument";
      }
      if (d.mem_op == GS_MEM_FREE) {
        EXPECT_TRUE(std::regex_search(param(1), std::regex(R"(\*|CUdeviceptr)")));
      }
    }
    if (d.roles & GS_ROLE_NAMER) {
      EXPECT_NE(param(1).find('*'), std::string::npos) << "namers return the handle";
    }
    if (d.special == GS_SP_CU_LAUNCH) {
      // cuLaunchCooperativeKernel has no `extra`; the stream is the 9th argument of both.
      EXPECT_GE(params.size(), 10u);
      EXPECT_TRUE(std::regex_search(param(9), std::regex("CUstream")));
    }
    if (d.func) {
      EXPECT_EQ(d.special, GS_SP_HOST_FUNC);
      EXPECT_TRUE(std::regex_search(param(d.func), std::regex("cudaHostFn_t|CUhostFn")));
    }
    if (d.special == GS_SP_RT_LAUNCH) {
      EXPECT_EQ(params.size(), 6u);
    }
    for (unsigned char pos : {d.width, d.height})
      if (pos) {
        EXPECT_NE(param(pos).find("size_t"), std::string::npos);
      }
    if (d.roles & GS_ROLE_COPY) {
      static const char* const kParams[] = {"", "", R"(const struct cudaMemcpy3DParms \*)", R"(const CUDA_MEMCPY2D \*)",
                                            R"(const CUDA_MEMCPY3D \*)"};
      switch (d.copy) {
        case GS_COPY_LINEAR: EXPECT_NE(d.size, 0) << "a linear copy's bytes"; break;
        case GS_COPY_2D: EXPECT_TRUE(d.width && d.height) << "a 2D copy's width and height"; break;
        default:
          ASSERT_LT(d.copy, std::size(kParams));
          EXPECT_TRUE(std::regex_search(param(d.params), std::regex(kParams[d.copy]))) << param(d.params);
      }
      // Its direction: fixed by the row, a cudaMemcpyKind argument, or in the parameter struct.
      if (d.copy == GS_COPY_LINEAR || d.copy == GS_COPY_2D) {
        EXPECT_EQ((d.copy_dir != 0) + (d.kind_fixed != 0) + (d.kind != 0), 1);
      }
      if (d.elem_bytes) {
        EXPECT_TRUE(std::regex_search(param(d.size - 1), std::regex(R"(unsigned int)"))) << "cuMemsetD32's element";
      }
    }
  }
}

TEST(CudaApiTable, RolesSelectTheirRows) {
  auto mem = apis_with_role(GS_ROLE_MEM);
  EXPECT_TRUE(mem[GS_API_CUDA_MALLOC_PITCH]);
  EXPECT_FALSE(mem[GS_API_CU_LAUNCH_KERNEL]);
  auto calls = select_apis({}, "all");
  EXPECT_TRUE(calls[GS_API_CUDA_MALLOC]);
  EXPECT_FALSE(calls[GS_API_CUDA_GET_KERNEL]) << "naming rows are not traced calls";
  EXPECT_THROW(select_apis({"__cudaGetKernel"}, "all"), UsageError);
  auto copies = apis_with_role(GS_ROLE_COPY);
  EXPECT_TRUE(copies[GS_API_CUDA_MEMCPY_2D]);
  EXPECT_TRUE(copies[GS_API_CU_MEMSET_D32]);
  EXPECT_FALSE(calls[GS_API_CUDA_MEMCPY_2D]) << "copy rows added for copies are not traced";
  EXPECT_FALSE(copies[GS_API_CUDA_MALLOC]);
  auto launches = apis_with_role(GS_ROLE_LAUNCH);
  for (unsigned i = 0; i < GS_API_COUNT; i++)
    if (launches[i]) {
      EXPECT_NE(api_desc(i).special, GS_SP_NONE) << api_symbol(i) << ": a launch needs its decoding";
    }
}

}  // namespace
}  // namespace gpuscope

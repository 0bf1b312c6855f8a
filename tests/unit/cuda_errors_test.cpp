#include "core/cuda_errors.h"

#include <dlfcn.h>
#include <driver_types.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

// Defined in the generated cuda_errors_check.cpp; values there are computed by the compiler from the real headers.
extern const std::vector<std::pair<long long, const char*>> kRuntimeEnumerators, kDriverEnumerators;

namespace {

using Enumerators = std::vector<std::pair<long long, const char*>>;

std::map<long long, std::set<std::string>> names_by_value(const Enumerators& e) {
  std::map<long long, std::set<std::string>> m;
  for (const auto& [v, n] : e) m[v].insert(n);
  return m;
}

void expect_all_mapped(const Enumerators& e, std::string (*lookup)(int64_t)) {
  const auto by_value = names_by_value(e);
  for (const auto& [v, n] : e) {
    const std::string got = lookup(v);
    EXPECT_TRUE(by_value.at(v).count(got)) << n << " = " << v << " maps to " << got;
  }
}

TEST(CudaErrors, EveryRuntimeEnumeratorMapsToItsName) {
  ASSERT_GE(kRuntimeEnumerators.size(), 50u);
  expect_all_mapped(kRuntimeEnumerators, gpuscope::cuda_runtime_error_name);
}

TEST(CudaErrors, EveryDriverEnumeratorMapsToItsName) {
  ASSERT_GE(kDriverEnumerators.size(), 50u);
  expect_all_mapped(kDriverEnumerators, gpuscope::cuda_driver_error_name);
}

TEST(CudaErrors, CountsMatchDistinctValues) {
  EXPECT_EQ(gpuscope::cuda_runtime_error_count(), names_by_value(kRuntimeEnumerators).size());
  EXPECT_EQ(gpuscope::cuda_driver_error_count(), names_by_value(kDriverEnumerators).size());
}

TEST(CudaErrors, SpotChecks) {
  EXPECT_EQ(gpuscope::cuda_runtime_error_name(35), "cudaErrorInsufficientDriver");
  EXPECT_EQ(gpuscope::cuda_runtime_error_name(0), "cudaSuccess");
  EXPECT_EQ(gpuscope::cuda_runtime_error_name(2), "cudaErrorMemoryAllocation");
  EXPECT_EQ(gpuscope::cuda_driver_error_name(0), "CUDA_SUCCESS");
  EXPECT_EQ(gpuscope::cuda_driver_error_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(gpuscope::cuda_driver_error_name(999), "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(gpuscope::cuda_runtime_error_name(123456), "cudaError(123456)");
  EXPECT_EQ(gpuscope::cuda_driver_error_name(123456), "CUresult(123456)");
  EXPECT_EQ(gpuscope::cuda_runtime_error_name(-1), "cudaError(-1)");
}

// The shipped runtime is the ground truth for what users will see; our table must agree with it.
TEST(CudaErrors, MatchesLibcudartGetErrorName) {
  void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
#ifdef GPUSCOPE_CUDART_FALLBACK
  if (!h) h = dlopen(GPUSCOPE_CUDART_FALLBACK, RTLD_NOW | RTLD_LOCAL);
#endif
  ASSERT_NE(h, nullptr) << "libcudart.so.13 not loadable: " << dlerror();
  using Fn = const char* (*)(cudaError_t);
  auto get_name = reinterpret_cast<Fn>(dlsym(h, "cudaGetErrorName"));
  ASSERT_NE(get_name, nullptr);
  const auto by_value = names_by_value(kRuntimeEnumerators);
  for (const auto& [v, names] : by_value) {
    const char* lib = get_name(static_cast<cudaError_t>(v));
    ASSERT_NE(lib, nullptr) << v;
    // For aliased values the library may pick a different spelling than our "first name wins";
    // that is legitimate as long as it is one of the enumerators with this value.
    EXPECT_TRUE(names.count(lib)) << "value " << v << ": libcudart says " << lib;
    if (names.size() == 1) {
      EXPECT_EQ(gpuscope::cuda_runtime_error_name(v), lib);
    }
  }
  dlclose(h);
}

}  // namespace

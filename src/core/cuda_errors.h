#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

// Implemented by ${CMAKE_BINARY_DIR}/generated/cuda_errors.cpp (tools/gen_cuda_errors.py, cmake/CudaErrors.cmake).
namespace gpuscope {
// Name of a cudaError_t / CUresult value, e.g. 35 -> "cudaErrorInsufficientDriver"; unknown -> "cudaError(123)" /
// "CUresult(123)".
std::string cuda_runtime_error_name(int64_t value);
std::string cuda_driver_error_name(int64_t value);
// The same names without allocating; nullptr for values the headers do not define.
const char* cuda_runtime_error_cstr(int64_t value);
const char* cuda_driver_error_cstr(int64_t value);
size_t cuda_runtime_error_count();  // number of distinct values in the table
size_t cuda_driver_error_count();
}  // namespace gpuscope

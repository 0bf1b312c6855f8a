#pragma once
#include <string>

namespace gpuscope {

// Itanium C++ demangling (abi::__cxa_demangle), plus NVIDIA's mangling of __host__
// __device__ lambda closures (`Unvhdl…`: every PyTorch elementwise kernel), which that
// demangler rejects: such a closure reads as the lambda it wraps, `…::{lambda(float)#1}`,
// the way CUPTI (torch.profiler, nsys) names the kernel. What still does not demangle gets
// an outline, `at::native::vectorized_elementwise_kernel<4, __nv_hdl_wrapper_t<…&at::native::GeluCUDAKernelImpl…>, …>`,
// when it has such wrappers, and comes back unchanged otherwise.
std::string demangle(const std::string& mangled);

}  // namespace gpuscope

#pragma once
#include <string>

namespace gpuscope {

// Itanium C++ demangling (abi::__cxa_demangle). Names that use NVIDIA's extended-lambda
// manglings (`Unvdl`, `Unvhdl`: every PyTorch elementwise kernel), which that demangler
// rejects, get a readable form instead: the qualified name, its simple template arguments,
// and the function each lambda wrapper names, e.g.
// `at::native::vectorized_elementwise_kernel<4, __nv_hdl_wrapper_t<…&at::native::GeluCUDAKernelImpl…>, …>`.
// Anything else that does not demangle comes back unchanged.
std::string demangle(const std::string& mangled);

}  // namespace gpuscope

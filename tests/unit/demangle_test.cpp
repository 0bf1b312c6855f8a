// Names as PyTorch 2.11's libtorch_cuda.so hands them to cuModuleGetFunction on the H200
// (docs/gpu-runs/2026-12-02-round3); __cxa_demangle rejects the NVIDIA lambda wrappers.
#include "core/demangle.h"

#include <gtest/gtest.h>

using gpuscope::demangle;

TEST(Demangle, ItaniumNamesAsTheAbiDemanglerGivesThem) {
  EXPECT_EQ(demangle("_Z12alpha_kernelPf"), "alpha_kernel(float*)");
  EXPECT_EQ(demangle("_Z11beta_kernelIfEvPT_"), "void beta_kernel<float>(float*)");
}

TEST(Demangle, PlainAndBrokenNamesComeBackUnchanged) {
  EXPECT_EQ(demangle("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_execute_kernel"),
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_execute_kernel");
  EXPECT_EQ(demangle("_ZN2at6native"), "_ZN2at6native");
  EXPECT_EQ(demangle("_ZUnv"), "_ZUnv");
}

constexpr const char* kGeluBackward =
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_26GeluBackwardCUDAKernelImplERNS_18TensorIteratorBaseENS0_"
    "8GeluTypeEENKUlvE0_clEvENKUlvE0_clEvEUnvhdl0_1_0_0_PFvS3_S4_ENS0_26GeluBackwardCUDAKernelImplE6_"
    "fffESt5arrayIPcLm3E"
    "EEEviT0_T1_";

// The expected strings are CUPTI's names for the same kernels (torch.profiler on the H200).
TEST(Demangle, HostDeviceLambdaShowsAsTheLambdaItWraps) {
  EXPECT_EQ(demangle(kGeluBackward),
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
            "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, "
            "float)#1}, std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
            "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, "
            "float)#1}, std::array<char*, 3ul>)");
}

TEST(Demangle, WrapperTaggedWithAMemberFunction) {
  EXPECT_EQ(demangle("_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functo"
                     "rIfffEclERNS_14TensorIteratorEEUnvhdl0_1_0_0_MS5_FvS7_ENS5_clE1_fffEEEjfLi4ELi4EEEEEvT1_"),
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
            "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
            "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
            "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
            "unsigned int, float, 4, 4>)");
}

TEST(Demangle, TwoWrappersWithCapturedVariables) {
  std::string d = demangle(
      "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_24mse_backward_cuda_kernelERNS_"
      "14"
      "TensorIteratorERKN3c106ScalarEENKUlvE_clEvENKUlvE0_clEvEUnvhdl0_0_0_1_PFvS4_S8_ENS0_24mse_backward_cuda_"
      "kernelE2_"
      "ffffEfEEvRNS_18TensorIteratorBaseERKT_EUnvhdl0_0_0_3_PFvSF_RKSD_ES2_ISD_E1_"
      "viE16OffsetCalculatorILi4EjLb0EESt5arr"
      "ayIPcLm4EESJ_EEviT1_");
  EXPECT_TRUE(d.starts_with(
      "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::mse_backward_cuda_"
      "kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
      "const::{lambda(float, float, float)#1}>(at::TensorIteratorBase&, at::native::mse_backward_cuda_kernel(at::"
      "TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
      "const::{lambda("
      "float, float, float)#1} const&)::{lambda(int)#1}>(int, "))
      << d;
}

// A wrapper this reader cannot follow still gives the kernel and the function it wraps.
TEST(Demangle, UnreadableWrapperFallsBackToAReadableOutline) {
  std::string cut = std::string(kGeluBackward).substr(0, std::string(kGeluBackward).find("fffESt5")) + "fffQ";
  EXPECT_EQ(
      demangle(cut),
      "at::native::vectorized_elementwise_kernel<4, __nv_hdl_wrapper_t<…&at::native::GeluBackwardCUDAKernelImpl…>, …>");
}

// Found by fuzz_demangle: each once hung, threw or returned nothing.
TEST(Demangle, FuzzFindingsReturnPromptlyWithAName) {
  std::string overflow = "1EUnvhdl0_0_0_3_PFvn" + std::string(40, '9') + "31";
  EXPECT_FALSE(demangle(overflow).empty());
  EXPECT_NO_THROW(demangle("_ZUnvhdl0_0_0_1_vv0_vED"));
  EXPECT_FALSE(demangle("_ZUnvhdl0_0_0_1_vv0_vED").empty());
  EXPECT_EQ(demangle("_Z0Unv"), "_Z0Unv");
}

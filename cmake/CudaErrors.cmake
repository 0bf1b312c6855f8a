# Generates the cudaError_t / CUresult name tables from the installed CUDA headers.
# Defines: target gpuscope_cuda_errors, variable GPUSCOPE_CUDA_ERRORS_CHECK_CPP.
# Paths are relative to this file (not PROJECT_SOURCE_DIR) so it also works when included from a scratch project.
get_filename_component(_gpuscope_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

set(CUDA_INCLUDE_DIR "/usr/local/cuda/include" CACHE PATH "CUDA toolkit include dir (driver_types.h, cuda.h)")
foreach(_hdr driver_types.h cuda.h)
  if(NOT EXISTS "${CUDA_INCLUDE_DIR}/${_hdr}")
    message(FATAL_ERROR "CudaErrors: ${CUDA_INCLUDE_DIR}/${_hdr} not found; set -DCUDA_INCLUDE_DIR=<cuda>/include")
  endif()
endforeach()
find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(_gpuscope_gen_dir "${CMAKE_BINARY_DIR}/generated")
set(_gpuscope_err_cpp "${_gpuscope_gen_dir}/cuda_errors.cpp")
set(GPUSCOPE_CUDA_ERRORS_CHECK_CPP "${_gpuscope_gen_dir}/cuda_errors_check.cpp")
set(_gpuscope_err_script "${_gpuscope_root}/tools/gen_cuda_errors.py")

add_custom_command(
  OUTPUT "${_gpuscope_err_cpp}" "${GPUSCOPE_CUDA_ERRORS_CHECK_CPP}"
  COMMAND "${Python3_EXECUTABLE}" "${_gpuscope_err_script}" "${CUDA_INCLUDE_DIR}"
          "${_gpuscope_err_cpp}" "${GPUSCOPE_CUDA_ERRORS_CHECK_CPP}"
  DEPENDS "${_gpuscope_err_script}" "${CUDA_INCLUDE_DIR}/driver_types.h" "${CUDA_INCLUDE_DIR}/cuda.h"
  COMMENT "Generating CUDA error name tables from ${CUDA_INCLUDE_DIR}"
  VERBATIM)
# One owning target for the rule: consumers in other directories (the test) order on it
# instead of each carrying a copy of the command, which Makefile generators could run concurrently.
add_custom_target(gpuscope_cuda_errors_gen DEPENDS "${_gpuscope_err_cpp}" "${GPUSCOPE_CUDA_ERRORS_CHECK_CPP}")

add_library(gpuscope_cuda_errors STATIC "${_gpuscope_err_cpp}" "${_gpuscope_root}/src/core/cuda_errors.h")
add_dependencies(gpuscope_cuda_errors gpuscope_cuda_errors_gen)
target_include_directories(gpuscope_cuda_errors PUBLIC "${_gpuscope_root}/src")
target_compile_features(gpuscope_cuda_errors PUBLIC cxx_std_20)

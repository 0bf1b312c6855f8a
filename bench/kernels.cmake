# gpuscope kernels counting mode against bare uprobes on the same sites (docs/kernels.md).
# Included from tests/integration/kernels.cmake; the guard makes a second include harmless.
include_guard(GLOBAL)
gpuscope_bpf(kernels_bare ${CMAKE_CURRENT_LIST_DIR}/bare.bpf.c)
add_executable(kernels_overhead ${CMAKE_CURRENT_LIST_DIR}/kernels_overhead.cpp)
add_dependencies(kernels_overhead kernels_bare_skel)
target_link_libraries(kernels_overhead PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_kernels_overhead
  COMMAND kernels_overhead --gpuscope $<TARGET_FILE:gpuscope> --rounds 1
          --workload "$<TARGET_FILE:standin_app> launch_loop 200"
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcudart.so.13
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcuda.so.1)
set_tests_properties(bench_smoke_kernels_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

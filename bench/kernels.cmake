# gpuscope kernels counting mode against bare uprobes on the same sites (docs/kernels.md).
# Included from tests/integration/kernels.cmake; the guard makes a second include harmless.
include_guard(GLOBAL)
add_executable(kernels_overhead ${CMAKE_CURRENT_LIST_DIR}/kernels_overhead.cpp)
add_dependencies(kernels_overhead bare_skel)
target_link_libraries(kernels_overhead PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)
# Both workloads: runtime launches that reach the driver, and driver-only launches.
foreach(workload launch_loop driver_loop)
  add_test(NAME bench_smoke_kernels_overhead_${workload}
    COMMAND kernels_overhead --gpuscope $<TARGET_FILE:gpuscope> --rounds 1
            --workload "$<TARGET_FILE:standin_app> ${workload} 200"
            --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcudart.so.13
            --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcuda.so.1)
  set_tests_properties(bench_smoke_kernels_overhead_${workload} PROPERTIES RUN_SERIAL TRUE TIMEOUT 120
    PASS_REGULAR_EXPRESSION "added cost, kernels / bare uprobes: +-?[0-9.]+x")
endforeach()

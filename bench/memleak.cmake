# gpuscope memleak against bare uprobe+uretprobe pairs on the same sites (docs/memleak.md).
# Included from tests/integration/memleak.cmake; the guard makes a second include harmless.
include_guard(GLOBAL)
add_executable(memleak_overhead ${CMAKE_CURRENT_LIST_DIR}/memleak_overhead.cpp)
add_dependencies(memleak_overhead bare_skel)
target_link_libraries(memleak_overhead PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_memleak_overhead
  COMMAND memleak_overhead --gpuscope $<TARGET_FILE:gpuscope> --rounds 1
          --workload "$<TARGET_FILE:standin_app> malloc_loop 200"
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcudart.so.13
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcuda.so.1)
set_tests_properties(bench_smoke_memleak_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

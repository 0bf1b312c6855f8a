# Cost of starvation's sched_switch hook against an empty one on the same tracepoint
# (docs/starvation.md). Included from tests/integration/starvation.cmake.
include_guard(GLOBAL)
gpuscope_bpf(starvation_empty ${CMAKE_CURRENT_LIST_DIR}/starvation_empty.bpf.c)
add_executable(starvation_overhead ${CMAKE_CURRENT_LIST_DIR}/starvation_overhead.cpp)
add_dependencies(starvation_overhead starvation_empty_skel)
target_link_libraries(starvation_overhead PRIVATE gpuscope_core pthread -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_starvation_overhead
  COMMAND starvation_overhead --gpuscope $<TARGET_FILE:gpuscope> --nvml $<TARGET_FILE:nvml_standin>
          --rounds 1 --seconds 0.5)
set_tests_properties(bench_smoke_starvation_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

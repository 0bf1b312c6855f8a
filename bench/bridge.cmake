# gpuscope bridge figures (docs/bridge.md): CPU at 8 devices x 100 processes, and burst capture.
add_executable(bridge_bench ${CMAKE_CURRENT_LIST_DIR}/bridge_bench.cpp)
target_link_libraries(bridge_bench PRIVATE gpuscope_core)
add_dependencies(bridge_bench gpuscope nvml_standin)
add_test(NAME bench_smoke_bridge
  COMMAND bridge_bench --gpuscope $<TARGET_FILE:gpuscope> --nvml $<TARGET_FILE:nvml_standin>
          --cpu-seconds 1 --bursts 3)
set_tests_properties(bench_smoke_bridge PROPERTIES RUN_SERIAL TRUE TIMEOUT 60)

# Each agent collector's cost on the PyTorch-shaped stand-in loop against bare uprobes
# (docs/agent.md, "What it costs"), and a smoke run of it.
add_executable(collector_cost ${CMAKE_CURRENT_LIST_DIR}/collector_cost.cpp)
add_dependencies(collector_cost bare_skel)
target_link_libraries(collector_cost PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_collector_cost
  COMMAND collector_cost --gpuscope $<TARGET_FILE:gpuscope> --rounds 1
          --floor-ratio 1.034 --workload "chrt -f 10 $<TARGET_FILE:standin_app> torch_steps 300"
          --libcuda ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcuda.so.1
          --libcudart ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcudart.so.13)
set_tests_properties(bench_smoke_collector_cost PROPERTIES RUN_SERIAL TRUE TIMEOUT 180
  PASS_REGULAR_EXPRESSION "agent_default +[0-9]+ +[0-9.]+x")

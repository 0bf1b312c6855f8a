# gpuscope latency against bare uprobe+uretprobe pairs; gpuscope ioctl against an empty
# sys_enter_ioctl program. Figures in docs/latency.md and docs/ioctl.md.
gpuscope_bpf(ioctl_empty ${CMAKE_CURRENT_LIST_DIR}/ioctl_empty.bpf.c)

add_executable(latency_overhead ${CMAKE_CURRENT_LIST_DIR}/latency_overhead.cpp)
add_dependencies(latency_overhead bare_skel)
target_link_libraries(latency_overhead PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)

add_executable(ioctl_overhead ${CMAKE_CURRENT_LIST_DIR}/ioctl_overhead.cpp)
add_dependencies(ioctl_overhead ioctl_empty_skel)
target_link_libraries(ioctl_overhead PRIVATE gpuscope_core -static-libstdc++ -static-libgcc)

add_test(NAME bench_smoke_latency_overhead
  COMMAND latency_overhead --gpuscope $<TARGET_FILE:gpuscope> --rounds 1
          --workload "$<TARGET_FILE:standin_app> launch_loop 200"
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcudart.so.13
          --lib ${CMAKE_BINARY_DIR}/tests/fixtures/standin/lib/libcuda.so.1)
add_test(NAME bench_smoke_ioctl_overhead COMMAND ioctl_overhead --gpuscope $<TARGET_FILE:gpuscope> --rounds 1 --calls 20000)
set_tests_properties(bench_smoke_latency_overhead bench_smoke_ioctl_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

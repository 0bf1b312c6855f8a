gpuscope_bpf(kernels ${CMAKE_CURRENT_LIST_DIR}/kernels.bpf.c)
add_library(gpuscope_kernels STATIC ${CMAKE_CURRENT_LIST_DIR}/kernels.cpp ${CMAKE_CURRENT_LIST_DIR}/stack_flags.cpp)
add_dependencies(gpuscope_kernels kernels_skel)
target_link_libraries(gpuscope_kernels PUBLIC gpuscope_core)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_kernels)
# Its /api/kernels rows carry the GPU time that the gputime collector offers (GpuTimeByProcess).
gpuscope_agent_collector(kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_agent.cpp LIBS gpuscope_kernels gpuscope_gputime)

# gpuscope trace's collector: every CUDA runtime and driver call (docs/trace.md). Its subcommand,
# which names launches through kernels, is in src/cmd/.
gpuscope_bpf(trace ${CMAKE_CURRENT_LIST_DIR}/trace.bpf.c)
add_library(gpuscope_trace STATIC ${CMAKE_CURRENT_LIST_DIR}/trace.cpp ${CMAKE_CURRENT_LIST_DIR}/format.cpp)
add_dependencies(gpuscope_trace trace_skel)
target_link_libraries(gpuscope_trace PUBLIC gpuscope_core)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_trace)

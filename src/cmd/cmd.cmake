# Subcommands that combine capabilities: trace with kernel names, kernels with GPU time, the
# timeline, frames with the CUDA calls inside them, memleak with Vulkan memory, run, and the agent. Capability folders never
# include each other; these may.
gpuscope_command(cmd SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_cmd.cpp ${CMAKE_CURRENT_LIST_DIR}/kernels_cmd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/timeline_cmd.cpp ${CMAKE_CURRENT_LIST_DIR}/run_cmd.cpp ${CMAKE_CURRENT_LIST_DIR}/frames_cmd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memleak_cmd.cpp
  LIBS gpuscope_trace gpuscope_kernels gpuscope_gputime gpuscope_bridge gpuscope_graphics gpuscope_memleak
  gpuscope_copies)
include(${CMAKE_CURRENT_LIST_DIR}/agent/agent.cmake)

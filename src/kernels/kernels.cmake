gpuscope_capability(kernels BPF ${CMAKE_CURRENT_LIST_DIR}/kernels.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels.cpp ${CMAKE_CURRENT_LIST_DIR}/stack_flags.cpp
  LIBS gpuscope_core)
# Its /api/kernels rows carry the GPU time that the gputime collector offers (GpuTimeByProcess).
gpuscope_agent_collector(kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_agent.cpp LIBS gpuscope_kernels gpuscope_gputime)

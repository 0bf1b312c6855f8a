# gpuscope trace's collector: every CUDA runtime and driver call (docs/trace.md). Its subcommand,
# which names launches through kernels, is in src/cmd/.
gpuscope_capability(trace BPF ${CMAKE_CURRENT_LIST_DIR}/trace.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace.cpp ${CMAKE_CURRENT_LIST_DIR}/format.cpp
  LIBS gpuscope_core)

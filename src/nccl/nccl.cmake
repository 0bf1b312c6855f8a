gpuscope_capability(nccl BPF ${CMAKE_CURRENT_LIST_DIR}/nccl.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_collector.cpp
  LIBS gpuscope_core)
gpuscope_command(nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_cmd.cpp LIBS gpuscope_nccl)
gpuscope_agent_collector(nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_agent.cpp LIBS gpuscope_nccl)
gpuscope_timeline_source(nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_timeline.cpp LIBS gpuscope_nccl)

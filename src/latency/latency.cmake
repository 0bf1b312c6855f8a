gpuscope_capability(latency BPF ${CMAKE_CURRENT_LIST_DIR}/latency.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/latency.cpp
  LIBS gpuscope_trace)
gpuscope_command(latency SOURCES ${CMAKE_CURRENT_LIST_DIR}/latency_cmd.cpp LIBS gpuscope_latency)
gpuscope_agent_collector(latency SOURCES ${CMAKE_CURRENT_LIST_DIR}/latency_agent.cpp LIBS gpuscope_latency)

gpuscope_capability(memleak BPF ${CMAKE_CURRENT_LIST_DIR}/memleak.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memleak.cpp
  LIBS gpuscope_trace)
gpuscope_agent_collector(memleak SOURCES ${CMAKE_CURRENT_LIST_DIR}/memleak_agent.cpp LIBS gpuscope_memleak)

gpuscope_capability(graphics BPF ${CMAKE_CURRENT_LIST_DIR}/graphics.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/graphics.cpp ${CMAKE_CURRENT_LIST_DIR}/frames.cpp
  LIBS gpuscope_core)
gpuscope_agent_collector(graphics SOURCES ${CMAKE_CURRENT_LIST_DIR}/graphics_agent.cpp LIBS gpuscope_graphics)

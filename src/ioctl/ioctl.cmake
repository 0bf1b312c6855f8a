gpuscope_capability(ioctl BPF ${CMAKE_CURRENT_LIST_DIR}/ioctl.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ioctl_collector.cpp ${CMAKE_CURRENT_LIST_DIR}/ioctl_view.cpp ${CMAKE_CURRENT_LIST_DIR}/decode.cpp
  LIBS gpuscope_core)
gpuscope_command(ioctl SOURCES ${CMAKE_CURRENT_LIST_DIR}/ioctl_cmd.cpp LIBS gpuscope_ioctl)
gpuscope_agent_collector(ioctl SOURCES ${CMAKE_CURRENT_LIST_DIR}/ioctl_agent.cpp LIBS gpuscope_ioctl)

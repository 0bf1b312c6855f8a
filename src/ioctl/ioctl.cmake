gpuscope_bpf(ioctl ${CMAKE_CURRENT_LIST_DIR}/ioctl.bpf.c)
add_library(gpuscope_ioctl STATIC ${CMAKE_CURRENT_LIST_DIR}/ioctl_collector.cpp ${CMAKE_CURRENT_LIST_DIR}/ioctl_view.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decode.cpp)
gpuscope_command(ioctl SOURCES ${CMAKE_CURRENT_LIST_DIR}/ioctl_cmd.cpp LIBS gpuscope_ioctl)
add_dependencies(gpuscope_ioctl ioctl_skel)
target_link_libraries(gpuscope_ioctl PUBLIC gpuscope_core)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_ioctl)
gpuscope_agent_collector(ioctl SOURCES ${CMAKE_CURRENT_LIST_DIR}/ioctl_agent.cpp LIBS gpuscope_ioctl)

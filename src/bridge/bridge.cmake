# gpuscope bridge: NVML state published into pinned BPF maps (bridge_maps.h).
gpuscope_bpf(bridge_pins src/bridge/pins.bpf.c)
add_library(gpuscope_bridge STATIC src/bridge/bridge.cpp src/bridge/nvml.cpp src/bridge/reader.cpp)
gpuscope_command(bridge SOURCES src/bridge/bridge_register.cpp LIBS gpuscope_bridge)
add_dependencies(gpuscope_bridge bridge_pins_skel)
target_link_libraries(gpuscope_bridge PUBLIC gpuscope_core ${CMAKE_DL_LIBS})
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_bridge)
gpuscope_bpf(bridge_layout src/bridge/layout_check.bpf.c)
gpuscope_agent_collector(bridge SOURCES ${CMAKE_CURRENT_LIST_DIR}/bridge_agent.cpp LIBS gpuscope_bridge)

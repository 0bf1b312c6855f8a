# gpuscope starvation: on-CPU time of threads keeping an idle GPU waiting (docs/starvation.md).
gpuscope_bpf(starvation src/starvation/starvation.bpf.c)
add_library(gpuscope_starvation STATIC src/starvation/starvation.cpp)
gpuscope_command(starvation SOURCES src/starvation/starvation_cmd.cpp src/starvation/starvation_register.cpp
  LIBS gpuscope_starvation)
add_dependencies(gpuscope_starvation starvation_skel)
target_link_libraries(gpuscope_starvation PUBLIC gpuscope_bridge)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_starvation)
gpuscope_agent_collector(starvation SOURCES ${CMAKE_CURRENT_LIST_DIR}/starvation_agent.cpp LIBS gpuscope_starvation)

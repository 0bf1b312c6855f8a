# gpuscope starvation: on-CPU time of threads keeping an idle GPU waiting (docs/starvation.md).
gpuscope_capability(starvation BPF src/starvation/starvation.bpf.c
  SOURCES src/starvation/starvation.cpp
  LIBS gpuscope_bridge)
gpuscope_command(starvation SOURCES src/starvation/starvation_cmd.cpp src/starvation/starvation_register.cpp
  LIBS gpuscope_starvation)
gpuscope_agent_collector(starvation SOURCES ${CMAKE_CURRENT_LIST_DIR}/starvation_agent.cpp LIBS gpuscope_starvation)

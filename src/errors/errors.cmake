# GPU errors (docs/errors.md): the driver's Xid lines from the kernel log (/dev/kmsg or a saved
# log) and the Xid catalogue (gpuscope_errors, no BPF: the unit tests and fuzzers link it), the
# sticky CUDA errors' probes and the collector that joins them (gpuscope_errors_collector), and
# `gpuscope errors`.
add_library(gpuscope_errors STATIC ${CMAKE_CURRENT_LIST_DIR}/xid.cpp ${CMAKE_CURRENT_LIST_DIR}/xid_catalog.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kmsg_reader.cpp)
target_link_libraries(gpuscope_errors PUBLIC gpuscope_core)
gpuscope_bpf(errors ${CMAKE_CURRENT_LIST_DIR}/errors.bpf.c)
add_library(gpuscope_errors_collector STATIC ${CMAKE_CURRENT_LIST_DIR}/errors_collector.cpp
  ${CMAKE_CURRENT_LIST_DIR}/errors_nvml.cpp)
add_dependencies(gpuscope_errors_collector errors_skel)
# NVML's events through the bridge's loader (bridge/nvml.h), a declared dependency.
target_link_libraries(gpuscope_errors_collector PUBLIC gpuscope_errors gpuscope_kernels gpuscope_bridge)
gpuscope_command(errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/errors_cmd.cpp LIBS gpuscope_errors_collector)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_errors_collector)
gpuscope_agent_collector(errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/errors_agent.cpp LIBS gpuscope_errors_collector)
gpuscope_timeline_source(errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/errors_timeline.cpp LIBS gpuscope_errors_collector)

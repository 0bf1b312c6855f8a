gpuscope_capability(uvm BPF ${CMAKE_CURRENT_LIST_DIR}/uvm.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/uvm_collector.cpp
  LIBS gpuscope_core)
gpuscope_command(uvm SOURCES ${CMAKE_CURRENT_LIST_DIR}/uvm_cmd.cpp LIBS gpuscope_uvm)

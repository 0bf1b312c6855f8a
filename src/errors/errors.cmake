# GPU errors: the driver's Xid lines from the kernel log (/dev/kmsg or a saved log), the Xid
# catalogue. A library for now; its subcommand and agent collector come next (docs/errors.md).
add_library(gpuscope_errors STATIC ${CMAKE_CURRENT_LIST_DIR}/xid.cpp ${CMAKE_CURRENT_LIST_DIR}/xid_catalog.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kmsg_reader.cpp)
target_link_libraries(gpuscope_errors PUBLIC gpuscope_core)

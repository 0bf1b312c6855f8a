# The agent: a registry of collectors (each in its capability's folder), served over HTTP (libmicrohttpd's static
# archive; TLS is not built in, see gnutls_stubs.c).
find_library(LIBMICROHTTPD_A NAMES libmicrohttpd.a REQUIRED)
# Its own archive, linked after libmicrohttpd.a, whose references it satisfies.
add_library(gpuscope_tls_stubs STATIC ${CMAKE_CURRENT_LIST_DIR}/gnutls_stubs.c)
# The collectors live in their capability folders (src/<cap>/<cap>_agent.cpp, built through
# gpuscope_agent_collector) and register themselves (GPUSCOPE_AGENT_COLLECTOR, registry.h).
add_library(gpuscope_agent STATIC ${CMAKE_CURRENT_LIST_DIR}/agent.cpp ${CMAKE_CURRENT_LIST_DIR}/registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/processes.cpp ${CMAKE_CURRENT_LIST_DIR}/prom.cpp ${CMAKE_CURRENT_LIST_DIR}/http.cpp
  ${CMAKE_CURRENT_LIST_DIR}/labels.cpp ${CMAKE_CURRENT_LIST_DIR}/devices.cpp ${CMAKE_CURRENT_LIST_DIR}/anomaly.cpp
  ${CMAKE_CURRENT_LIST_DIR}/governor.cpp)
target_link_libraries(gpuscope_agent PUBLIC gpuscope_core gpuscope_bridge ${LIBMICROHTTPD_A} gpuscope_tls_stubs pthread dl)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_agent)
gpuscope_command(agent SOURCES ${CMAKE_CURRENT_LIST_DIR}/agent_cmd.cpp LIBS gpuscope_agent)

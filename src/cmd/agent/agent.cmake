# The agent: a registry of collectors (collectors/), served over HTTP (libmicrohttpd's static
# archive; TLS is not built in, see gnutls_stubs.c).
find_library(LIBMICROHTTPD_A NAMES libmicrohttpd.a REQUIRED)
# Its own archive, linked after libmicrohttpd.a, whose references it satisfies.
add_library(gpuscope_tls_stubs STATIC ${CMAKE_CURRENT_LIST_DIR}/gnutls_stubs.c)
# The collectors register themselves (GPUSCOPE_AGENT_COLLECTOR): objects of the binary, beside the subcommand.
file(GLOB GPUSCOPE_AGENT_COLLECTORS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/collectors/*.cpp)
add_library(gpuscope_agent STATIC ${CMAKE_CURRENT_LIST_DIR}/agent.cpp
  ${CMAKE_CURRENT_LIST_DIR}/processes.cpp ${CMAKE_CURRENT_LIST_DIR}/prom.cpp ${CMAKE_CURRENT_LIST_DIR}/http.cpp
  ${CMAKE_CURRENT_LIST_DIR}/labels.cpp ${CMAKE_CURRENT_LIST_DIR}/devices.cpp ${CMAKE_CURRENT_LIST_DIR}/anomaly.cpp
  ${CMAKE_CURRENT_LIST_DIR}/governor.cpp)
target_link_libraries(gpuscope_agent PUBLIC gpuscope_kernels gpuscope_memleak gpuscope_latency gpuscope_ioctl gpuscope_gputime
  gpuscope_starvation gpuscope_bridge gpuscope_graphics ${LIBMICROHTTPD_A}
  gpuscope_tls_stubs pthread dl)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_agent)
gpuscope_command(agent SOURCES ${CMAKE_CURRENT_LIST_DIR}/agent_cmd.cpp ${GPUSCOPE_AGENT_COLLECTORS} LIBS gpuscope_agent)

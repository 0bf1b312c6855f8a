gpuscope_bpf(graphics ${CMAKE_CURRENT_LIST_DIR}/graphics.bpf.c)
add_library(gpuscope_graphics STATIC ${CMAKE_CURRENT_LIST_DIR}/graphics.cpp ${CMAKE_CURRENT_LIST_DIR}/frames.cpp
  ${CMAKE_CURRENT_LIST_DIR}/frames_cmd.cpp)
add_dependencies(gpuscope_graphics graphics_skel)
target_link_libraries(gpuscope_graphics PUBLIC gpuscope_latency)
list(APPEND GPUSCOPE_COMMAND_LIBS gpuscope_graphics)

# libgpuscope-cupti.so: the CUDA injection library, in build/ beside gpuscope (where gpuscope
# and `gpuscope run` look for it). Plain C, no libstdc++: it is loaded into every CUDA process.
add_library(gpuscope_cupti SHARED ${CMAKE_CURRENT_LIST_DIR}/cupti_inject.c ${PROJECT_SOURCE_DIR}/src/common/loadable.c)
set_target_properties(gpuscope_cupti PROPERTIES OUTPUT_NAME gpuscope-cupti C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
target_include_directories(gpuscope_cupti PRIVATE ${PROJECT_SOURCE_DIR}/src ${CUDA_INCLUDE_DIR})
# -fno-ipa-icf: the two hand-off functions must stay two symbols at two addresses.
target_compile_options(gpuscope_cupti PRIVATE -O2 -fno-ipa-icf)
target_link_libraries(gpuscope_cupti PRIVATE ${CMAKE_DL_LIBS} pthread)
target_link_options(gpuscope_cupti PRIVATE -Wl,-z,defs)

gpuscope_capability(gputime BPF ${CMAKE_CURRENT_LIST_DIR}/gputime.bpf.c
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gputime.cpp ${CMAKE_CURRENT_LIST_DIR}/timeline.cpp
  LIBS gpuscope_core)
add_dependencies(gpuscope_gputime gpuscope_cupti)
gpuscope_agent_collector(gputime SOURCES ${CMAKE_CURRENT_LIST_DIR}/gputime_agent.cpp LIBS gpuscope_gputime)

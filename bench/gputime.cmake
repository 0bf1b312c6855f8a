# libgpuscope-cupti.so's hand-off against a bare uprobe, and the idle library's cost (docs/gputime.md).
include_guard(GLOBAL)
add_executable(gputime_handoff ${CMAKE_CURRENT_LIST_DIR}/gputime_handoff.cpp)
target_include_directories(gputime_handoff PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(gputime_handoff PRIVATE ${CMAKE_DL_LIBS})
add_executable(gputime_overhead ${CMAKE_CURRENT_LIST_DIR}/gputime_overhead.cpp)
add_dependencies(gputime_overhead bare_skel)
target_link_libraries(gputime_overhead PRIVATE gpuscope_trace -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_gputime_overhead
  COMMAND gputime_overhead --gpuscope $<TARGET_FILE:gpuscope> --lib $<TARGET_FILE:gpuscope_cupti>
          --handoff $<TARGET_FILE:gputime_handoff> --rounds 1 --calls 20)
set_tests_properties(bench_smoke_gputime_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120
  PASS_REGULAR_EXPRESSION "added cost, gpuscope / bare uprobe: +-?[0-9.]+x")

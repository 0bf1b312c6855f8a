# The shared uprobe core: dlopen notices for every capability, symbols keyed by file, map walks.
add_executable(core_test ${CMAKE_CURRENT_LIST_DIR}/core_test.cpp)
target_link_libraries(core_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(core_test PRIVATE KERNELS_FIXTURE_DIR="${KERNELS_FIXTURE_DIR}")
add_dependencies(core_test gpuscope standin_app standin_dlopen kernels_fixtures)
gtest_discover_tests(core_test PROPERTIES TIMEOUT 90 RUN_SERIAL TRUE)

# gpuscope kernels: launch counts and names against real processes.
add_executable(kernels_test ${CMAKE_CURRENT_LIST_DIR}/kernels_test.cpp)
target_link_libraries(kernels_test PRIVATE gstest_harness GTest::gtest_main)
target_compile_definitions(kernels_test PRIVATE KERNELS_FIXTURE_DIR="${KERNELS_FIXTURE_DIR}")
add_dependencies(kernels_test gpuscope standin_app kernels_fixtures)
gtest_discover_tests(kernels_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)
# Launch sites (--stacks): a C program with frame pointers and a Python program on the stand-in driver.
add_executable(kernels_stacks_test ${CMAKE_CURRENT_LIST_DIR}/kernels_stacks_test.cpp)
target_link_libraries(kernels_stacks_test PRIVATE gstest_harness GTest::gtest_main)
target_compile_definitions(kernels_stacks_test PRIVATE STANDIN_SITES="$<TARGET_FILE:standin_sites>"
  STANDIN_SITES_PY="${PROJECT_SOURCE_DIR}/tests/fixtures/standin/standin_sites.py")
add_dependencies(kernels_stacks_test gpuscope standin_sites)
gtest_discover_tests(kernels_stacks_test PROPERTIES TIMEOUT 90 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/kernels.cmake)

# gpuscope kernels: launch counts and names against real processes.
add_executable(kernels_test ${CMAKE_CURRENT_LIST_DIR}/kernels_test.cpp)
target_link_libraries(kernels_test PRIVATE gstest_harness GTest::gtest_main)
target_compile_definitions(kernels_test PRIVATE KERNELS_FIXTURE_DIR="${KERNELS_FIXTURE_DIR}")
add_dependencies(kernels_test gpuscope standin_app kernels_fixtures)
gtest_discover_tests(kernels_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/kernels.cmake)

# gpuscope memleak against real processes (stand-ins and the real libcudart), then its benchmark.
add_executable(memleak_test ${CMAKE_CURRENT_LIST_DIR}/memleak_test.cpp)
target_link_libraries(memleak_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(memleak_test PRIVATE PY_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/python")
add_dependencies(memleak_test gpuscope standin_app cuda_fixtures)
gtest_discover_tests(memleak_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/memleak.cmake)

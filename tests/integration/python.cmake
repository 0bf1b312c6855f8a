# The CPython walk's userspace half (src/python) against running interpreters.
add_executable(python_test ${CMAKE_CURRENT_LIST_DIR}/python_test.cpp)
target_link_libraries(python_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(python_test PRIVATE PY_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/python")
gtest_discover_tests(python_test PROPERTIES TIMEOUT 120)
include(${PROJECT_SOURCE_DIR}/bench/pyframes.cmake)

# Memory of trace, kernels and the agent beside a library of libtorch_cuda's scale.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bigsym ${CMAKE_CURRENT_BINARY_DIR}/fixtures/bigsym)
add_executable(memory_test ${CMAKE_CURRENT_LIST_DIR}/memory_test.cpp)
target_link_libraries(memory_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(memory_test PRIVATE BIGSYM_DIR="${CMAKE_CURRENT_BINARY_DIR}/fixtures/bigsym"
                           BIGSYM_APP="$<TARGET_FILE:bigsym_app>")
add_dependencies(memory_test gpuscope bigsym_app standin_app)
gtest_discover_tests(memory_test PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)

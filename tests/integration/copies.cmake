# gpuscope copies: copies and memsets by direction against the stand-in libraries and the real
# libcudart, its agent series, bad input.
add_executable(copies_test ${CMAKE_CURRENT_LIST_DIR}/copies_test.cpp)
target_link_libraries(copies_test PRIVATE gstest_harness GTest::gtest_main)
target_include_directories(copies_test PRIVATE ${PROJECT_SOURCE_DIR}/src ${CUDA_INCLUDE_DIR})
# The GPU-time feeder (tests/integration/gputime.cmake) hands the library a timed copy and memset.
target_compile_definitions(copies_test PRIVATE GT_FEEDER="${CMAKE_CURRENT_BINARY_DIR}/fixtures/gputime/gputime_feeder"
                                               CUPTI_LIB="$<TARGET_FILE:gpuscope_cupti>")
add_dependencies(copies_test gpuscope standin_app cuda_fixtures gputime_fixtures gpuscope_cupti)
gtest_discover_tests(copies_test PROPERTIES TIMEOUT 90 RUN_SERIAL TRUE)

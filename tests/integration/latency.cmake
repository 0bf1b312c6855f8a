# gpuscope latency: histogram math on its own, then the command against real processes.
add_executable(latency_hist_test ${CMAKE_CURRENT_LIST_DIR}/../unit/latency_hist_test.cpp)
target_link_libraries(latency_hist_test PRIVATE gpuscope_latency GTest::gtest_main)
gtest_discover_tests(latency_hist_test)

add_executable(latency_test ${CMAKE_CURRENT_LIST_DIR}/latency_test.cpp)
target_link_libraries(latency_test PRIVATE gstest_harness GTest::gtest_main)
add_dependencies(latency_test gpuscope standin_app cuda_fixtures)
gtest_discover_tests(latency_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)

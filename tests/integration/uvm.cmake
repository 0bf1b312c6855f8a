# gpuscope uvm: its kprobe programs pass the verifier; the unavailable path says why and leaves nothing behind.
add_executable(uvm_test ${CMAKE_CURRENT_LIST_DIR}/uvm_test.cpp)
target_link_libraries(uvm_test PRIVATE gstest_harness gpuscope_uvm GTest::gtest_main)
add_dependencies(uvm_test gpuscope)
gtest_discover_tests(uvm_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)

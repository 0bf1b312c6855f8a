# gpuscope ioctl: the decoding table on its own, then the command against this test's own ioctls.
add_executable(ioctl_decode_test ${CMAKE_CURRENT_LIST_DIR}/../unit/ioctl_decode_test.cpp)
target_link_libraries(ioctl_decode_test PRIVATE gpuscope_ioctl GTest::gtest_main)
gtest_discover_tests(ioctl_decode_test)

add_executable(ioctl_test ${CMAKE_CURRENT_LIST_DIR}/ioctl_test.cpp)
target_link_libraries(ioctl_test PRIVATE gstest_harness GTest::gtest_main)
add_dependencies(ioctl_test gpuscope)
gtest_discover_tests(ioctl_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)

# gpuscope ioctl: the decoding table on its own, then the command against this test's own ioctls.
add_executable(ioctl_decode_test ${CMAKE_CURRENT_LIST_DIR}/../unit/ioctl_decode_test.cpp)
target_link_libraries(ioctl_decode_test PRIVATE gpuscope_ioctl GTest::gtest_main)
# The kernel's DRM uapi as Debian ships it (libdrm-dev): the test reads its numbers.
find_file(GPUSCOPE_DRM_HEADER drm.h PATHS /usr/include/libdrm NO_DEFAULT_PATH REQUIRED)
target_compile_definitions(ioctl_decode_test PRIVATE DRM_HEADER="${GPUSCOPE_DRM_HEADER}")
gtest_discover_tests(ioctl_decode_test)

add_executable(ioctl_test ${CMAKE_CURRENT_LIST_DIR}/ioctl_test.cpp)
target_link_libraries(ioctl_test PRIVATE gstest_harness GTest::gtest_main)
add_dependencies(ioctl_test gpuscope)
gtest_discover_tests(ioctl_test PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)

# gpuscope bridge against the NVML stand-in, on real bpffs. Included from tests/CMakeLists.txt.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/fixtures/nvml ${CMAKE_CURRENT_BINARY_DIR}/fixtures/nvml)
add_executable(bridge_test integration/bridge_test.cpp)
add_dependencies(bridge_test gpuscope nvml_standin bridge_layout_skel)
target_link_libraries(bridge_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(bridge_test PRIVATE NVML_STANDIN="$<TARGET_FILE:nvml_standin>")
gtest_discover_tests(bridge_test PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)

# gpuscope starvation against real threads, with a real bridge on the NVML stand-in.
# Included from tests/CMakeLists.txt after bridge.cmake (which builds nvml_standin).
add_executable(starv_fixture ${PROJECT_SOURCE_DIR}/tests/fixtures/starvation/starv_fixture.cpp)
# Frame pointers in every function: the tests read stacks through them. -O0 because GCC 12
# drops the frame of leaf functions at -O1 and above even with -mno-omit-leaf-frame-pointer.
target_compile_options(starv_fixture PRIVATE -O0 -g -fno-omit-frame-pointer)
target_link_libraries(starv_fixture PRIVATE pthread)
add_executable(starvation_test integration/starvation_test.cpp)
target_link_libraries(starvation_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(starvation_test PRIVATE NVML_STANDIN="$<TARGET_FILE:nvml_standin>"
                           STARV_FIXTURE="$<TARGET_FILE:starv_fixture>"
                           PY_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/python")
add_dependencies(starvation_test gpuscope nvml_standin starv_fixture)
gtest_discover_tests(starvation_test PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/starvation.cmake)

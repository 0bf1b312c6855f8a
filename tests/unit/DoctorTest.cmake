# `gpuscope doctor` end to end. Needs GTest found and the gpuscope target defined.
include(GoogleTest)
add_executable(doctor_test "${CMAKE_CURRENT_LIST_DIR}/doctor_test.cpp")
target_link_libraries(doctor_test PRIVATE gstest_harness GTest::gtest_main nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS})
target_compile_definitions(doctor_test PRIVATE GPUSCOPE_BIN="$<TARGET_FILE:gpuscope>" NVML_STANDIN="$<TARGET_FILE:nvml_standin>")
add_dependencies(doctor_test gpuscope nvml_standin)
# Serial: ChangesNothing compares the host's loaded BPF programs and mounts before and after.
gtest_discover_tests(doctor_test PROPERTIES RUN_SERIAL TRUE TIMEOUT 60)

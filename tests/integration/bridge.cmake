# gpuscope bridge against the NVML stand-in, on real bpffs. Included from tests/CMakeLists.txt.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/fixtures/nvml ${CMAKE_CURRENT_BINARY_DIR}/fixtures/nvml)
# A consumer written from Inspektor Gadget's header alone (C, its own BPF object).
gpuscope_bpf(bridge_ig_consumer ${CMAKE_CURRENT_SOURCE_DIR}/integration/bridge_ig_consumer.bpf.c)
add_executable(bridge_ig_consumer integration/bridge_ig_consumer.c)
add_dependencies(bridge_ig_consumer bridge_ig_consumer_skel)
target_include_directories(bridge_ig_consumer PRIVATE ${GPUSCOPE_GEN_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/integration)
target_link_libraries(bridge_ig_consumer PRIVATE ${LIBBPF_A} ${LIBELF_A} ${LIBZ_A} ${LIBZSTD_A})
add_executable(bridge_test integration/bridge_test.cpp)
add_dependencies(bridge_test gpuscope nvml_standin bridge_layout_skel bridge_ig_consumer)
target_link_libraries(bridge_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(bridge_test PRIVATE NVML_STANDIN="$<TARGET_FILE:nvml_standin>" BPFTOOL="${BPFTOOL}"
  IG_CONSUMER="$<TARGET_FILE:bridge_ig_consumer>")
gtest_discover_tests(bridge_test PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)
# NVML events (issue 44): the stand-in delivers what a test appends; BridgeThread in-process.
gstest_integration(bridge_events_test 60 DEPS nvml_standin DEFS NVML_STANDIN="$<TARGET_FILE:nvml_standin>")
target_link_libraries(bridge_events_test PRIVATE gpuscope_bridge)

# gpuscope agent: the Prometheus writer and labels (unit), then the agent against real
# processes, scraped by itself, by promtool and by a real Prometheus.
add_executable(prom_test ${CMAKE_CURRENT_LIST_DIR}/../unit/prom_test.cpp)
target_link_libraries(prom_test PRIVATE gpuscope_agent GTest::gtest_main)
gtest_discover_tests(prom_test)

add_executable(agent_test ${CMAKE_CURRENT_LIST_DIR}/agent_test.cpp)
target_link_libraries(agent_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(agent_test PRIVATE NVML_STANDIN="$<TARGET_FILE:nvml_standin>"
                           STARV_FIXTURE="$<TARGET_FILE:starv_fixture>" GT_FEEDER="${CMAKE_CURRENT_BINARY_DIR}/fixtures/gputime/gputime_feeder"
                           CUPTI_LIB="$<TARGET_FILE:gpuscope_cupti>" CUPTI_STANDIN="$<TARGET_FILE:cupti_standin>"
                           CUPTI_APP="$<TARGET_FILE:cupti_app>")
add_dependencies(agent_test gpuscope standin_app nvml_standin starv_fixture gputime_fixtures gpuscope_cupti
                 cupti_standin cupti_app)
gtest_discover_tests(agent_test PROPERTIES TIMEOUT 180 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/agent.cmake)

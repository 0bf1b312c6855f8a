# Reliability against real processes and real BPF: late attach (defect 1), churn of 1000
# processes under memleak, kernels and trace at once, numeric flags fed nonsense, a --lib with
# corrupt program headers, prompt exit, kill -9, unknown subcommands (docs/reliability.md).
add_executable(reliability_test ${CMAKE_CURRENT_LIST_DIR}/reliability_test.cpp)
target_link_libraries(reliability_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
add_dependencies(reliability_test gpuscope standin_app)
gtest_discover_tests(reliability_test PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE LABELS reliability)

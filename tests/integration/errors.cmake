# gpuscope errors: a saved kernel log replayed, the stand-in's sticky error after named kernels,
# the two joined, bad input, and the real libcudart without a GPU.
gstest_integration(errors_test 90 DEPS standin_app cuda_fixtures nvml_standin
  DEFS NVML_STANDIN="$<TARGET_FILE:nvml_standin>")
# The collector itself too, for NVML's events as the bridge hands them over.
target_link_libraries(errors_test PRIVATE gpuscope_errors_collector)
# The agent's errors collector: its series, /api/errors against gpuscope errors --json, promtool.
gstest_integration(errors_agent_test 120 DEPS standin_app nvml_standin
  DEFS NVML_STANDIN="$<TARGET_FILE:nvml_standin>")

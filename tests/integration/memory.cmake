# Memory of trace, kernels and the agent beside a library of libtorch_cuda's scale.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bigsym ${CMAKE_CURRENT_BINARY_DIR}/fixtures/bigsym)
gstest_integration(memory_test 120 DEFS BIGSYM_DIR="${CMAKE_CURRENT_BINARY_DIR}/fixtures/bigsym"
  BIGSYM_APP="$<TARGET_FILE:bigsym_app>" DEPS bigsym_app standin_app)

# The NCCL stand-in (tests/fixtures/nccl: libnccl.so.2 and nccl_rank) and its own smoke test.
add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fixtures/nccl ${CMAKE_BINARY_DIR}/tests/fixtures/nccl)
gstest_integration(nccl_fixture_test 60 DEPS nccl_rank nccl_standin
  DEFS NCCL_RANK="$<TARGET_FILE:nccl_rank>" NCCL_STANDIN_LIB_DIR="${NCCL_STANDIN_LIB_DIR}")
# gpuscope nccl against 4 stand-in ranks: exact counts, the late rank named, a split, an early exit.
gstest_integration(nccl_test 120 DEPS nccl_rank nccl_standin
  DEFS NCCL_RANK="$<TARGET_FILE:nccl_rank>" NCCL_STANDIN_LIB_DIR="${NCCL_STANDIN_LIB_DIR}")

# One JSON schema for every subcommand (docs/json.md): each one's --json against real processes.
# Included from tests/CMakeLists.txt after bridge, starvation, graphics and nccl (their fixtures).
gstest_integration(schema_test 120 DEPS standin_app nvml_standin starv_fixture graphics_fixtures gpuscope_cupti
  nccl_rank nccl_standin
  DEFS NVML_STANDIN="$<TARGET_FILE:nvml_standin>" STARV_FIXTURE="$<TARGET_FILE:starv_fixture>"
       NCCL_RANK="$<TARGET_FILE:nccl_rank>"
       GRAPHICS_FIXTURE_DIR="${CMAKE_BINARY_DIR}/tests/fixtures/graphics")

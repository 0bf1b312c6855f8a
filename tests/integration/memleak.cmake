# gpuscope memleak against real processes (stand-ins and the real libcudart), then its benchmark.
gstest_integration(memleak_test 60 DEFS PY_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/python"
  DEPS standin_app cuda_fixtures)
include(${PROJECT_SOURCE_DIR}/bench/memleak.cmake)

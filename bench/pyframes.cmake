# Cost per sample of the CPython walk (src/python/pyframes.bpf.h) against the same sampler
# without it, in one run (docs/python.md). Included from tests/integration/python.cmake.
include_guard(GLOBAL)
gpuscope_bpf(pyframes_bench ${CMAKE_CURRENT_LIST_DIR}/pyframes_bench.bpf.c)
add_executable(pyframes_overhead ${CMAKE_CURRENT_LIST_DIR}/pyframes_overhead.cpp)
add_dependencies(pyframes_overhead pyframes_bench_skel)
target_link_libraries(pyframes_overhead PRIVATE gpuscope_core -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_pyframes_overhead
  COMMAND pyframes_overhead --script ${PROJECT_SOURCE_DIR}/tests/fixtures/python/burn.py --seconds 1)
set_tests_properties(bench_smoke_pyframes_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

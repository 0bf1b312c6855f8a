# libFuzzer targets (tests/fuzz/CMakeLists.txt), built into <build>/fuzz by the normal build when
# a clang that links `-fsanitize=fuzzer,address,undefined` is found (Debian: clang-14 and
# libclang-rt-14-dev), and run by ctest for GPUSCOPE_FUZZ_SECONDS each (label "fuzz"). A crash,
# a sanitizer report, a leak, a >10 s input or a >2 GiB RSS fails the test, and the input is
# left in <build>/fuzz/artifacts/.
option(GPUSCOPE_FUZZ "Build and run the libFuzzer targets when the toolchain exists" ON)
set(GPUSCOPE_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target runs under ctest")
set(GPUSCOPE_FUZZ_TARGETS elf_symbols perf_map proc_maps ioctl_decode demangle prom xid)

# A failed probe is not cached: installing the packages later and re-running cmake turns them on.
if(GPUSCOPE_FUZZ AND NOT GPUSCOPE_FUZZ_CXX_WORKS)
  find_program(GPUSCOPE_FUZZ_CXX NAMES clang++-14 clang++)
  find_program(GPUSCOPE_FUZZ_CC NAMES clang-14 clang)
  set(works FALSE)
  if(GPUSCOPE_FUZZ_CXX AND GPUSCOPE_FUZZ_CC)
    set(probe_dir ${CMAKE_BINARY_DIR}/fuzz-probe)
    file(WRITE ${probe_dir}/probe.cpp
      "#include <cstddef>\n#include <cstdint>\n"
      "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(
      COMMAND ${GPUSCOPE_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cpp -o probe
      WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(works TRUE)
    endif()
  endif()
  set(GPUSCOPE_FUZZ_CXX_WORKS ${works} CACHE INTERNAL "clang links libFuzzer with ASAN+UBSAN")
endif()

if(GPUSCOPE_FUZZ AND GPUSCOPE_FUZZ_CXX_WORKS)
  message(STATUS "Fuzz targets: on (${GPUSCOPE_FUZZ_CXX}), ${GPUSCOPE_FUZZ_SECONDS} s each under ctest")
  include(ExternalProject)
  set(fuzz_dir ${CMAKE_BINARY_DIR}/fuzz)
  ExternalProject_Add(gpuscope_fuzzers
    SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
    BINARY_DIR ${fuzz_dir}
    CMAKE_ARGS -DCMAKE_C_COMPILER=${GPUSCOPE_FUZZ_CC} -DCMAKE_CXX_COMPILER=${GPUSCOPE_FUZZ_CXX}
               -DCMAKE_BUILD_TYPE=RelWithDebInfo
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON)
  foreach(t ${GPUSCOPE_FUZZ_TARGETS})
    set(seeds ${CMAKE_CURRENT_LIST_DIR}/corpus/${t})
    if(t STREQUAL "elf_symbols")
      list(APPEND seeds ${fuzz_dir}/corpus/elf_symbols_gen)
    endif()
    add_test(NAME fuzz_${t}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_fuzzer.sh ${fuzz_dir}/fuzz_${t} ${GPUSCOPE_FUZZ_SECONDS}
              ${fuzz_dir}/work/${t} ${fuzz_dir}/artifacts ${seeds})
    set_tests_properties(fuzz_${t} PROPERTIES LABELS fuzz TIMEOUT 300)
  endforeach()
elseif(GPUSCOPE_FUZZ)
  message(STATUS "Fuzz targets: off (no clang that links -fsanitize=fuzzer; Debian: clang-14 libclang-rt-14-dev)")
endif()

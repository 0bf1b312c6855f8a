# -DGPUSCOPE_SANITIZE=ON: AddressSanitizer + UndefinedBehaviorSanitizer for gpuscope, its
# libraries and the tests (benches are left out of `all`); any UB report aborts (-fno-sanitize-recover). The programs
# the tests trace (tests/fixtures: stand-in CUDA libraries, nvcc-built apps) are left
# uninstrumented on purpose: they play real applications, and an instrumented library cannot be
# loaded into an uninstrumented program. BPF objects are built by clang -target bpf, untouched:
# scripts/test-asan.sh copies the release build's skeletons (GPUSCOPE_BPF_PREBUILT, cmake/Bpf.cmake).
# scripts/test-asan.sh builds and runs this configuration (build-asan/).
option(GPUSCOPE_SANITIZE "Build with -fsanitize=address,undefined" OFF)
set(GPUSCOPE_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
# -O1 -g1 (line tables: reports still name function, file and line) after the build type's -O2 -g:
# half the compile time on CI's 2 cores (34 s to 16 s for agent.cpp), and the level ASAN advises.
set(GPUSCOPE_SANITIZE_COMPILE_FLAGS ${GPUSCOPE_SANITIZE_FLAGS} -O1 -g1)

# Called at the end of the top-level CMakeLists.txt, once every target exists.
function(gpuscope_sanitize_targets dir)
  if(NOT GPUSCOPE_SANITIZE)
    return()
  endif()
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    # Benchmarks time overhead ratios, which ASAN distorts: not built by default here (their
    # bench_smoke_* tests are not run against this build; see scripts/test-asan.sh).
    get_target_property(sources ${t} SOURCES)
    get_target_property(srcdir ${t} SOURCE_DIR)
    if(srcdir MATCHES "^${PROJECT_SOURCE_DIR}/bench(/|$)" OR sources MATCHES "/bench/")
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
    # libgpuscope-cupti.so is injected into the traced (uninstrumented) programs, as fixtures are;
    # a fixture defined outside tests/fixtures says so with the GPUSCOPE_FIXTURE property.
    get_target_property(fixture ${t} GPUSCOPE_FIXTURE)
    if(t STREQUAL "gpuscope_cupti" OR fixture)
      continue()
    endif()
    if(type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY)$")
      target_compile_options(${t} PRIVATE ${GPUSCOPE_SANITIZE_COMPILE_FLAGS})
      target_link_options(${t} PRIVATE ${GPUSCOPE_SANITIZE_FLAGS})
    elseif(type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY)$")
      target_compile_options(${t} PRIVATE ${GPUSCOPE_SANITIZE_COMPILE_FLAGS})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    if(NOT sub MATCHES "/tests/fixtures(/|$)")
      gpuscope_sanitize_targets(${sub})
    endif()
  endforeach()
endfunction()

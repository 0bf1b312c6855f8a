# GPU time (libgpuscope-cupti.so, its hand-off, kernels' GPU columns, timeline, run) without a GPU.
find_program(NVCC nvcc PATHS /usr/local/cuda/bin REQUIRED)
set(GT_FIXTURE_DIR ${CMAKE_CURRENT_BINARY_DIR}/fixtures/gputime)
set(gt_src ${CMAKE_CURRENT_LIST_DIR}/../fixtures/gputime/gputime_feeder.cu)
add_custom_command(OUTPUT ${GT_FIXTURE_DIR}/gputime_feeder
  COMMAND ${CMAKE_COMMAND} -E make_directory ${GT_FIXTURE_DIR}
  COMMAND ${NVCC} -O1 -cudart shared -I${PROJECT_SOURCE_DIR}/src -o ${GT_FIXTURE_DIR}/gputime_feeder ${gt_src} -ldl
  DEPENDS ${gt_src} ${PROJECT_SOURCE_DIR}/src/gputime/gputime.h)
add_custom_target(gputime_fixtures ALL DEPENDS ${GT_FIXTURE_DIR}/gputime_feeder)
add_executable(cupti_init_probe ${CMAKE_CURRENT_LIST_DIR}/../fixtures/gputime/cupti_init_probe.c)
target_link_libraries(cupti_init_probe PRIVATE ${CMAKE_DL_LIBS})

add_executable(gputime_test ${CMAKE_CURRENT_LIST_DIR}/gputime_test.cpp)
target_link_libraries(gputime_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(gputime_test PRIVATE
  GT_FEEDER="${GT_FIXTURE_DIR}/gputime_feeder"
  CUPTI_LIB="$<TARGET_FILE:gpuscope_cupti>"
  CUPTI_INIT_PROBE="$<TARGET_FILE:cupti_init_probe>"
  CUPTI_TOOLKIT_DIR="${CUDA_INCLUDE_DIR}/../lib64"
  NVML_STANDIN="$<TARGET_FILE:nvml_standin>"
  TIMELINE_CHECKER="${CMAKE_CURRENT_LIST_DIR}/check_timeline.py")
add_dependencies(gputime_test gpuscope gpuscope_cupti gputime_fixtures cupti_init_probe cuda_fixtures nvml_standin)
gtest_discover_tests(gputime_test PROPERTIES TIMEOUT 90 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/gputime.cmake)

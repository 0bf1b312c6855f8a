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

# A stand-in libcupti.so.13 and a program that injects libgpuscope-cupti.so over it: what the
# library enables and when, under gpuscope's clients.
add_library(cupti_standin SHARED ${CMAKE_CURRENT_LIST_DIR}/../fixtures/gputime/cupti_standin.c)
set_target_properties(cupti_standin PROPERTIES OUTPUT_NAME cupti SUFFIX ".so.13" C_VISIBILITY_PRESET hidden
                      LIBRARY_OUTPUT_DIRECTORY ${GT_FIXTURE_DIR}/cupti)
target_include_directories(cupti_standin PRIVATE ${CUDA_INCLUDE_DIR})
target_link_libraries(cupti_standin PRIVATE pthread)
add_executable(cupti_app ${CMAKE_CURRENT_LIST_DIR}/../fixtures/gputime/cupti_app.c)
target_include_directories(cupti_app PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(cupti_app PRIVATE ${CMAKE_DL_LIBS})

# tests/gpu's floor arm (check 82): built here, since the GPU host has no toolkit.
add_library(cupti_floor SHARED ${PROJECT_SOURCE_DIR}/tests/gpu/workloads/cupti_floor.c)
set_target_properties(cupti_floor PROPERTIES OUTPUT_NAME cupti-floor C_VISIBILITY_PRESET hidden)
target_include_directories(cupti_floor PRIVATE ${CUDA_INCLUDE_DIR})
target_link_libraries(cupti_floor PRIVATE ${CMAKE_DL_LIBS} pthread)
target_link_options(cupti_floor PRIVATE -Wl,-z,defs)

add_executable(gputime_test ${CMAKE_CURRENT_LIST_DIR}/gputime_test.cpp)
target_link_libraries(gputime_test PRIVATE gstest_harness gpuscope_core GTest::gtest_main)
target_compile_definitions(gputime_test PRIVATE
  GT_FEEDER="${GT_FIXTURE_DIR}/gputime_feeder"
  CUPTI_LIB="$<TARGET_FILE:gpuscope_cupti>"
  CUPTI_INIT_PROBE="$<TARGET_FILE:cupti_init_probe>"
  CUPTI_STANDIN="$<TARGET_FILE:cupti_standin>"
  CUPTI_APP="$<TARGET_FILE:cupti_app>"
  CUPTI_FLOOR="$<TARGET_FILE:cupti_floor>"
  CUPTI_TOOLKIT_DIR="${CUDA_INCLUDE_DIR}/../lib64"
  NVML_STANDIN="$<TARGET_FILE:nvml_standin>"
  TIMELINE_CHECKER="${CMAKE_CURRENT_LIST_DIR}/check_timeline.py"
  NCCL_RANK="$<TARGET_FILE:nccl_rank>")
# The timeline's GPU errors (the stand-in app's sticky error) and NCCL spans (the stand-in ranks).
add_dependencies(gputime_test gpuscope gpuscope_cupti gputime_fixtures cupti_init_probe cuda_fixtures nvml_standin
                 cupti_standin cupti_app cupti_floor standin_app nccl_rank nccl_standin)
gtest_discover_tests(gputime_test PROPERTIES TIMEOUT 90 RUN_SERIAL TRUE)
include(${PROJECT_SOURCE_DIR}/bench/gputime.cmake)

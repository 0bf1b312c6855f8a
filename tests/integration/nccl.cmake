# The NCCL stand-in (tests/fixtures/nccl: libnccl.so.2 and nccl_rank) and its own smoke test.
add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fixtures/nccl ${CMAKE_BINARY_DIR}/tests/fixtures/nccl)
gstest_integration(nccl_fixture_test 60 DEPS nccl_rank nccl_standin
  DEFS NCCL_RANK="$<TARGET_FILE:nccl_rank>" NCCL_STANDIN_LIB_DIR="${NCCL_STANDIN_LIB_DIR}")
# gpuscope nccl against 4 stand-in ranks: exact counts, the late rank named, a split, an early exit.
gstest_integration(nccl_test 120 DEPS nccl_rank nccl_standin
  DEFS NCCL_RANK="$<TARGET_FILE:nccl_rank>" NCCL_STANDIN_LIB_DIR="${NCCL_STANDIN_LIB_DIR}")
# An older NCCL's exports (no ncclAlltoAll/Gather/Scatter, InitRankScalable, Shrink), as
# old/libnccl.so.2, which nccl_rank loads through LD_LIBRARY_PATH (its RUNPATH gives way).
add_library(nccl_old SHARED ${CMAKE_CURRENT_SOURCE_DIR}/integration/nccl_old.c)
target_include_directories(nccl_old PRIVATE $<TARGET_PROPERTY:nccl_standin,INCLUDE_DIRECTORIES>)
target_compile_options(nccl_old PRIVATE -O0 -fno-omit-frame-pointer -Wno-unused-parameter)
set_target_properties(nccl_old PROPERTIES OUTPUT_NAME nccl PREFIX lib SUFFIX .so.2
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/nccl_old INTERPROCEDURAL_OPTIMIZATION OFF GPUSCOPE_FIXTURE TRUE)
add_dependencies(nccl_test nccl_old)
target_compile_definitions(nccl_test PRIVATE NCCL_OLD_LIB_DIR="${CMAKE_CURRENT_BINARY_DIR}/nccl_old")
# One process through ncclCommInitAll, ncclCommShrink, ncclCommInitRankScalable and ...Config.
add_executable(nccl_life ${CMAKE_CURRENT_SOURCE_DIR}/integration/nccl_life.c)
target_include_directories(nccl_life PRIVATE $<TARGET_PROPERTY:nccl_standin,INCLUDE_DIRECTORIES>)
target_link_libraries(nccl_life PRIVATE nccl_standin Threads::Threads)
set_target_properties(nccl_life PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH ${NCCL_STANDIN_LIB_DIR}
  INTERPROCEDURAL_OPTIMIZATION OFF)
add_dependencies(nccl_test nccl_life)
target_compile_definitions(nccl_test PRIVATE NCCL_LIFE="$<TARGET_FILE:nccl_life>")
# The agent's nccl collector against 4 stand-in ranks: its series, the late rank, series ending, /api/nccl.
gstest_integration(nccl_agent_test 120 DEPS nccl_rank nccl_standin
  DEFS NCCL_RANK="$<TARGET_FILE:nccl_rank>" NCCL_STANDIN_LIB_DIR="${NCCL_STANDIN_LIB_DIR}")

# gpuscope frames (the graphics collector) against real renderers on lavapipe and llvmpipe, the
# real libcudart beside Vulkan, and the stand-in loader's presents; FrameTracker on its own.
add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fixtures/graphics ${CMAKE_BINARY_DIR}/tests/fixtures/graphics)
set(GS_GRAPHICS_FIXTURES ${CMAKE_BINARY_DIR}/tests/fixtures/graphics)
gstest_integration(graphics_test 90 DEPS graphics_fixtures
  DEFS GRAPHICS_FIXTURE_DIR="${GS_GRAPHICS_FIXTURES}")
gstest_unit(frames_test gpuscope_graphics)

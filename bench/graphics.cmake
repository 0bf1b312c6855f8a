# gpuscope frames against bare uprobe+uretprobe pairs on the Vulkan loader's vkQueueSubmit and
# vkQueuePresentKHR (the stand-in loader of tests/fixtures/graphics/). Figures in docs/bench.md.
add_executable(graphics_overhead ${CMAKE_CURRENT_LIST_DIR}/graphics_overhead.cpp)
add_dependencies(graphics_overhead bare_skel)
target_link_libraries(graphics_overhead PRIVATE gpuscope_core -static-libstdc++ -static-libgcc)

# The loop and its stand-in libvulkan.so.1: tests/fixtures/graphics/'s targets where they are
# defined (tests/ is configured before bench/), else copies of our own under other names.
if(TARGET vk_present_app AND TARGET vulkan_standin)
  set(GS_BENCH_VK_APP vk_present_app)
else()
  set(GS_BENCH_VK_DIR ${PROJECT_SOURCE_DIR}/tests/fixtures/graphics)
  add_library(bench_vulkan_standin SHARED ${GS_BENCH_VK_DIR}/vulkan_standin.c)
  set_target_properties(bench_vulkan_standin PROPERTIES
    OUTPUT_NAME vulkan SOVERSION 1 LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/vk_standin
    C_VISIBILITY_PRESET hidden)
  add_executable(bench_vk_present_app ${GS_BENCH_VK_DIR}/vk_present_app.c)
  target_link_libraries(bench_vk_present_app PRIVATE bench_vulkan_standin)
  set_target_properties(bench_vk_present_app PROPERTIES BUILD_RPATH ${CMAKE_CURRENT_BINARY_DIR}/vk_standin)
  set(GS_BENCH_VK_APP bench_vk_present_app)
endif()
add_dependencies(graphics_overhead ${GS_BENCH_VK_APP})

add_test(NAME bench_smoke_graphics_overhead
  COMMAND graphics_overhead --gpuscope $<TARGET_FILE:gpuscope> --app $<TARGET_FILE:${GS_BENCH_VK_APP}>
          --rounds 1 --pairs 2000)
set_tests_properties(bench_smoke_graphics_overhead PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)

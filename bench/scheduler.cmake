# Scheduling core benchmark (owner: scheduler core). Build in Release:
#   cmake --preset release -B build/<you>-rel && cmake --build build/<you>-rel -j2 --target scheduler_bench
#   build/<you>-rel/bench/scheduler_bench
add_executable(scheduler_bench ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_bench.cc)
target_compile_options(scheduler_bench PRIVATE ${GPUSLICE_WARNINGS})
target_link_libraries(scheduler_bench PRIVATE gpuslice_scheduler_core)

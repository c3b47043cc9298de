# Scheduling core and `gpuslice simulate` (cmd/simulate.cc).
target_link_libraries(gpuslice PRIVATE gpuslice_simulate gpuslice_scheduler_core)

# The live scheduling loop, leader election and the mock device agent (cmd/mock_device_agent.cc, serve wiring).
target_link_libraries(gpuslice PRIVATE gpuslice_scheduler_loop)

# Webhook server load client (owner: webhook server): HTTPS keep-alive load, closed loop or fixed rate.
# See bench/webhook_bench.sh for the full run (certs + serve + load) recorded in RESULTS.md.
add_executable(webhook_load ${CMAKE_CURRENT_SOURCE_DIR}/webhook_load.cc)
target_compile_options(webhook_load PRIVATE ${GPUSLICE_WARNINGS})
target_link_libraries(webhook_load PRIVATE gpuslice_asio)

# The webhook server alone (same Server + review() as `gpuslice serve`), for Release runs that should not
# have to build the scheduler and kube libraries.
add_executable(webhook_bench_server ${CMAKE_CURRENT_SOURCE_DIR}/webhook_bench_server.cc)
target_compile_options(webhook_bench_server PRIVATE ${GPUSLICE_WARNINGS})
target_link_libraries(webhook_bench_server PRIVATE gpuslice_webhook_server)

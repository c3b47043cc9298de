# Webhook core micro-benchmark (owner: webhook core): CPU cost of review() without the network.
add_executable(webhook_core_bench webhook_core_bench.cc)
target_link_libraries(webhook_core_bench PRIVATE gpuslice_webhook_core Threads::Threads)
target_compile_definitions(webhook_core_bench PRIVATE GPUSLICE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# The TLS server's tests (owner: webhook server). Real TLS on 127.0.0.1 port 0.
gpuslice_test(webhook_server_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_test.cc
  DEPS gpuslice_webhook_server)

# `gpuslice certs` + `gpuslice serve` as processes (needs the binary).
gpuslice_test(webhook_server_cli_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_cli_test.cc DEPS)
add_dependencies(webhook_server_cli_tests gpuslice)

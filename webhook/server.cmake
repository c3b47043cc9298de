# gpuslice_webhook_server: the TLS server (Beast/Asio/OpenSSL) around webhook::review().
gpuslice_library(gpuslice_webhook_server
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server.cc
  DEPS gpuslice_webhook_core gpuslice_certs gpuslice_common gpuslice_asio)

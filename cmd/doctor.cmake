# `gpuslice doctor` (cmd/doctor.cc): its decisions live in gpuslice_doctor, pure over what the API server
# returned (webhook/doctor_diagnose.*) plus the certificate checks (webhook/doctor_tls.*, OpenSSL, time injected).
gpuslice_library(gpuslice_doctor
  SOURCES ${PROJECT_SOURCE_DIR}/webhook/doctor_diagnose.cc ${PROJECT_SOURCE_DIR}/webhook/doctor_tls.cc
  DEPS gpuslice_scheduler_core gpuslice_common Boost::json OpenSSL::Crypto)
target_link_libraries(gpuslice PRIVATE gpuslice_doctor gpuslice_kube)

// webhook_bench_server: the webhook server (webhook::Server + webhook::review, the same code `gpuslice
// serve` runs) without the rest of the binary, so a Release benchmark needs only the webhook libraries.
//   webhook_bench_server CERT KEY THREADS   -> prints "port=N" on stdout, serves 127.0.0.1 until SIGTERM
#include "common/config.h"
#include "webhook/admission.h"
#include "webhook/server.h"

#include <csignal>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: webhook_bench_server CERT KEY THREADS\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  static const gpuslice::Configuration config;
  gpuslice::webhook::ServerOptions o = gpuslice::webhook::ServerOptions::from(config);
  o.bind_address = "127.0.0.1:0";
  o.health_bind_address.clear();
  o.tls_cert_file = argv[1];
  o.tls_private_key_file = argv[2];
  o.threads = std::stoi(argv[3]);
  o.version = "bench";
  gpuslice::webhook::Server server(o, [](std::string_view body) { return gpuslice::webhook::review(body, config); });
  if (auto st = server.start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  std::printf("port=%u\n", server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}

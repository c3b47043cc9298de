#pragma once
// The webhook's HTTPS server (Boost.Beast + OpenSSL), after Beast's advanced_server_flex example but TLS
// only on the webhook port: TLS 1.2+ with ECDHE AEAD ciphers, N threads, keep-alive, per-connection
// deadlines (ClientHello, handshake, whole request, response write, idle keep-alive), body/header limits, a
// connection cap per listener and a per-source limit on connections still in their handshake, certificate
// rotation by polling the cert/key files. An optional plain-HTTP listener
// serves only the probes, /metrics and the read-only pages components register (for kubelet probes,
// Prometheus and the status page).
//
// The session owns the I/O and the limits; what each request gets is webhook::route() (router.h, pure):
// reviews, /livez /readyz /healthz (common/health.h), /metrics (metrics::default_registry()), 404, 405.
// Oversized body: 413; oversized header: 431; a slow or idle client hits its deadline and is closed; TLS < 1.2
// fails the handshake (protocol_version alert) and is closed; plain HTTP on the TLS port (a first byte that is an
// ASCII letter, not a TLS record) gets a plain `400 Bad Request` saying the port speaks TLS. Nothing throws out of a
// completion handler.
//
// Abuse from the tenant's side (issue 14 item 3): a TLS connection holds no TLS state or buffer until its first
// byte arrives (the session waits for readability on the bare socket), and that byte must come within
// client_hello_timeout of the accept. Each listener (TLS, plain) has its own cap, max_connections. At the cap the
// new connection is admitted and an older one makes room: the oldest that has not finished its handshake (TLS;
// on the plain listener: not yet sent a whole request), else the oldest idle keep-alive connection (waiting
// between requests); only when every connection is in the middle of a request is the new one closed. At most
// max_pending_per_source connections from one address may be in their handshake; the next one from it closes its
// oldest. Established connections do not count there: every real review arrives from one address (the
// Konnectivity agent, or the API server itself). Each close is counted in
// gpuslice_webhook_connections_closed_total{reason="client-hello-timeout|evicted|per-source|plain-http|..."}.
//
//   webhook::Server server(webhook::ServerOptions::from(config), [&](std::string_view body) {
//     return webhook::review(body, config);
//   });
//   server.readiness().add("leader", [&] { return elector.ready(); });   // any time, any thread
//   if (auto st = server.start(); !st.ok()) { ... }                        // binds, loads certs, runs
//   ...; server.stop();

#include "certs/certs.h"
#include "common/config.h"
#include "common/health.h"
#include "common/pages.h"
#include "common/result.h"
#include "webhook/router.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace gpuslice::webhook {

struct ServerOptions {
  std::string bind_address = "127.0.0.1:0";  ///< HOST:PORT of the TLS listener; port 0 picks one; empty: none
  std::string health_bind_address;           ///< plain-HTTP probes + /metrics; empty: none
  std::string tls_cert_file;                 ///< PEM chain, leaf first
  std::string tls_private_key_file;          ///< PEM key
  int threads = 2;
  uint64_t max_body_bytes = 4 * 1024 * 1024;
  uint32_t max_header_bytes = 16 * 1024;
  size_t max_connections = 4096;         ///< per listener; at the cap an older connection makes room (above)
  size_t max_pending_per_source = 1024;  ///< per listener and address: connections not past their handshake
  std::chrono::milliseconds client_hello_timeout{3000};  ///< accept to the first byte (within handshake_timeout)
  std::chrono::milliseconds handshake_timeout{10000};    ///< accept to the end of the TLS handshake
  std::chrono::milliseconds read_timeout{10000};         ///< first byte to last byte of one request
  std::chrono::milliseconds write_timeout{10000};        ///< one whole response
  std::chrono::milliseconds idle_timeout{90000};         ///< keep-alive wait for the next request
  std::chrono::milliseconds cert_poll_interval{5000};    ///< 0: no rotation polling
  std::chrono::milliseconds shutdown_grace{5000};        ///< stop(): how long in-flight requests may finish
  certs::StatFunction stat = certs::stat_file;           ///< injectable for rotation tests
  std::string version = "dev";                           ///< gpuslice_build_info{version}

  /// The webhook section of the configuration (bind address, TLS files, limits, timeouts, threads) and
  /// server.health_bind_address. handshakeTimeout and writeTimeout default to readTimeout when unset.
  static ServerOptions from(const Configuration& config);
};

class Server {
 public:
  Server(ServerOptions options, ReviewHandler handler);
  ~Server();  ///< stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Loads the certificate, binds the listeners, starts the threads. Errors name the address or file.
  Status start();
  /// Stops accepting, fails /readyz ("shutdown"), lets in-flight requests finish for up to
  /// shutdown_grace, closes idle keep-alive connections, joins the threads. Idempotent.
  void stop();

  uint16_t port() const;         ///< the TLS listener's port (after start())
  uint16_t health_port() const;  ///< the plain listener's port, 0 when none

  /// Register probes here, before or after start(). /livez has "ping"; /readyz has "ping",
  /// "tls-certificate" and "shutdown"; /healthz serves the liveness checks.
  HealthChecks& liveness();
  HealthChecks& readiness();
  /// Read-only pages of the plain-HTTP listener (common/pages.h), added any time, from any thread.
  Pages& pages();

  /// Checks the cert/key files now (the poll timer calls the same): on change, loads the new pair for new
  /// connections (open ones keep theirs); a bad pair is logged and the old one kept. Returns the load
  /// status (OK when nothing changed).
  Status check_certificates();
  /// Increments each time a certificate pair is (re)loaded; 1 after start().
  uint64_t certificate_generation() const;
  size_t open_connections() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace gpuslice::webhook

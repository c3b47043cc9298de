#pragma once
// The webhook's HTTPS server (Boost.Beast + OpenSSL), after Beast's advanced_server_flex example but TLS
// only on the webhook port: TLS 1.2+ with ECDHE AEAD ciphers, N threads, keep-alive, per-connection
// deadlines (handshake, whole request, idle keep-alive), body/header limits, a capped connection count,
// certificate rotation by polling the cert/key files. An optional plain-HTTP listener serves only the
// probes and /metrics (for kubelet probes and Prometheus).
//
// Routes (webhook port):
//   POST /mutate, POST /webhook (HAMi's path)  -> the ReviewHandler (application/json only, else 415)
//   GET  /livez[/<check>], /readyz[/<check>], /healthz[/<check>]  (?verbose, ?exclude=<check>)
//   GET  /metrics  (Prometheus text from metrics::default_registry())
// Anything else: 404; a known path with the wrong method: 405 with Allow. Oversized body: 413; oversized
// header: 431; a slow or idle client hits its deadline and is closed; TLS < 1.2 and plain HTTP on the TLS
// port fail the handshake and are closed. Nothing throws out of a completion handler.
//
//   webhook::Server server(webhook::ServerOptions::from(config), [&](std::string_view body) {
//     return webhook::review(body, config);
//   });
//   server.readiness().add("leader", [&] { return elector.ready(); });   // any time, any thread
//   if (auto st = server.start(); !st.ok()) { ... }                        // binds, loads certs, runs
//   ...; server.stop();

#include "certs/certs.h"
#include "common/config.h"
#include "common/result.h"
#include "webhook/admission.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::webhook {

/// Called for each POST /mutate or /webhook with the request body, on a server thread. Must be
/// thread-safe and fast; exceptions are caught and turned into a 500.
using ReviewHandler = std::function<ReviewReply(std::string_view body)>;

struct ServerOptions {
  std::string bind_address = "127.0.0.1:0";  ///< HOST:PORT of the TLS listener; port 0 picks one; empty: none
  std::string health_bind_address;           ///< plain-HTTP probes + /metrics; empty: none
  std::string tls_cert_file;                 ///< PEM chain, leaf first
  std::string tls_private_key_file;          ///< PEM key
  int threads = 2;
  uint64_t max_body_bytes = 4 * 1024 * 1024;
  uint32_t max_header_bytes = 16 * 1024;
  size_t max_connections = 4096;  ///< accepted connections beyond this are closed at once
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds read_timeout{10000};  ///< first byte to last byte of one request
  std::chrono::milliseconds write_timeout{10000};
  std::chrono::milliseconds idle_timeout{90000};       ///< keep-alive wait for the next request
  std::chrono::milliseconds cert_poll_interval{5000};  ///< 0: no rotation polling
  std::chrono::milliseconds shutdown_grace{5000};      ///< stop(): how long in-flight requests may finish
  certs::StatFunction stat = certs::stat_file;         ///< injectable for rotation tests
  std::string version = "dev";                         ///< gpuslice_build_info{version}

  /// The webhook section of the configuration (bind address, TLS files, limits, timeouts, threads) and
  /// server.health_bind_address.
  static ServerOptions from(const Configuration& config);
};

/// One health check: OK, or an Error whose message is logged (the HTTP answer withholds it, as
/// Kubernetes does, because probes are unauthenticated).
using Check = std::function<Status()>;

/// A named, ordered set of checks served as /livez or /readyz with Kubernetes semantics:
///   GET /readyz            200 "ok" or 500 with the per-check list and "readyz check failed"
///   GET /readyz?verbose    200 "[+]ping ok\n...readyz check passed\n"
///   GET /readyz/<name>     200 "ok" / 500 for that check alone; 404 for an unknown name
///   ?exclude=<name>        skips a check (repeatable)
/// Thread-safe: checks may be added while serving.
class HealthChecks {
 public:
  explicit HealthChecks(std::string endpoint) : endpoint_(std::move(endpoint)) {}
  /// Adds or replaces the check `name` (e.g. "leader", "informer-sync").
  void add(std::string name, Check check);
  void remove(const std::string& name);
  std::vector<std::string> names() const;

  struct Reply {
    int status = 200;
    std::string body;
  };
  /// Evaluates for a request path below the endpoint ("" for all, "/name" for one) and its query string.
  Reply evaluate(std::string_view sub_path, std::string_view query) const;

 private:
  std::string endpoint_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, Check>> checks_;
};

/// Builds the server-side TLS context from PEM files: TLS 1.2 minimum, ECDHE with AES-GCM or
/// CHACHA20-POLY1305 for TLS 1.2 (TLS 1.3 suites are all AEAD), server cipher preference, no
/// compression/renegotiation/session tickets. Errors name the file and OpenSSL's reason.
/// (Opaque here so callers need not include Asio.)
class TlsContext;
Result<std::shared_ptr<TlsContext>> make_tls_context(const std::string& cert_file, const std::string& key_file);

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

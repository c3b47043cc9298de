// The webhook's HTTPS server: listener -> session (handshake, read with deadlines and limits, route,
// write) on per-connection strands; the TLS context is swapped on certificate rotation.
#include "webhook/server.h"

#include "common/log.h"
#include "common/metrics.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>

namespace gpuslice::webhook {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

class TlsContext {
 public:
  TlsContext() : ctx(ssl::context::tls_server) {}
  ssl::context ctx;
};

namespace {

std::string openssl_reason(const error_code& ec) {
  std::string out = ec.message();
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += "; ";
    out += buf;
  }
  return out;
}

/// HOST:PORT (IPv6 as [::1]:443) -> endpoint. Names are not resolved: a bind address is an IP.
Result<tcp::endpoint> parse_endpoint(const std::string& field, const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    return make_error(field + ": \"" + text + "\" is not HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  std::string port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) {
    host = "0.0.0.0";
  }
  error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) {
    return make_error(field + ": \"" + text + "\": host \"" + host + "\" is not an IP address");
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) || std::stoi(port) > 65535) {
    return make_error(field + ": \"" + text + "\": port \"" + port + "\" is not in 0..65535");
  }
  return tcp::endpoint(addr, static_cast<unsigned short>(std::stoi(port)));
}

/// The process-wide webhook metrics, registered once (the registry does not deduplicate families).
struct WebhookMetrics {
  metrics::Family<metrics::Counter>& reviews;
  metrics::HistogramFamily& latency;
  metrics::Family<metrics::Counter>& requests;
  metrics::Family<metrics::Counter>& closed;
  metrics::Family<metrics::Counter>& reloads;
  metrics::Gauge& open;
  metrics::Family<metrics::Gauge>& build_info;
  // Hot-path children looked up once (Family::with takes a lock and builds a label vector).
  metrics::Histogram* latency_all = nullptr;
  metrics::Counter* review_200 = nullptr;
  metrics::Counter* by_outcome[5] = {};

  static WebhookMetrics& get() {
    static WebhookMetrics* m = [] {
      auto& r = metrics::default_registry();
      auto* w = new WebhookMetrics{
          r.counter("gpuslice_webhook_reviews_total", "AdmissionReviews answered, by outcome.", {"outcome"}),
          r.histogram("gpuslice_webhook_review_duration_seconds",
                      "Time from a complete request to its response being ready, in seconds.", {},
                      metrics::exponential_buckets(0.00005, 2, 16)),
          r.counter("gpuslice_webhook_http_requests_total", "HTTP requests by path class and status code.",
                    {"handler", "code"}),
          r.counter("gpuslice_webhook_connections_closed_total",
                    "Connections closed abnormally, by reason (timeout, tls, http, limit).", {"reason"}),
          r.counter("gpuslice_webhook_certificate_reloads_total", "Certificate loads, by result.", {"result"}),
          r.gauge("gpuslice_webhook_open_connections", "Open connections on the webhook listeners.").with({}),
          r.gauge("gpuslice_build_info", "gpuslice build information; always 1.", {"version"}),
      };
      w->latency_all = &w->latency.with({});  // the series exists (count 0) before the first review
      w->review_200 = &w->requests.with({"review", "200"});
      for (auto o : {ReviewOutcome::patched, ReviewOutcome::allowed, ReviewOutcome::skipped, ReviewOutcome::denied,
                     ReviewOutcome::rejected}) {
        w->by_outcome[static_cast<int>(o)] = &w->reviews.with({outcome_name(o)});
      }
      w->reviews.with({"error"});
      return w;
    }();
    return *m;
  }
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

/// Values of `key` in a query string (no percent-decoding needed for check names).
std::vector<std::string_view> query_values(std::string_view query, std::string_view key, bool& present) {
  std::vector<std::string_view> out;
  present = false;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    auto eq = part.find('=');
    auto k = part.substr(0, eq);
    if (k == key) {
      present = true;
      if (eq != std::string_view::npos) {
        out.push_back(part.substr(eq + 1));
      }
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// HealthChecks

void HealthChecks::add(std::string name, Check check) {
  std::lock_guard lock(mutex_);
  for (auto& [n, c] : checks_) {
    if (n == name) {
      c = std::move(check);
      return;
    }
  }
  checks_.emplace_back(std::move(name), std::move(check));
}

void HealthChecks::remove(const std::string& name) {
  std::lock_guard lock(mutex_);
  std::erase_if(checks_, [&](const auto& p) { return p.first == name; });
}

std::vector<std::string> HealthChecks::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [n, c] : checks_) {
    out.push_back(n);
  }
  return out;
}

HealthChecks::Reply HealthChecks::evaluate(std::string_view sub_path, std::string_view query) const {
  std::vector<std::pair<std::string, Check>> checks;
  {
    std::lock_guard lock(mutex_);
    checks = checks_;  // run checks without the lock: they may be slow or add checks themselves
  }
  auto run = [&](const std::string& name, const Check& c) -> Status {
    Status st;
    try {
      st = c ? c() : Status::Ok();
    } catch (const std::exception& e) {
      st = make_error(std::string("check threw: ") + e.what());
    }
    if (!st.ok()) {
      log::info("health check failed", {{"endpoint", endpoint_}, {"check", name}, {"reason", st.message()}}, 2);
    }
    return st;
  };
  if (!sub_path.empty()) {
    auto name = sub_path.substr(1);
    for (const auto& [n, c] : checks) {
      if (n == name) {
        auto st = run(n, c);
        if (st.ok()) {
          return {200, "ok"};
        }
        return {500, "internal server error: " + n + " check failed\n"};
      }
    }
    return {404, "404 page not found: no check \"" + std::string(name) + "\" under /" + endpoint_ + "\n"};
  }
  bool verbose = false;
  query_values(query, "verbose", verbose);
  bool has_exclude = false;
  auto excluded = query_values(query, "exclude", has_exclude);
  std::string list;
  bool failed = false;
  for (const auto& [n, c] : checks) {
    if (std::find(excluded.begin(), excluded.end(), n) != excluded.end()) {
      list += "[+]" + n + " excluded: ok\n";
      continue;
    }
    if (run(n, c).ok()) {
      list += "[+]" + n + " ok\n";
    } else {
      failed = true;
      list += "[-]" + n + " failed: reason withheld\n";
    }
  }
  if (failed) {
    return {500, list + endpoint_ + " check failed\n"};
  }
  if (verbose) {
    return {200, list + endpoint_ + " check passed\n"};
  }
  return {200, "ok"};
}

// ---------------------------------------------------------------------------------------------------------
// TLS context

Result<std::shared_ptr<TlsContext>> make_tls_context(const std::string& cert_file, const std::string& key_file) {
  auto cert = certs::read_file(cert_file);
  if (!cert.ok()) {
    return make_error("tls-cert-file: " + cert.message());
  }
  auto key = certs::read_file(key_file);
  if (!key.ok()) {
    return make_error("tls-private-key-file: " + key.message());
  }
  auto t = std::make_shared<TlsContext>();
  auto& ctx = t->ctx;
  ERR_clear_error();
  error_code ec;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                      ssl::context::single_dh_use,
                  ec);
  SSL_CTX* native = ctx.native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  // TLS 1.2: forward secrecy and AEAD only (the set Go's crypto/tls and kube-apiserver prefer).
  if (SSL_CTX_set_cipher_list(native,
                              "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                              "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                              "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305") != 1) {
    return make_error("tls cipher list: " + openssl_reason(ec));
  }
  ctx.use_certificate_chain(net::buffer(cert->data(), cert->size()), ec);
  if (ec) {
    return make_error("tls-cert-file: " + cert_file + ": " + openssl_reason(ec));
  }
  ctx.use_private_key(net::buffer(key->data(), key->size()), ssl::context::pem, ec);
  if (ec) {
    return make_error("tls-private-key-file: " + key_file + ": " + openssl_reason(ec));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return make_error("tls-private-key-file: " + key_file + " does not match tls-cert-file " + cert_file);
  }
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Shared state

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  /// Called from any thread at shutdown: close now if idle, else after the current response.
  virtual void shutdown() = 0;
};

struct Server::State : std::enable_shared_from_this<Server::State> {
  ServerOptions options;
  ReviewHandler handler;
  WebhookMetrics& m = WebhookMetrics::get();
  HealthChecks liveness{"livez"};
  HealthChecks readiness{"readyz"};

  // Owned by pointer so stop() can destroy it (and with it the handlers that keep sessions alive) while
  // the rest of the state still exists.
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>();
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::optional<tcp::acceptor> tls_acceptor;
  std::optional<tcp::acceptor> plain_acceptor;
  uint16_t tls_port = 0;
  uint16_t plain_port = 0;
  std::optional<net::steady_timer> poll_timer;
  std::optional<net::strand<net::io_context::executor_type>> control;

  std::mutex tls_mutex;
  std::shared_ptr<TlsContext> tls;  // guarded by tls_mutex; sessions keep their own copy
  std::atomic<uint64_t> tls_generation{0};
  std::mutex watch_mutex;
  std::optional<certs::FileWatcher> watcher;
  std::vector<certs::FileStamp> last_failed;

  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};
  std::mutex sessions_mutex;
  std::condition_variable sessions_cv;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions;
  bool started = false;
  bool stopped = false;

  explicit State(ServerOptions o, ReviewHandler h) : options(std::move(o)), handler(std::move(h)) {}

  std::shared_ptr<TlsContext> current_tls() {
    std::lock_guard lock(tls_mutex);
    return tls;
  }

  void add_session(SessionBase* p, std::weak_ptr<SessionBase> w) {
    std::lock_guard lock(sessions_mutex);
    sessions.emplace(p, std::move(w));
  }
  void remove_session(SessionBase* p) {
    {
      std::lock_guard lock(sessions_mutex);
      sessions.erase(p);
    }
    sessions_cv.notify_all();
  }

  Status check_certificates();
  void schedule_poll();
  void do_accept(tcp::acceptor& acceptor, bool tls);
};

// ---------------------------------------------------------------------------------------------------------
// Routing: request -> response with no I/O (Beast's handle_request seam)

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response text_response(const Request& req, http::status status, std::string body) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  return res;
}

Response route(Server::State& s, const Request& req, bool tls_listener) {
  const std::string_view target = req.target();
  const auto qpos = target.find('?');
  const std::string_view path = target.substr(0, qpos);
  const std::string_view query = qpos == std::string_view::npos ? std::string_view() : target.substr(qpos + 1);
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  auto count = [&](const char* handler, const Response& r) {
    s.m.requests.with({handler, std::to_string(r.result_int())}).inc();
  };

  if (path == "/mutate" || path == "/webhook") {
    if (!tls_listener) {
      Response r = text_response(req, http::status::not_found,
                                 "404 page not found: " + std::string(path) + " is served on the TLS port only\n");
      count("other", r);
      return r;
    }
    if (req.method() != http::verb::post) {
      Response r = text_response(
          req, http::status::method_not_allowed,
          "405 method not allowed: " + std::string(req.method_string()) + " " + std::string(path) + " (use POST)\n");
      r.set(http::field::allow, "POST");
      count("review", r);
      return r;
    }
    const std::string_view ct = req[http::field::content_type];
    const std::string_view media = trim(ct.substr(0, ct.find(';')));
    if (!iequals(media, "application/json")) {
      Response r = text_response(
          req, http::status::unsupported_media_type,
          "415 unsupported media type: Content-Type \"" + std::string(ct) + "\" (want application/json)\n");
      count("review", r);
      return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ReviewReply reply;
    metrics::Counter* outcome = nullptr;
    try {
      reply = s.handler(req.body());
      const auto index = static_cast<size_t>(reply.outcome);
      outcome = index < std::size(s.m.by_outcome) ? s.m.by_outcome[index] : nullptr;
    } catch (const std::exception& e) {
      // review() is not supposed to throw; if it does, this request fails and the server carries on.
      log::error("review handler threw", {{"error", e.what()}});
      reply.http_status = 500;
      reply.content_type = "text/plain; charset=utf-8";
      reply.body = "500 internal server error: the review failed\n";
    }
    (outcome != nullptr ? *outcome : s.m.reviews.with({"error"})).inc();
    Response r{static_cast<http::status>(reply.http_status), req.version()};
    r.set(http::field::content_type, reply.content_type);
    r.keep_alive(req.keep_alive());
    r.body() = std::move(reply.body);
    s.m.latency_all->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (r.result_int() == 200) {
      s.m.review_200->inc();
      return r;
    }
    count("review", r);
    return r;
  }

  for (auto [prefix, checks] : {std::pair<std::string_view, HealthChecks*>{"/livez", &s.liveness},
                                std::pair<std::string_view, HealthChecks*>{"/healthz", &s.liveness},
                                std::pair<std::string_view, HealthChecks*>{"/readyz", &s.readiness}}) {
    if (path == prefix ||
        (path.size() > prefix.size() + 1 && path.substr(0, prefix.size() + 1) == std::string(prefix) + "/")) {
      if (!get) {
        Response r = text_response(
            req, http::status::method_not_allowed,
            "405 method not allowed: " + std::string(req.method_string()) + " " + std::string(path) + " (use GET)\n");
        r.set(http::field::allow, "GET, HEAD");
        count("health", r);
        return r;
      }
      auto reply = checks->evaluate(path.substr(prefix.size()), query);
      Response r = text_response(req, static_cast<http::status>(reply.status), std::move(reply.body));
      count("health", r);
      return r;
    }
  }

  if (path == "/metrics") {
    if (!get) {
      Response r =
          text_response(req, http::status::method_not_allowed,
                        "405 method not allowed: " + std::string(req.method_string()) + " /metrics (use GET)\n");
      r.set(http::field::allow, "GET, HEAD");
      count("metrics", r);
      return r;
    }
    Response r = text_response(req, http::status::ok, metrics::default_registry().serialize());
    r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    count("metrics", r);
    return r;
  }

  Response r = text_response(req, http::status::not_found, "404 page not found: " + std::string(path) + "\n");
  count("other", r);
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Sessions

/// One connection. `Tls` selects ssl_stream<tcp_stream> (webhook port) or tcp_stream (probe port). All
/// handlers run on the connection's strand; every async operation is under a tcp_stream deadline.
template <bool Tls>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Tls>> {
  using Stream = std::conditional_t<Tls, beast::ssl_stream<beast::tcp_stream>, beast::tcp_stream>;

 public:
  Session(std::shared_ptr<Server::State> state, tcp::socket&& socket, std::shared_ptr<TlsContext> tls)
      : state_(std::move(state)), tls_(std::move(tls)), stream_(make_stream(std::move(socket))) {
    state_->m.open.inc();
  }

  ~Session() override {
    state_->m.open.dec();
    state_->open.fetch_sub(1);
    state_->remove_session(this);
  }

  void run() {
    state_->add_session(this, this->weak_from_this());
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->on_run(); });
  }

  void shutdown() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->closing_ = true;
      if (self->idle_) {
        self->lowest().cancel();
      }
    });
  }

 private:
  Stream make_stream(tcp::socket&& socket) {
    if constexpr (Tls) {
      return Stream(std::move(socket), tls_->ctx);
    } else {
      return Stream(std::move(socket));
    }
  }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
  const ServerOptions& opt() const { return state_->options; }

  void on_run() {
    if constexpr (Tls) {
      lowest().expires_after(opt().handshake_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              beast::bind_front_handler(&Session::on_handshake, this->shared_from_this()));
    } else {
      do_read();
    }
  }

  void on_handshake(error_code ec) {
    if (ec) {
      // Plain HTTP on the TLS port, TLS < 1.2, bad ciphers, scanners: close; others are unaffected.
      state_->m.closed.with({ec == beast::error::timeout ? "timeout" : "tls"}).inc();
      log::info("tls handshake failed", {{"remote", remote()}, {"error", ec.message()}}, 2);
      close_now();
      return;
    }
    do_read();
  }

  std::string remote() {
    error_code ec;
    auto ep = lowest().socket().remote_endpoint(ec);
    return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void do_read() {
    if (closing_) {
      return do_close();
    }
    parser_.emplace();
    parser_->header_limit(opt().max_header_bytes);
    parser_->body_limit(opt().max_body_bytes);
    if (buffer_.size() == 0) {
      // Keep-alive wait: the idle deadline until the first byte of the next request.
      idle_ = true;
      lowest().expires_after(opt().idle_timeout);
      // A plain read of whatever arrives (not http::async_read_some, which keeps reading until the parser
      // makes progress, so half a header would stay under the long idle deadline).
      stream_.async_read_some(buffer_.prepare(16 * 1024),
                              [self = this->shared_from_this()](error_code ec, std::size_t n) {
                                self->buffer_.commit(n);
                                self->on_first_bytes(ec, n);
                              });
    } else {
      on_first_bytes({}, 0);  // a pipelined request is already buffered
    }
  }

  void on_first_bytes(error_code ec, std::size_t) {
    idle_ = false;
    if (ec) {
      return on_read_error(ec, true);
    }
    // From the first byte the whole request must arrive within read_timeout (slow-loris bound).
    lowest().expires_after(opt().read_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, this->shared_from_this()));
  }

  void on_header(error_code ec, std::size_t) {
    if (ec) {
      return on_read_error(ec, false);
    }
    const auto& req = parser_->get();
    if (!parser_->is_done() && iequals(req[http::field::expect], "100-continue")) {
      // curl sends Expect for bodies over 1 MiB; answer at once rather than letting it wait a second.
      continue_res_.emplace(http::status::continue_, req.version());
      http::async_write(stream_, *continue_res_, [self = this->shared_from_this()](error_code e, std::size_t) {
        if (e) {
          return self->on_read_error(e, false);
        }
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, this->shared_from_this()));
  }

  void on_read_error(error_code ec, bool at_start) {
    if ((ec == http::error::end_of_stream || ec == net::error::eof) && at_start) {
      // The client ended the session cleanly (TLS close_notify): answer in kind, so it sees a clean close.
      return do_close();
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == ssl::error::stream_truncated ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      // The client closed (or we are shutting down) between requests: nothing to answer.
      if (!at_start) {
        state_->m.closed.with({"http"}).inc();
      }
      return close_now();
    }
    if (ec == beast::error::timeout) {
      state_->m.closed.with({at_start ? "idle" : "timeout"}).inc();
      log::info("connection deadline", {{"remote", remote()}, {"phase", at_start ? "idle" : "read"}}, 2);
      return close_now();
    }
    if (ec == http::error::body_limit) {
      state_->m.closed.with({"limit"}).inc();
      return send_error(http::status::payload_too_large,
                        "413 request entity too large: the body exceeds the limit of " +
                            std::to_string(opt().max_body_bytes) + " bytes\n");
    }
    if (ec == http::error::header_limit) {
      state_->m.closed.with({"limit"}).inc();
      return send_error(http::status::request_header_fields_too_large,
                        "431 request header fields too large: the header exceeds the limit of " +
                            std::to_string(opt().max_header_bytes) + " bytes\n");
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() ||
        ec == http::error::partial_message) {
      state_->m.closed.with({"http"}).inc();
      if (ec == http::error::partial_message) {
        return close_now();
      }
      return send_error(http::status::bad_request, "400 bad request: malformed HTTP: " + ec.message() + "\n");
    }
    state_->m.closed.with({"io"}).inc();
    log::info("read failed", {{"remote", remote()}, {"error", ec.message()}}, 2);
    close_now();
  }

  void on_read(error_code ec, std::size_t) {
    if (ec) {
      return on_read_error(ec, false);
    }
    Request req = parser_->release();
    Response res;
    try {
      res = route(*state_, req, Tls);
    } catch (const std::exception& e) {
      log::error("request routing threw", {{"error", e.what()}});
      res = text_response(req, http::status::internal_server_error, "500 internal server error\n");
    }
    if (closing_) {
      res.keep_alive(false);
    }
    if (req.method() == http::verb::head) {
      res.content_length(res.body().size());
      res.body().clear();
    } else {
      res.prepare_payload();
    }
    res_ = std::move(res);
    lowest().expires_after(opt().write_timeout);
    http::async_write(stream_, res_, beast::bind_front_handler(&Session::on_write, this->shared_from_this()));
  }

  void on_write(error_code ec, std::size_t) {
    if (ec) {
      state_->m.closed.with({ec == beast::error::timeout ? "timeout" : "io"}).inc();
      return close_now();
    }
    if (!res_.keep_alive()) {
      return do_close();
    }
    res_ = {};
    do_read();
  }

  /// Protocol errors: answer with Connection: close, then a lingering close so the client reads the
  /// answer instead of a reset caused by the unread rest of its request.
  void send_error(http::status status, std::string text) {
    res_ = Response{status, 11};
    res_.set(http::field::content_type, "text/plain; charset=utf-8");
    res_.set(http::field::connection, "close");
    res_.keep_alive(false);
    res_.body() = std::move(text);
    res_.prepare_payload();
    state_->m.requests.with({"other", std::to_string(res_.result_int())}).inc();
    lowest().expires_after(opt().write_timeout);
    http::async_write(stream_, res_, [self = this->shared_from_this()](error_code ec, std::size_t) {
      if (ec) {
        return self->close_now();
      }
      self->linger();
    });
  }

  void linger() {
    error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    lowest().expires_after(std::min<std::chrono::milliseconds>(opt().read_timeout, std::chrono::seconds(2)));
    drain_.resize(16 * 1024);
    drain_some();
  }

  void drain_some() {
    // Raw TCP reads (the TLS session is abandoned): discard until EOF, the deadline, or a byte cap.
    lowest().async_read_some(net::buffer(drain_), [self = this->shared_from_this()](error_code ec, std::size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > 64u * 1024 * 1024) {
        return self->close_now();
      }
      self->drain_some();
    });
  }

  void do_close() {
    if constexpr (Tls) {
      lowest().expires_after(std::chrono::seconds(2));
      stream_.async_shutdown([self = this->shared_from_this()](error_code) { self->close_now(); });
    } else {
      error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      close_now();
    }
  }

  void close_now() {
    error_code ignored;
    lowest().socket().close(ignored);
  }

  std::shared_ptr<Server::State> state_;
  std::shared_ptr<TlsContext> tls_;  // keeps the context this connection was accepted with alive
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> continue_res_;
  Response res_;
  std::vector<char> drain_;
  size_t drained_ = 0;
  bool idle_ = false;
  bool closing_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// State: accept loop and certificate polling

void Server::State::do_accept(tcp::acceptor& acceptor, bool tls_listener) {
  acceptor.async_accept(net::make_strand(*ioc),
                        [this, self = shared_from_this(), &acceptor, tls_listener](error_code ec, tcp::socket socket) {
                          if (ec) {
                            if (ec == net::error::operation_aborted || stopping) {
                              return;
                            }
                            // EMFILE and friends: keep accepting; the client sees a closed connection.
                            log::warning("accept failed", {{"error", ec.message()}});
                          } else if (open.fetch_add(1) >= options.max_connections) {
                            open.fetch_sub(1);
                            m.closed.with({"max-connections"}).inc();
                            error_code ignored;
                            socket.close(ignored);
                          } else {
                            error_code ignored;
                            socket.set_option(tcp::no_delay(true), ignored);
                            if (tls_listener) {
                              std::make_shared<Session<true>>(self, std::move(socket), current_tls())->run();
                            } else {
                              std::make_shared<Session<false>>(self, std::move(socket), nullptr)->run();
                            }
                          }
                          if (!stopping) {
                            do_accept(acceptor, tls_listener);
                          }
                        });
}

Status Server::State::check_certificates() {
  std::lock_guard lock(watch_mutex);
  if (!watcher || !watcher->changed()) {
    return Status::Ok();
  }
  auto stamps = watcher->current();
  auto ctx = make_tls_context(options.tls_cert_file, options.tls_private_key_file);
  if (!ctx.ok()) {
    m.reloads.with({"error"}).inc();
    if (stamps != last_failed) {
      // Logged once per file state: cert-manager writes cert and key separately, so one poll may see a
      // mismatched pair; the next change retries.
      log::warning("new certificate rejected, keeping the old one", {{"error", ctx.message()}});
      last_failed = stamps;
    }
    return ctx.error();
  }
  {
    std::lock_guard tl(tls_mutex);
    tls = std::move(*ctx);
  }
  watcher->accept(std::move(stamps));
  last_failed.clear();
  tls_generation.fetch_add(1);
  m.reloads.with({"success"}).inc();
  log::info("certificate reloaded", {{"cert", options.tls_cert_file}, {"generation", int64_t(tls_generation.load())}});
  return Status::Ok();
}

void Server::State::schedule_poll() {
  if (options.cert_poll_interval.count() <= 0 || stopping) {
    return;
  }
  poll_timer->expires_after(options.cert_poll_interval);
  poll_timer->async_wait([this, self = shared_from_this()](error_code ec) {
    if (ec || stopping) {
      return;
    }
    (void)check_certificates();
    schedule_poll();
  });
}

// ---------------------------------------------------------------------------------------------------------
// Server

ServerOptions ServerOptions::from(const Configuration& c) {
  ServerOptions o;
  o.bind_address = c.webhook.bind_address;
  o.health_bind_address = c.server.health_bind_address;
  o.tls_cert_file = c.webhook.tls_cert_file;
  o.tls_private_key_file = c.webhook.tls_private_key_file;
  o.threads = c.webhook.threads;
  o.max_body_bytes = c.webhook.max_body_bytes;
  o.max_header_bytes = c.webhook.max_header_bytes;
  o.read_timeout = c.webhook.read_timeout;
  o.handshake_timeout = c.webhook.read_timeout;
  o.write_timeout = c.webhook.read_timeout;
  o.idle_timeout = c.webhook.idle_timeout;
  return o;
}

Server::Server(ServerOptions options, ReviewHandler handler)
    : state_(std::make_shared<State>(std::move(options), std::move(handler))) {
  state_->m.build_info.with({state_->options.version}).set(1);
  state_->liveness.add("ping", [] { return Status::Ok(); });
  state_->readiness.add("ping", [] { return Status::Ok(); });
  std::weak_ptr<State> weak = state_;
  state_->readiness.add("tls-certificate", [weak]() -> Status {
    auto s = weak.lock();
    if (s && s->current_tls()) {
      return Status::Ok();
    }
    return make_error("no serving certificate loaded");
  });
  state_->readiness.add("shutdown", [weak]() -> Status {
    auto s = weak.lock();
    if (s && !s->stopping) {
      return Status::Ok();
    }
    return make_error("server is shutting down");
  });
}

Server::~Server() {
  stop();
}

HealthChecks& Server::liveness() {
  return state_->liveness;
}
HealthChecks& Server::readiness() {
  return state_->readiness;
}
uint16_t Server::port() const {
  return state_->tls_port;
}
uint16_t Server::health_port() const {
  return state_->plain_port;
}
uint64_t Server::certificate_generation() const {
  return state_->tls_generation.load();
}
size_t Server::open_connections() const {
  return state_->open.load();
}
Status Server::check_certificates() {
  return state_->check_certificates();
}

Status Server::start() {
  auto& s = *state_;
  if (s.started) {
    return make_error("server already started");
  }
  if (s.options.threads < 1) {
    return make_error("webhook.threads: \"" + std::to_string(s.options.threads) + "\" must be at least 1");
  }
  if (!s.handler) {
    return make_error("webhook server: no review handler");
  }
  // An empty bind address runs the probe listener alone (e.g. `serve --enable-webhook=false` with the
  // scheduler): no TLS listener, no certificate.
  const bool tls_enabled = !s.options.bind_address.empty();
  std::optional<tcp::endpoint> tls_ep;
  if (tls_enabled) {
    auto ep = parse_endpoint("webhook-bind-address", s.options.bind_address);
    if (!ep.ok()) {
      return ep.error();
    }
    tls_ep = *ep;
  }
  std::optional<tcp::endpoint> plain_ep;
  if (!s.options.health_bind_address.empty()) {
    auto p = parse_endpoint("health-bind-address", s.options.health_bind_address);
    if (!p.ok()) {
      return p.error();
    }
    plain_ep = *p;
  }
  if (!tls_ep && !plain_ep) {
    return make_error("webhook-bind-address: \"\" and health-bind-address: \"\": nothing to serve");
  }
  if (tls_enabled) {
    if (s.options.tls_cert_file.empty() || s.options.tls_private_key_file.empty()) {
      return make_error("tls-cert-file: \"" + s.options.tls_cert_file + "\", tls-private-key-file: \"" +
                        s.options.tls_private_key_file + "\": both are required to serve the webhook");
    }
    {
      std::lock_guard lock(s.watch_mutex);
      // Stamps first, then the load: a rotation between the two is seen by the next poll.
      s.watcher.emplace(std::vector<std::string>{s.options.tls_cert_file, s.options.tls_private_key_file},
                        s.options.stat);
    }
    auto ctx = make_tls_context(s.options.tls_cert_file, s.options.tls_private_key_file);
    if (!ctx.ok()) {
      return ctx.error();
    }
    s.tls = std::move(*ctx);
    s.tls_generation = 1;
    s.m.reloads.with({"success"}).inc();
  } else {
    s.readiness.remove("tls-certificate");
  }

  auto listen = [&](std::optional<tcp::acceptor>& acc, const tcp::endpoint& e, const std::string& field,
                    uint16_t& port) -> Status {
    acc.emplace(net::make_strand(*s.ioc));
    error_code ec;
    acc->open(e.protocol(), ec);
    if (!ec) {
      acc->set_option(net::socket_base::reuse_address(true), ec);
    }
    if (!ec) {
      acc->bind(e, ec);
    }
    if (!ec) {
      acc->listen(net::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return make_error(field + ": \"" + e.address().to_string() + ":" + std::to_string(e.port()) +
                        "\": " + ec.message());
    }
    port = acc->local_endpoint(ec).port();
    return Status::Ok();
  };
  if (tls_ep) {
    if (auto st = listen(s.tls_acceptor, *tls_ep, "webhook-bind-address", s.tls_port); !st.ok()) {
      return st;
    }
  }
  if (plain_ep) {
    if (auto st = listen(s.plain_acceptor, *plain_ep, "health-bind-address", s.plain_port); !st.ok()) {
      return st;
    }
  }
  s.started = true;
  s.work.emplace(s.ioc->get_executor());
  s.control.emplace(net::make_strand(*s.ioc));
  s.poll_timer.emplace(*s.control);
  net::dispatch(*s.control, [st = state_] { st->schedule_poll(); });
  if (s.tls_acceptor) {
    s.do_accept(*s.tls_acceptor, true);
  }
  if (s.plain_acceptor) {
    s.do_accept(*s.plain_acceptor, false);
  }
  for (int i = 0; i < s.options.threads; ++i) {
    s.threads.emplace_back([st = state_.get()] {
      // Handlers do not throw by design; a throw here would be a bug, so log it and keep the thread.
      for (;;) {
        try {
          st->ioc->run();
          return;
        } catch (const std::exception& e) {
          log::error("webhook io thread caught an exception", {{"error", e.what()}});
        }
      }
    });
  }
  log::info("webhook serving", {{"address", s.options.bind_address},
                                {"port", int64_t(s.tls_port)},
                                {"threads", s.options.threads},
                                {"healthPort", int64_t(s.plain_port)}});
  return Status::Ok();
}

void Server::stop() {
  auto& s = *state_;
  if (!s.started || s.stopped) {
    return;
  }
  s.stopped = true;
  s.stopping = true;
  std::promise<void> closed;
  net::dispatch(*s.control, [&] {
    s.poll_timer->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  for (auto* acc : {s.tls_acceptor ? &*s.tls_acceptor : nullptr, s.plain_acceptor ? &*s.plain_acceptor : nullptr}) {
    if (acc != nullptr) {
      std::promise<void> done;
      net::dispatch(acc->get_executor(), [&] {
        error_code ignored;
        acc->close(ignored);
        done.set_value();
      });
      done.get_future().wait();
    }
  }
  {
    std::vector<std::shared_ptr<SessionBase>> live;
    {
      std::lock_guard lock(s.sessions_mutex);
      for (auto& [p, w] : s.sessions) {
        if (auto sp = w.lock()) {
          live.push_back(std::move(sp));
        }
      }
    }
    for (auto& sp : live) {
      sp->shutdown();
    }
  }
  {
    std::unique_lock lock(s.sessions_mutex);
    s.sessions_cv.wait_for(lock, s.options.shutdown_grace, [&] { return s.sessions.empty(); });
  }
  s.work.reset();
  s.ioc->stop();
  for (auto& t : s.threads) {
    if (t.joinable()) {
      t.join();
    }
  }
  s.threads.clear();
  // I/O objects go before their io_context; destroying the context then destroys the pending handlers and
  // the sessions they own, which breaks the session -> state reference cycle.
  s.poll_timer.reset();
  s.tls_acceptor.reset();
  s.plain_acceptor.reset();
  s.control.reset();
  s.ioc.reset();
  log::info("webhook stopped");
}

}  // namespace gpuslice::webhook

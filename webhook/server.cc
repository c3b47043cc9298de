// The webhook's HTTPS server: listener -> session (handshake, read with deadlines and limits, route,
// write) on per-connection strands; the TLS context is swapped on certificate rotation.
#include "webhook/server.h"

#include "common/log.h"
#include "common/metrics.h"
#include "webhook/tls_context.h"

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
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

namespace {

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
  metrics::Registry& r = metrics::default_registry();
  metrics::Family<metrics::Counter>& reviews =
      r.counter("gpuslice_webhook_reviews_total", "AdmissionReviews answered, by outcome.", {"outcome"});
  metrics::HistogramFamily& latency =
      r.histogram("gpuslice_webhook_review_duration_seconds",
                  "Time from a complete request to its response being ready, in seconds.", {},
                  metrics::exponential_buckets(0.00005, 2, 16));
  metrics::Family<metrics::Counter>& requests = r.counter(
      "gpuslice_webhook_http_requests_total", "HTTP requests by path class and status code.", {"handler", "code"});
  metrics::Family<metrics::Counter>& closed =
      r.counter("gpuslice_webhook_connections_closed_total",
                "Connections closed abnormally, by reason (timeout, tls, http, limit).", {"reason"});
  metrics::Family<metrics::Counter>& reloads =
      r.counter("gpuslice_webhook_certificate_reloads_total", "Certificate loads, by result.", {"result"});
  metrics::Gauge& open =
      r.gauge("gpuslice_webhook_open_connections", "Open connections on the webhook listeners.").with({});
  metrics::Family<metrics::Gauge>& build_info =
      r.gauge("gpuslice_build_info", "gpuslice build information; always 1.", {"version"});
  // Hot-path children looked up once (Family::with takes a lock and builds a label vector); the latency
  // series exists (count 0) before the first review.
  metrics::Histogram* latency_all = &latency.with({});
  metrics::Counter* review_200 = &requests.with({"review", "200"});
  metrics::Counter* review_error = &reviews.with({"error"});
  metrics::Counter* by_outcome[5] = {};

  static WebhookMetrics& get() {
    static WebhookMetrics* m = [] {
      auto* w = new WebhookMetrics;
      for (auto o : {ReviewOutcome::patched, ReviewOutcome::allowed, ReviewOutcome::skipped, ReviewOutcome::denied,
                     ReviewOutcome::rejected}) {
        w->by_outcome[static_cast<int>(o)] = &w->reviews.with({outcome_name(o)});
      }
      return w;
    }();
    return *m;
  }

  /// One HTTP answer, by handler class and code.
  void count(std::string_view handler, unsigned code) {
    (handler == "review" && code == 200 ? *review_200 : requests.with({std::string(handler), std::to_string(code)}))
        .inc();
  }
};

}  // namespace

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
  Pages pages;

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

  // What each listener serves (router.h): the probe listener has no review route.
  // Pages (the status page) are served on the probe listener only: the TLS port is the API server's.
  Routes plain_routes{.review = nullptr,
                      .liveness = &liveness,
                      .readiness = &readiness,
                      .metrics = [] { return metrics::default_registry().serialize(); },
                      .pages = &pages};
  Routes tls_routes = with_review(plain_routes);

  explicit State(ServerOptions o, ReviewHandler h) : options(std::move(o)), handler(std::move(h)) {}

  Routes with_review(Routes routes) {
    routes.review = [this](std::string_view body) { return timed_review(body); };
    routes.pages = nullptr;
    return routes;
  }

  /// The handler, counted by outcome ("error" when it throws; the router answers 500) and timed.
  ReviewReply timed_review(std::string_view body) {
    const auto t0 = std::chrono::steady_clock::now();
    auto observe = [&] {
      m.latency_all->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    try {
      ReviewReply reply = handler(body);
      const auto index = static_cast<size_t>(reply.outcome);
      (index < std::size(m.by_outcome) ? *m.by_outcome[index] : *m.review_error).inc();
      observe();
      return reply;
    } catch (...) {
      m.review_error->inc();
      observe();
      throw;
    }
  }

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
// Sessions

namespace {

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
    if (!parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
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
      return send_error(body_too_large(opt().max_body_bytes));
    }
    if (ec == http::error::header_limit) {
      state_->m.closed.with({"limit"}).inc();
      return send_error(header_too_large(opt().max_header_bytes));
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() ||
        ec == http::error::partial_message) {
      state_->m.closed.with({"http"}).inc();
      if (ec == http::error::partial_message) {
        return close_now();
      }
      return send_error(malformed_request(ec.message()));
    }
    state_->m.closed.with({"io"}).inc();
    log::info("read failed", {{"remote", remote()}, {"error", ec.message()}}, 2);
    close_now();
  }

  void on_read(error_code ec, std::size_t) {
    if (ec) {
      return on_read_error(ec, false);
    }
    auto [res, handler] = route(Tls ? state_->tls_routes : state_->plain_routes, parser_->release());
    state_->m.count(handler, res.result_int());
    if (closing_) {
      res.keep_alive(false);
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
  void send_error(Response refusal) {
    res_ = std::move(refusal);
    state_->m.count("other", res_.result_int());
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
  o.handshake_timeout = c.webhook.handshake_timeout.value_or(c.webhook.read_timeout);
  o.write_timeout = c.webhook.write_timeout.value_or(c.webhook.read_timeout);
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
Pages& Server::pages() {
  return state_->pages;
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

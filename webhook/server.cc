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
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

namespace gpuslice::webhook {

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

// A connection's I/O objects use its strand's type directly, not the type-erased any_io_executor: each operation
// copies its executor, and the erased copy (with its work-tracking `prefer`) showed in the profile (issue 12 item 5).
using Executor = net::strand<net::io_context::executor_type>;
using Socket = tcp::socket::rebind_executor<Executor>::other;
using TcpStream = beast::basic_stream<tcp, Executor, beast::unlimited_rate_policy>;
using Timer =
    net::basic_waitable_timer<std::chrono::steady_clock, net::wait_traits<std::chrono::steady_clock>, Executor>;

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
  /// Called from any thread when the connection table picked this one to make room: close now, uncounted
  /// (the table's caller counts the reason).
  virtual void evict() = 0;
};

namespace {

/// One listener's connections, for its cap and the per-source limit (server.h). A connection is `pending` from
/// its accept to the end of its TLS handshake (plain listener: to its first whole request), then `idle` while it
/// waits for a request and `busy` from a request's first byte to the end of its response. admit() decides
/// the room for a new connection and returns who must make it; sessions report their phase. Any thread; one
/// mutex, held for a few set operations.
class ConnectionTable {
 public:
  enum class Phase { pending, idle, busy };

  struct Admission {
    bool admitted = false;
    uint64_t id = 0;
    std::shared_ptr<SessionBase> victim;  ///< to evict(), outside the lock; may be null
    const char* reason = nullptr;         ///< why the victim goes: "per-source" or "evicted"
  };

  ConnectionTable(size_t cap, size_t pending_per_source)
      : cap_(std::max<size_t>(cap, 1)), per_source_(std::max<size_t>(pending_per_source, 1)) {}

  /// Room for a new connection from `source`: its oldest pending connection when that source is at its
  /// pending limit; at the cap the oldest pending one anywhere, else the oldest idle one; else refused.
  Admission admit(const net::ip::address& source) {
    Admission a;
    std::lock_guard lock(mutex_);
    auto src = by_source_.find(source);
    if (src != by_source_.end() && src->second.size() >= per_source_) {
      a.victim = take(*src->second.begin());
      a.reason = "per-source";
    } else if (entries_.size() >= cap_) {
      if (!pending_.empty()) {
        a.victim = take(*pending_.begin());
      } else if (idle_head_ != nullptr) {
        a.victim = take(idle_head_->id);
      } else {
        return a;  // every connection is answering a request: the new one waits for none of them
      }
      a.reason = "evicted";
    }
    a.admitted = true;
    a.id = ++next_id_;
    entries_.emplace(a.id, Entry{.id = a.id, .source = source});
    pending_.insert(a.id);
    by_source_[source].insert(a.id);
    return a;
  }

  void attach(uint64_t id, std::weak_ptr<SessionBase> session) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(id); it != entries_.end()) {
      it->second.session = std::move(session);
    }
  }

  /// A session's phase changed. Unknown ids (evicted) are ignored.
  void set_phase(uint64_t id, Phase phase) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.phase == phase) {
      return;
    }
    leave(id, it->second);
    it->second.phase = phase;
    if (phase == Phase::idle) {
      link_idle(it->second);
    }
  }

  void remove(uint64_t id) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(id); it != entries_.end()) {
      leave(id, it->second);
      entries_.erase(it);
    }
  }

  size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  struct Entry {
    uint64_t id = 0;
    net::ip::address source;
    std::weak_ptr<SessionBase> session;
    Phase phase = Phase::pending;
    // The idle list, oldest first, linked through the entries themselves: a connection goes idle and busy once
    // per request, so this costs no allocation (unordered_map nodes do not move on rehash).
    Entry* idle_prev = nullptr;
    Entry* idle_next = nullptr;
  };

  void link_idle(Entry& e) {
    e.idle_prev = idle_tail_;
    e.idle_next = nullptr;
    (idle_tail_ != nullptr ? idle_tail_->idle_next : idle_head_) = &e;
    idle_tail_ = &e;
  }

  void unlink_idle(Entry& e) {
    (e.idle_prev != nullptr ? e.idle_prev->idle_next : idle_head_) = e.idle_next;
    (e.idle_next != nullptr ? e.idle_next->idle_prev : idle_tail_) = e.idle_prev;
    e.idle_prev = e.idle_next = nullptr;
  }

  /// Drops `id` from its phase's index (and its source's pending set).
  void leave(uint64_t id, Entry& e) {
    if (e.phase == Phase::pending) {
      pending_.erase(id);
      if (auto src = by_source_.find(e.source); src != by_source_.end()) {
        src->second.erase(id);
        if (src->second.empty()) {
          by_source_.erase(src);
        }
      }
    } else if (e.phase == Phase::idle) {
      unlink_idle(e);
    }
  }

  /// Removes `id` now (its slot is free at once) and returns its session, if still alive, to evict.
  std::shared_ptr<SessionBase> take(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return nullptr;
    }
    auto session = it->second.session.lock();
    leave(id, it->second);
    entries_.erase(it);
    return session;
  }

  const size_t cap_;
  const size_t per_source_;
  mutable std::mutex mutex_;
  uint64_t next_id_ = 0;  // accept order: the smallest pending id is the oldest
  std::unordered_map<uint64_t, Entry> entries_;
  std::set<uint64_t> pending_;
  Entry* idle_head_ = nullptr;  // the oldest idle connection
  Entry* idle_tail_ = nullptr;
  std::map<net::ip::address, std::set<uint64_t>> by_source_;
};

}  // namespace

struct Server::State : std::enable_shared_from_this<Server::State> {
  ServerOptions options;
  ReviewHandler handler;
  WebhookMetrics& m = WebhookMetrics::get();
  HealthChecks liveness{"livez"};
  HealthChecks readiness{"readyz"};
  Pages pages;

  // One io_context run by every thread: a connection's handlers run on its strand, so a slow review occupies one
  // thread while the others serve every other connection. (One io_context per thread without strands cost
  // fewer instructions, but a review then stalls every connection of its thread: issue 12 item 5.)
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
  // One cap per listener: a flood on the webhook port leaves the probes' listener its own room.
  ConnectionTable tls_table{options.max_connections, options.max_pending_per_source};
  ConnectionTable plain_table{options.max_connections, options.max_pending_per_source};
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
  /// A new connection: room made by the listener's table (server.h), then its session.
  void admit(Socket socket, bool tls_listener);
};

// ---------------------------------------------------------------------------------------------------------
// Sessions

namespace {

/// What plain HTTP on the TLS port is told (with a 400), before the connection is closed.
constexpr std::string_view kPlainHttpRefusal =
    "400 bad request: this port speaks TLS (HTTPS): it serves AdmissionReviews to the Kubernetes API server; "
    "use https://, or the health port for plain-HTTP probes and /metrics\n";

/// One connection. `Tls` selects ssl_stream<tcp_stream> (webhook port) or tcp_stream (probe port). All
/// handlers run on the connection's strand; every async operation is under a deadline. A TLS connection starts
/// as a bare tcp_stream waiting for readability (no TLS state, no buffer) and becomes an ssl_stream when its
/// first byte is a TLS record.
template <bool Tls>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Tls>> {
  using Stream = std::conditional_t<Tls, beast::ssl_stream<TcpStream>, TcpStream>;

 public:
  Session(std::shared_ptr<Server::State> state, ConnectionTable& table, uint64_t id, Socket&& socket)
      : state_(std::move(state)),
        table_(table),
        id_(id),
        executor_(socket.get_executor()),
        accepted_(std::chrono::steady_clock::now()),
        hello_timer_(executor_) {
    if constexpr (Tls) {
      raw_.emplace(std::move(socket));
    } else {
      stream_.emplace(std::move(socket));
    }
    state_->m.open.inc();
  }

  ~Session() override {
    state_->m.open.dec();
    state_->open.fetch_sub(1);
    table_.remove(id_);
    state_->remove_session(this);
  }

  void run() {
    state_->add_session(this, this->weak_from_this());
    table_.attach(id_, this->weak_from_this());
    net::dispatch(executor_, [self = this->shared_from_this()] { self->on_run(); });
  }

  void shutdown() override {
    net::post(executor_, [self = this->shared_from_this()] {
      self->closing_ = true;
      if (self->idle_) {
        self->lowest().cancel();
      } else if (!self->stream_) {
        self->close_now();  // still waiting for its first byte
      }
    });
  }

  void evict() override {
    net::post(executor_, [self = this->shared_from_this()] {
      self->counted_ = true;  // counted by the accept that evicted it
      log::info("connection evicted", {{"remote", self->remote()}}, 2);
      self->close_now();
    });
  }

 private:
  TcpStream& lowest() { return stream_ ? beast::get_lowest_layer(*stream_) : *raw_; }
  const ServerOptions& opt() const { return state_->options; }

  /// Counts the first abnormal close of this connection (later errors of the same close are its echoes).
  void count_closed(const char* reason) {
    if (!counted_) {
      counted_ = true;
      state_->m.closed.with({reason}).inc();
    }
  }

  void on_run() {
    if constexpr (Tls) {
      // Nothing TLS is allocated until a byte arrives, and it must arrive within the ClientHello deadline.
      hello_timer_.expires_at(accepted_ + std::min(opt().client_hello_timeout, opt().handshake_timeout));
      hello_timer_.async_wait([self = this->shared_from_this()](error_code ec) {
        if (!ec && !self->stream_) {
          self->count_closed("client-hello-timeout");
          log::info("connection deadline", {{"remote", self->remote()}, {"phase", "client-hello"}}, 2);
          self->close_now();
        }
      });
      wait_first_byte();
    } else {
      do_read();
    }
  }

  void wait_first_byte() {
    raw_->socket().async_wait(tcp::socket::wait_read,
                              [self = this->shared_from_this()](error_code ec) { self->on_readable(ec); });
  }

  void on_readable(error_code ec) {
    if (ec) {
      return close_now();  // the ClientHello deadline, an eviction, shutdown
    }
    unsigned char first = 0;
    error_code pe;
    raw_->socket().non_blocking(true, pe);
    const size_t n = pe ? 0 : raw_->socket().receive(net::buffer(&first, 1), tcp::socket::message_peek, pe);
    if (pe == net::error::would_block) {
      return wait_first_byte();
    }
    if (pe || n == 0) {
      // Closed before a byte (port scanners, TCP health checks): the handshake never began.
      count_closed("tls");
      return close_now();
    }
    hello_timer_.cancel();
    if ((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z')) {
      // A TLS record starts with its content type (22, handshake; Beast's detect_ssl, boost/beast/core/detect_ssl.hpp,
      // reads the same byte into a buffer, here it is only peeked); "GET", "POST", ...: someone speaks plain HTTP
      // to the TLS port. Say so in plain HTTP instead of a handshake failure the client cannot read.
      return refuse_plain_http();
    }
    tls_ = state_->current_tls();
    if (!tls_) {
      count_closed("tls");
      return close_now();
    }
    if constexpr (Tls) {
      stream_.emplace(std::move(*raw_), tls_->ctx);
      raw_.reset();
      lowest().expires_at(accepted_ + opt().handshake_timeout);
      stream_->async_handshake(ssl::stream_base::server,
                               beast::bind_front_handler(&Session::on_handshake, this->shared_from_this()));
    }
  }

  void refuse_plain_http() {
    count_closed("plain-http");
    log::info("plain HTTP on the TLS port", {{"remote", remote()}}, 2);
    plain_refusal_ =
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        "Content-Length: " +
        std::to_string(kPlainHttpRefusal.size()) + "\r\n\r\n" + std::string(kPlainHttpRefusal);
    lowest().expires_after(opt().write_timeout);
    net::async_write(*raw_, net::buffer(plain_refusal_), [self = this->shared_from_this()](error_code ec, std::size_t) {
      if (ec) {
        return self->close_now();
      }
      self->linger();
    });
  }

  void on_handshake(error_code ec) {
    if (ec) {
      // TLS < 1.2, bad ciphers, scanners: close; others are unaffected.
      count_closed(ec == beast::error::timeout ? "timeout" : "tls");
      log::info("tls handshake failed", {{"remote", remote()}, {"error", ec.message()}}, 2);
      close_now();
      return;
    }
    established_ = true;
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
      if (established_) {
        table_.set_phase(id_, ConnectionTable::Phase::idle);
      }
      lowest().expires_after(opt().idle_timeout);
      // A plain read of whatever arrives (not http::async_read_some, which keeps reading until the parser
      // makes progress, so half a header would stay under the long idle deadline).
      stream_->async_read_some(buffer_.prepare(16 * 1024),
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
    if (established_) {
      table_.set_phase(id_, ConnectionTable::Phase::busy);
    }
    // From the first byte the whole request must arrive within read_timeout (slow-loris bound).
    lowest().expires_after(opt().read_timeout);
    http::async_read_header(*stream_, buffer_, *parser_,
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
      http::async_write(*stream_, *continue_res_, [self = this->shared_from_this()](error_code e, std::size_t) {
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
    http::async_read(*stream_, buffer_, *parser_,
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
        count_closed("http");
      }
      return close_now();
    }
    if (ec == beast::error::timeout) {
      count_closed(at_start ? "idle" : "timeout");
      log::info("connection deadline", {{"remote", remote()}, {"phase", at_start ? "idle" : "read"}}, 2);
      return close_now();
    }
    if (ec == http::error::body_limit) {
      count_closed("limit");
      return send_error(body_too_large(opt().max_body_bytes));
    }
    if (ec == http::error::header_limit) {
      count_closed("limit");
      return send_error(header_too_large(opt().max_header_bytes));
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() ||
        ec == http::error::partial_message) {
      count_closed("http");
      if (ec == http::error::partial_message) {
        return close_now();
      }
      return send_error(malformed_request(ec.message()));
    }
    count_closed("io");
    log::info("read failed", {{"remote", remote()}, {"error", ec.message()}}, 2);
    close_now();
  }

  void on_read(error_code ec, std::size_t) {
    if (ec) {
      return on_read_error(ec, false);
    }
    if (!established_) {
      established_ = true;  // plain listener: its first whole request
      table_.set_phase(id_, ConnectionTable::Phase::busy);
    }
    auto [res, handler] = route(Tls ? state_->tls_routes : state_->plain_routes, parser_->release());
    state_->m.count(handler, res.result_int());
    if (closing_) {
      res.keep_alive(false);
    }
    res_ = std::move(res);
    lowest().expires_after(opt().write_timeout);
    http::async_write(*stream_, res_, beast::bind_front_handler(&Session::on_write, this->shared_from_this()));
  }

  void on_write(error_code ec, std::size_t) {
    if (ec) {
      count_closed(ec == beast::error::timeout ? "timeout" : "io");
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
    http::async_write(*stream_, res_, [self = this->shared_from_this()](error_code ec, std::size_t) {
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
      stream_->async_shutdown([self = this->shared_from_this()](error_code) { self->close_now(); });
    } else {
      error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      close_now();
    }
  }

  void close_now() {
    error_code ignored;
    lowest().socket().close(ignored);
    hello_timer_.cancel();
  }

  std::shared_ptr<Server::State> state_;
  ConnectionTable& table_;  // the listener's; outlives the session (State owns it)
  const uint64_t id_;
  Executor executor_;  // the connection's strand
  const std::chrono::steady_clock::time_point accepted_;
  Timer hello_timer_;                // TLS: accept to the first byte
  std::shared_ptr<TlsContext> tls_;  // keeps the context this connection's handshake used alive
  std::optional<TcpStream> raw_;     // TLS: the bare connection until its first byte
  std::optional<Stream> stream_;     // TLS: from the first byte; plain: from the accept
  std::string plain_refusal_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> continue_res_;
  Response res_;
  std::vector<char> drain_;
  size_t drained_ = 0;
  bool idle_ = false;
  bool closing_ = false;
  bool established_ = false;  // handshake done (TLS) or a first whole request read (plain)
  bool counted_ = false;      // an abnormal close was counted (or the eviction will be)
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// State: accept loop and certificate polling

void Server::State::do_accept(tcp::acceptor& acceptor, bool tls_listener) {
  acceptor.async_accept(net::make_strand(ioc->get_executor()),
                        [this, self = shared_from_this(), &acceptor, tls_listener](error_code ec, Socket socket) {
                          if (ec) {
                            if (ec == net::error::operation_aborted || stopping) {
                              return;
                            }
                            // EMFILE and friends: keep accepting; the client sees a closed connection.
                            log::warning("accept failed", {{"error", ec.message()}});
                          } else {
                            admit(std::move(socket), tls_listener);
                          }
                          if (!stopping) {
                            do_accept(acceptor, tls_listener);
                          }
                        });
}

void Server::State::admit(Socket socket, bool tls_listener) {
  error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) {
    return;  // gone already
  }
  ConnectionTable& table = tls_listener ? tls_table : plain_table;
  auto admission = table.admit(peer.address());
  if (admission.victim) {
    m.closed.with({admission.reason}).inc();
    admission.victim->evict();
  }
  if (!admission.admitted) {
    // Every connection of this listener is in the middle of a request: none is older than its deadlines.
    m.closed.with({"max-connections"}).inc();
    error_code ignored;
    socket.close(ignored);
    return;
  }
  open.fetch_add(1);
  socket.set_option(tcp::no_delay(true), ec);
  if (tls_listener) {
    std::make_shared<Session<true>>(shared_from_this(), table, admission.id, std::move(socket))->run();
  } else {
    std::make_shared<Session<false>>(shared_from_this(), table, admission.id, std::move(socket))->run();
  }
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
  o.client_hello_timeout = c.webhook.client_hello_timeout;
  o.max_connections = c.webhook.max_connections;
  o.max_pending_per_source = c.webhook.max_pending_per_source;
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

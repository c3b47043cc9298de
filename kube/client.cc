#include "kube/client.h"

#include "common/log.h"
#include "common/metrics.h"
#include "kube/framer.h"

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <deque>

namespace gpuslice::kube {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
namespace json = boost::json;
using asio::awaitable;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

struct KubeMetrics {
  metrics::Family<metrics::Counter>& requests;
  metrics::HistogramFamily& duration;
  metrics::HistogramFamily& throttle;
  metrics::Family<metrics::Counter>& watch_events;
  metrics::Family<metrics::Counter>& connections;

  static KubeMetrics& get() {
    static KubeMetrics m{
        metrics::default_registry().counter("gpuslice_kube_requests_total",
                                            "Kubernetes API requests by verb and result (HTTP code or client reason)",
                                            {"verb", "code"}),
        metrics::default_registry().histogram("gpuslice_kube_request_duration_seconds",
                                              "Kubernetes API request latency (rate-limiter wait excluded)", {"verb"},
                                              metrics::exponential_buckets(0.001, 2, 15)),
        metrics::default_registry().histogram("gpuslice_kube_rate_limiter_wait_seconds",
                                              "Time requests waited for the client-side QPS/burst limiter", {},
                                              metrics::exponential_buckets(0.001, 2, 15)),
        metrics::default_registry().counter("gpuslice_kube_watch_events_total", "Watch events received by type",
                                            {"type"}),
        metrics::default_registry().counter("gpuslice_kube_connections_opened_total",
                                            "Connections opened to the API server (TCP, and the TLS handshake on "
                                            "https), by client (its user agent); a pool that is too small shows "
                                            "here as a new handshake per request",
                                            {"client"}),
    };
    return m;
  }
};

http::verb to_verb(HttpMethod m) {
  switch (m) {
    case HttpMethod::get:
      return http::verb::get;
    case HttpMethod::post:
      return http::verb::post;
    case HttpMethod::put:
      return http::verb::put;
    case HttpMethod::patch:
      return http::verb::patch;
    case HttpMethod::del:
      return http::verb::delete_;
  }
  return http::verb::get;
}

ApiError transport_error(const Request& req, const char* stage, const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) {
    return client_error(kReasonTimeout,
                        fmt::format("{} {}: deadline exceeded during {}", method_name(req.method), req.path, stage));
  }
  if (ec == http::error::body_limit) {
    return client_error(kReasonTooLarge,
                        fmt::format("{} {}: response body over the limit", method_name(req.method), req.path));
  }
  return client_error(kReasonTransport,
                      fmt::format("{} {}: {} failed: {}", method_name(req.method), req.path, stage, ec.message()));
}

std::string result_label(const ApiResult<Response>& r) {
  if (r) {
    return std::to_string(r->status);
  }
  return r.error().code != 0 ? std::to_string(r.error().code) : r.error().reason;
}
}  // namespace

const char* method_name(HttpMethod m) {
  switch (m) {
    case HttpMethod::get:
      return "GET";
    case HttpMethod::post:
      return "POST";
    case HttpMethod::put:
      return "PUT";
    case HttpMethod::patch:
      return "PATCH";
    case HttpMethod::del:
      return "DELETE";
  }
  return "?";
}

const char* patch_content_type(PatchType t) {
  switch (t) {
    case PatchType::json:
      return "application/json-patch+json";
    case PatchType::merge:
      return "application/merge-patch+json";
    case PatchType::strategic_merge:
      return "application/strategic-merge-patch+json";
    case PatchType::apply:
      return "application/apply-patch+yaml";
  }
  return "application/json";
}

const char* watch_end_name(WatchEnd e) {
  switch (e) {
    case WatchEnd::closed:
      return "closed";
    case WatchEnd::idle:
      return "idle";
    case WatchEnd::gone:
      return "gone";
    case WatchEnd::stopped:
      return "stopped";
    case WatchEnd::cancelled:
      return "cancelled";
  }
  return "?";
}

void Cancellation::cancel() {
  cancelled_ = true;
  if (hook_) {
    auto hook = std::move(hook_);
    hook_ = nullptr;
    hook();
  }
}

void Cancellation::set_hook(std::function<void()> hook) {
  hook_ = std::move(hook);
  if (cancelled_ && hook_) {
    auto h = std::move(hook_);
    hook_ = nullptr;
    h();
  }
}

// ---- connections --------------------------------------------------------------------------------------------

namespace {
struct Connection {
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  std::unique_ptr<beast::tcp_stream> plain;
  beast::flat_buffer buffer;
  uint64_t generation = 0;  // the TLS context generation it was made with

  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  void close() {
    boost::system::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }
};
}  // namespace

struct Client::Impl {
  ServerUrl url;
  Authenticator auth;
  TokenBucket bucket;
  std::unique_ptr<ssl::context> tls_ctx;
  uint64_t generation = 0;
  ClientCertificate cert;
  std::deque<std::unique_ptr<Connection>> idle;
  std::size_t opened = 0;

  Impl(ServerUrl u, Authenticator a, TokenBucket b) : url(std::move(u)), auth(std::move(a)), bucket(b) {}
};

namespace {

Result<std::unique_ptr<ssl::context>> make_tls_context(const RestConfig& config, const ClientCertificate& cert) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  if (config.insecure_skip_tls_verify) {
    ctx->set_verify_mode(ssl::verify_none, ec);
  } else {
    ctx->set_verify_mode(ssl::verify_peer, ec);
    if (config.ca_pem.empty()) {
      ctx->set_default_verify_paths(ec);
      if (ec) {
        return make_error(fmt::format("system CA roots: {}", ec.message()));
      }
    } else {
      ctx->add_certificate_authority(asio::buffer(config.ca_pem), ec);
      if (ec) {
        return make_error(fmt::format("certificate-authority{}: not a valid PEM certificate ({})",
                                      config.ca_file.empty() ? "-data" : " " + config.ca_file, ec.message()));
      }
    }
  }
  if (!cert.cert_pem.empty()) {
    ctx->use_certificate_chain(asio::buffer(cert.cert_pem), ec);
    if (ec) {
      return make_error(fmt::format("client-certificate{}: not a valid PEM certificate ({})",
                                    config.client_cert_file.empty() ? "" : " " + config.client_cert_file,
                                    ec.message()));
    }
    ctx->use_private_key(asio::buffer(cert.key_pem), ssl::context::pem, ec);
    if (ec) {
      return make_error(fmt::format("client-key{}: not a valid PEM private key matching the certificate ({})",
                                    config.client_key_file.empty() ? "" : " " + config.client_key_file, ec.message()));
    }
  }
  return ctx;
}

// Resolves with a deadline: the resolver has no timeout of its own, so a timer cancels it.
awaitable<std::pair<boost::system::error_code, tcp::resolver::results_type>> resolve(const ServerUrl& url,
                                                                                     steady::time_point deadline) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  asio::steady_timer timer(ex);
  timer.expires_at(deadline);
  bool expired = false;
  timer.async_wait([&resolver, &expired](boost::system::error_code ec) {
    if (!ec) {
      expired = true;
      resolver.cancel();
    }
  });
  auto [ec, results] = co_await resolver.async_resolve(url.host, url.port, kTuple);
  timer.cancel();
  if (expired) {
    ec = beast::error::timeout;
  }
  // Let the cancelled timer handler run before the frame (and the references it holds) goes away.
  co_await asio::post(ex, asio::use_awaitable);
  co_return std::make_pair(ec, std::move(results));
}

template <class Stream>
awaitable<boost::system::error_code> write_read(Stream& stream, Connection& conn, steady::time_point deadline,
                                                http::request<http::string_body>& req,
                                                http::response_parser<http::string_body>& parser, bool& read_any) {
  conn.lowest().expires_at(deadline);
  auto [wec, wn] = co_await http::async_write(stream, req, kTuple);
  (void)wn;
  if (wec) {
    co_return wec;
  }
  conn.lowest().expires_at(deadline);
  auto [hec, hn] = co_await http::async_read_header(stream, conn.buffer, parser, kTuple);
  read_any = hn > 0 || parser.got_some();
  if (hec) {
    co_return hec;
  }
  conn.lowest().expires_at(deadline);
  auto [rec, rn] = co_await http::async_read(stream, conn.buffer, parser, kTuple);
  (void)rn;
  co_return rec;
}

}  // namespace

bool is_stale_connection_error(const boost::system::error_code& ec) {
  // ECONNABORTED and ENETRESET are what Linux reports for an idle pooled connection the kernel tore down under
  // us (the API server killed or restarted, the path cut): as stale as a reset or EOF. ETIMEDOUT (asio's
  // timed_out, never the request's own deadline, which is beast::error::timeout) is the kernel giving up on a
  // silent peer: keepalive probes unanswered, or TCP_USER_TIMEOUT on unacknowledged data (tcp(7)); the error is
  // the same for both. As for a reset, the request is retried only when no response byte had arrived.
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::connection_aborted || ec == asio::error::network_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::timed_out || ec == ssl::error::stream_truncated;
}

boost::system::error_code set_tcp_keepalive(int fd, const TcpKeepalive& k) {
  auto set = [fd](int level, int name, int value) -> boost::system::error_code {
    if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
      return {errno, boost::system::system_category()};
    }
    return {};
  };
  auto seconds = [](std::chrono::seconds s) { return static_cast<int>(std::max<std::int64_t>(s.count(), 1)); };
  boost::system::error_code ec = set(SOL_SOCKET, SO_KEEPALIVE, k.enabled ? 1 : 0);
  if (ec || !k.enabled) {
    return ec;
  }
  if ((ec = set(IPPROTO_TCP, TCP_KEEPIDLE, seconds(k.idle))) ||
      (ec = set(IPPROTO_TCP, TCP_KEEPINTVL, seconds(k.interval))) ||
      (ec = set(IPPROTO_TCP, TCP_KEEPCNT, std::max(k.count, 1)))) {
    return ec;
  }
#if defined(TCP_USER_TIMEOUT)
  if (k.user_timeout.count() > 0) {
    ec = set(IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(k.user_timeout.count()));
  }
#endif
  return ec;
}

// ---- Client -------------------------------------------------------------------------------------------------

Client::Client(executor_type executor, RestConfig config, ClientOptions options, Environment env)
    : executor_(std::move(executor)), config_(std::move(config)), options_(std::move(options)) {
  (void)env;
}

Client::~Client() {
  if (impl_) {
    close_idle();
  }
}

Result<std::shared_ptr<Client>> Client::create(executor_type executor, RestConfig config, ClientOptions options,
                                               Environment env) {
  auto url = parse_server_url(config.server, options.allow_http);
  if (!url) {
    return url.error();
  }
  Authenticator auth(config, env, options.auth);
  // Static certificates are checked now so a bad PEM fails at start-up; exec certificates on first use.
  ClientCertificate cert;
  if (!config.client_cert_pem.empty()) {
    cert = {config.client_cert_pem, config.client_key_pem};
  }
  std::unique_ptr<ssl::context> ctx;
  if (url->scheme == "https") {
    auto c = make_tls_context(config, cert);
    if (!c) {
      return make_error(fmt::format("kube client ({}): {}", config.source, c.message()));
    }
    ctx = std::move(*c);
  }
  const auto now = options.steady_now();
  TokenBucket bucket(options.qps, options.burst, now);
  std::shared_ptr<Client> client(new Client(std::move(executor), config, options, env));
  client->impl_ = std::make_unique<Impl>(std::move(*url), std::move(auth), bucket);
  client->impl_->tls_ctx = std::move(ctx);
  client->impl_->cert = std::move(cert);
  return client;
}

void Client::close_idle() {
  for (auto& c : impl_->idle) {
    c->close();
  }
  impl_->idle.clear();
}

std::size_t Client::idle_connections() const {
  return impl_->idle.size();
}
std::size_t Client::connections_opened() const {
  return impl_->opened;
}

namespace {
// Connects a fresh connection (TCP + TLS handshake with SNI and name verification) before the deadline.
awaitable<ApiResult<std::unique_ptr<Connection>>> connect(Client::Impl& impl, const RestConfig& config,
                                                          const TcpKeepalive& keepalive, const Request& req,
                                                          steady::time_point deadline) {
  auto ex = co_await asio::this_coro::executor;
  auto [rec, results] = co_await resolve(impl.url, deadline);
  if (rec) {
    co_return transport_error(req, "resolve", rec);
  }
  auto conn = std::make_unique<Connection>();
  conn->generation = impl.generation;
  if (impl.tls_ctx) {
    conn->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ex, *impl.tls_ctx);
  } else {
    conn->plain = std::make_unique<beast::tcp_stream>(ex);
  }
  conn->lowest().expires_at(deadline);
  auto [cec, ep] = co_await conn->lowest().async_connect(results, kTuple);
  (void)ep;
  if (cec) {
    co_return transport_error(req, "connect", cec);
  }
  ++impl.opened;
  if (auto kec = set_tcp_keepalive(conn->lowest().socket().native_handle(), keepalive)) {
    // The connection works without it; a dead peer is then found by the request deadlines alone.
    log::warning("kube: TCP keepalive not set", {{"server", impl.url.host}, {"error", kec.message()}});
  }
  if (conn->tls) {
    const std::string& name = config.tls_server_name.empty() ? impl.url.host : config.tls_server_name;
    // SNI only for names: RFC 6066 forbids IP literals in server_name.
    if (!config.tls_server_name.empty() || !impl.url.host_is_ip) {
      if (!SSL_set_tlsext_host_name(conn->tls->native_handle(), name.c_str())) {
        co_return client_error(kReasonTransport,
                               fmt::format("{} {}: cannot set SNI \"{}\"", method_name(req.method), req.path, name));
      }
    }
    if (!config.insecure_skip_tls_verify) {
      // host_name_verification checks IP SANs for IP literals (X509_check_ip_asc) and DNS SANs otherwise.
      conn->tls->set_verify_callback(ssl::host_name_verification(name));
    }
    conn->lowest().expires_at(deadline);
    auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client, kTuple);
    if (hec) {
      co_return transport_error(req, "TLS handshake", hec);
    }
  }
  co_return std::move(conn);
}
}  // namespace

awaitable<ApiResult<Response>> Client::send(Request request) {
  auto self = shared_from_this();  // keeps the client alive across suspensions
  Impl& impl = *impl_;
  auto& m = KubeMetrics::get();
  const char* verb = method_name(request.method);
  const auto timeout = request.timeout.value_or(options_.timeout);
  const auto start = steady::now();
  const auto deadline = start + timeout;

  // Client-side QPS/burst: reserve a token, sleep for the delay (never past the deadline).
  const auto wait = impl.bucket.reserve(options_.steady_now());
  if (wait > steady::duration::zero()) {
    m.throttle.with({}).observe(std::chrono::duration<double>(wait).count());
    if (start + wait > deadline) {
      ApiResult<Response> r = client_error(
          kReasonTimeout, fmt::format("{} {}: the client rate limit ({} qps, burst {}) would delay past the deadline",
                                      verb, request.path, options_.qps, options_.burst));
      m.requests.with({verb, result_label(r)}).inc();
      co_return r;
    }
    asio::steady_timer timer(executor_);
    timer.expires_after(wait);
    co_await timer.async_wait(kTuple);
  }
  const auto sent_at = steady::now();

  ApiResult<Response> result = client_error(kReasonTransport, "not sent");
  for (int auth_attempt = 0; auth_attempt < 2; ++auth_attempt) {
    auto token = impl.auth.bearer_token();
    if (!token) {
      result = client_error(kReasonAuth, fmt::format("{} {}: {}", verb, request.path, token.message()));
      break;
    }
    auto cert = impl.auth.client_certificate();
    if (!cert) {
      result = client_error(kReasonAuth, fmt::format("{} {}: {}", verb, request.path, cert.message()));
      break;
    }
    if (impl.url.scheme == "https" && !(*cert == impl.cert)) {
      // The exec plugin handed out a new client certificate: new TLS context, and drop connections made with
      // the old one.
      auto ctx = make_tls_context(config_, *cert);
      if (!ctx) {
        result = client_error(kReasonAuth, fmt::format("{} {}: {}", verb, request.path, ctx.message()));
        break;
      }
      impl.tls_ctx = std::move(*ctx);
      impl.cert = *cert;
      ++impl.generation;
      close_idle();
    }

    http::request<http::string_body> req{to_verb(request.method), impl.url.base_path + request.path, 11};
    req.set(http::field::host, impl.url.host_header());
    req.set(http::field::user_agent, options_.user_agent);
    req.set(http::field::accept, "application/json");
    if (!token->empty()) {
      req.set(http::field::authorization, "Bearer " + *token);
    }
    if (!request.body.empty()) {
      req.set(http::field::content_type, request.content_type.empty() ? "application/json" : request.content_type);
      req.body() = request.body;
    }
    req.keep_alive(true);
    req.prepare_payload();

    // A pooled connection may have been closed by the server meanwhile; one retry on a fresh connection when
    // it fails before any response byte arrived.
    for (int conn_attempt = 0; conn_attempt < 2; ++conn_attempt) {
      std::unique_ptr<Connection> conn;
      bool reused = false;
      while (!impl.idle.empty() && !conn) {
        conn = std::move(impl.idle.back());
        impl.idle.pop_back();
        if (conn->generation != impl.generation) {
          conn->close();
          conn.reset();
        }
      }
      reused = conn != nullptr;
      if (!conn) {
        auto c = co_await connect(impl, config_, options_.keepalive, request, deadline);
        if (!c) {
          result = c.error();
          break;
        }
        m.connections.with({options_.user_agent}).inc();
        conn = std::move(*c);
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(options_.max_response_bytes);
      parser.header_limit(64 * 1024);
      bool read_any = false;
      boost::system::error_code ec;
      if (conn->tls) {
        ec = co_await write_read(*conn->tls, *conn, deadline, req, parser, read_any);
      } else {
        ec = co_await write_read(*conn->plain, *conn, deadline, req, parser, read_any);
      }
      if (ec) {
        conn->close();
        if (reused && !read_any && is_stale_connection_error(ec) && steady::now() < deadline) {
          // The peer went away: the other pooled connections went to it too. The retry connects afresh.
          close_idle();
          continue;
        }
        result = transport_error(request, "exchange", ec);
        break;
      }
      auto& res = parser.get();
      Response out;
      out.status = static_cast<int>(res.result_int());
      out.content_type = std::string(res[http::field::content_type]);
      out.body = std::move(res.body());
      if (res.keep_alive() && impl.idle.size() < options_.max_idle_connections) {
        conn->lowest().expires_never();
        impl.idle.push_back(std::move(conn));
      } else {
        conn->close();
      }
      if (out.status >= 200 && out.status < 300) {
        result = std::move(out);
      } else {
        result = decode_status_error(out.status, out.body);
      }
      break;
    }
    if (!result && result.error().is_unauthorized() && auth_attempt == 0 && impl.auth.invalidate()) {
      log::info("kube: 401, refreshing credentials and retrying", {{"verb", verb}, {"path", request.path}}, 2);
      continue;
    }
    break;
  }
  m.requests.with({verb, result_label(result)}).inc();
  m.duration.with({verb}).observe(std::chrono::duration<double>(steady::now() - sent_at).count());
  if (log::enabled(5)) {
    log::info("kube request", {{"verb", verb}, {"path", request.path}, {"result", result_label(result)}}, 5);
  }
  co_return result;
}

namespace {
ApiResult<json::object> parse_object(const Request& req, const ApiResult<Response>& r) {
  if (!r) {
    return r.error();
  }
  boost::system::error_code ec;
  json::value v = json::parse(r->body, ec);
  if (ec || !v.is_object()) {
    return client_error(kReasonDecode, fmt::format("{} {}: response is not a JSON object ({})", method_name(req.method),
                                                   req.path, ec ? ec.message() : std::string("not an object")));
  }
  return std::move(v.get_object());
}
}  // namespace

awaitable<ApiResult<json::object>> Client::get(std::string path) {
  Request req{HttpMethod::get, std::move(path), {}, {}, {}};
  auto r = co_await send(req);
  co_return parse_object(req, r);
}

awaitable<ApiResult<json::object>> Client::create(std::string path, const json::value& object) {
  Request req{HttpMethod::post, std::move(path), json::serialize(object), "application/json", {}};
  auto r = co_await send(req);
  co_return parse_object(req, r);
}

awaitable<ApiResult<json::object>> Client::replace(std::string path, const json::value& object) {
  Request req{HttpMethod::put, std::move(path), json::serialize(object), "application/json", {}};
  auto r = co_await send(req);
  co_return parse_object(req, r);
}

awaitable<ApiResult<json::object>> Client::patch(std::string path, PatchType type, std::string patch,
                                                 std::string field_manager) {
  if (!field_manager.empty()) {
    path +=
        (path.find('?') == std::string::npos ? "?" : "&") + std::string("fieldManager=") + query_escape(field_manager);
  }
  Request req{HttpMethod::patch, std::move(path), std::move(patch), patch_content_type(type), {}};
  auto r = co_await send(req);
  co_return parse_object(req, r);
}

awaitable<ApiStatus> Client::remove(std::string path, DeleteOptions options) {
  Request req{HttpMethod::del, std::move(path), delete_options_body(options), "application/json", {}};
  auto r = co_await send(req);
  if (!r) {
    co_return r.error();
  }
  co_return ApiStatus{};
}

awaitable<ApiResult<ListPage>> Client::list_page(std::string path, ListOptions options) {
  Request req{HttpMethod::get, path + build_query(list_query(options)), {}, {}, {}};
  auto r = co_await send(req);
  if (!r) {
    co_return r.error();
  }
  auto page = decode_list(r->body);
  if (!page) {
    co_return client_error(kReasonDecode, fmt::format("GET {}: {}", req.path, page.message()));
  }
  co_return std::move(*page);
}

awaitable<ApiResult<std::string>> Client::list_pages(std::string path, ListOptions options, ListPageHandler on_page) {
  auto self = shared_from_this();
  bool restarted = false;
  bool first = true;
  std::string resource_version;
  ListOptions page_options = options;
  for (;;) {
    auto page = co_await list_page(path, page_options);
    if (!page) {
      // The snapshot behind a continue token expired (410): start over once from a fresh first page.
      if (page.error().is_gone() && !page_options.continue_token.empty() && !restarted) {
        restarted = true;
        first = true;
        resource_version.clear();
        page_options = options;
        continue;
      }
      co_return page.error();
    }
    if (first) {
      resource_version = page->resource_version;
    }
    if (options.limit <= 0) {
      page->continue_token.clear();  // no paging asked for: whatever the server says, this is the whole list
    }
    const bool last = page->continue_token.empty();
    std::string next = page->continue_token;
    on_page(*page, first);
    first = false;
    if (last) {
      break;
    }
    page_options.continue_token = std::move(next);
    // resourceVersion must not be combined with continue (the token encodes the snapshot).
    page_options.resource_version.clear();
    page_options.resource_version_match.clear();
  }
  co_return resource_version;
}

awaitable<ApiResult<ListPage>> Client::list(std::string path, ListOptions options) {
  ListPage all;
  // A named handler, not a temporary inside the co_await expression (g++-12, see client.h).
  ListPageHandler collect = [&all](ListPage& page, bool first) {
    if (first) {
      all = ListPage{};
      all.kind = page.kind;
    }
    for (auto& item : page.items) {
      all.items.push_back(std::move(item));
    }
  };
  auto rv = co_await list_pages(std::move(path), std::move(options), std::move(collect));
  if (!rv) {
    co_return rv.error();
  }
  all.resource_version = std::move(*rv);
  co_return all;
}

namespace {

template <class Stream>
awaitable<ApiResult<WatchResult>> run_watch(Stream& stream, Connection& conn, const Request& request,
                                            steady::time_point deadline, std::chrono::milliseconds idle_timeout,
                                            std::size_t max_line, http::request<http::string_body>& req,
                                            const WatchHandler& handler,
                                            const std::shared_ptr<Cancellation>& cancellation) {
  auto& m = KubeMetrics::get();
  WatchResult out;
  auto cancelled = [&] { return cancellation && cancellation->cancelled(); };
  // Each read (and the write) may take until the watch's deadline, or until the idle deadline when that comes
  // first: the stream's timer closes the connection then, and a timeout that was the idle one ends the watch
  // with WatchEnd::idle instead of an error.
  bool idle_bound = false;
  auto arm = [&] {
    auto expiry = deadline;
    if (idle_timeout.count() > 0) {
      expiry = std::min(deadline, steady::now() + idle_timeout);
    }
    idle_bound = expiry < deadline;
    conn.lowest().expires_at(expiry);
  };
  auto idled = [&](const boost::system::error_code& ec) { return ec == beast::error::timeout && idle_bound; };
  arm();
  auto [wec, wn] = co_await http::async_write(stream, req, kTuple);
  (void)wn;
  if (wec) {
    if (cancelled()) {
      out.end = WatchEnd::cancelled;
      co_return out;
    }
    if (idled(wec)) {
      out.end = WatchEnd::idle;
      co_return out;
    }
    co_return transport_error(request, "write", wec);
  }
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // a watch is one endless body; each line is capped by the framer instead
  parser.header_limit(64 * 1024);
  arm();
  auto [hec, hn] = co_await http::async_read_header(stream, conn.buffer, parser, kTuple);
  (void)hn;
  if (hec) {
    if (cancelled()) {
      out.end = WatchEnd::cancelled;
      co_return out;
    }
    if (idled(hec)) {
      out.end = WatchEnd::idle;
      co_return out;
    }
    co_return transport_error(request, "read header", hec);
  }
  const int status = static_cast<int>(parser.get().result_int());
  std::array<char, 64 * 1024> buf;
  std::string error_body;
  LineFramer framer(max_line);
  std::optional<ApiResult<WatchResult>> early;  // set by the line handler to end the watch
  const LineFramer::LineHandler on_line = [&](std::string_view line) {
    if (early) {
      return;
    }
    auto ev = decode_watch_event(line);
    if (!ev) {
      early =
          ApiResult<WatchResult>(client_error(kReasonDecode, fmt::format("watch {}: {}", request.path, ev.message())));
      return;
    }
    m.watch_events.with({watch_event_type_name(ev->type)}).inc();
    if (ev->type == WatchEventType::error) {
      if (ev->error.code == 410) {
        out.end = WatchEnd::gone;  // "too old resource version" in-stream: relist
        early = ApiResult<WatchResult>(out);
      } else {
        early = ApiResult<WatchResult>(ev->error);
      }
      return;
    }
    if (!ev->resource_version.empty()) {
      out.last_resource_version = ev->resource_version;
    }
    ++out.events;
    if (!handler(*ev)) {
      out.end = WatchEnd::stopped;
      early = ApiResult<WatchResult>(out);
    }
  };
  while (!parser.is_done()) {
    parser.get().body().data = buf.data();
    parser.get().body().size = buf.size();
    arm();
    // read_some, not read: read() returns only when the 64 KiB body buffer is full, holding events back.
    auto [rec, rn] = co_await http::async_read_some(stream, conn.buffer, parser, kTuple);
    (void)rn;
    if (rec == http::error::need_buffer) {
      rec = {};
    }
    const std::size_t got = buf.size() - parser.get().body().size;
    if (status != 200) {
      if (error_body.size() < 64 * 1024) {
        error_body.append(buf.data(), std::min(got, 64 * 1024 - error_body.size()));
      }
    } else if (got > 0) {
      Status s = framer.feed(std::string_view(buf.data(), got), on_line);
      if (!s) {
        co_return client_error(kReasonTooLarge, fmt::format("watch {}: {}", request.path, s.message()));
      }
      if (early) {
        co_return std::move(*early);
      }
    }
    if (rec) {
      if (cancelled()) {
        out.end = WatchEnd::cancelled;
        co_return out;
      }
      if (idled(rec) && status == 200) {
        out.end = WatchEnd::idle;
        co_return out;
      }
      // A server that drops the connection mid-stream: the caller resumes from the last RV.
      co_return transport_error(request, "read", rec);
    }
  }
  if (status != 200) {
    if (status == 410) {
      out.end = WatchEnd::gone;
      co_return out;
    }
    co_return decode_status_error(status, error_body);
  }
  Status s = framer.finish(on_line);
  if (!s) {
    co_return client_error(kReasonTooLarge, fmt::format("watch {}: {}", request.path, s.message()));
  }
  if (early) {
    co_return std::move(*early);
  }
  out.end = WatchEnd::closed;
  co_return out;
}

}  // namespace

awaitable<ApiResult<WatchResult>> Client::watch(std::string path, WatchOptions options, WatchHandler handler,
                                                std::shared_ptr<Cancellation> cancellation) {
  auto self = shared_from_this();
  Impl& impl = *impl_;
  auto& m = KubeMetrics::get();
  Request request{HttpMethod::get, path + build_query(watch_query(options)), {}, {}, {}};
  if (cancellation && cancellation->cancelled()) {
    WatchResult r;
    r.end = WatchEnd::cancelled;
    co_return r;
  }
  const auto now = steady::now();
  const auto deadline =
      now + std::chrono::seconds(std::max(options.timeout_seconds, 0)) +
      (options.timeout_seconds > 0 ? options_.watch_deadline_slack : std::chrono::milliseconds(std::chrono::hours(1)));
  const auto connect_deadline = now + options_.timeout;
  // A watch takes no token from the client's QPS/burst bucket, as in client-go (rest/request.go Watch: "We
  // specifically don't want to rate limit watches"): one long-lived request per resource, re-established by the
  // reflector with its own backoff. Until 2026-12-06 every watch took one, so the ~15 watches of a start-up
  // (pods, nodes, quotas, the plugins' kinds) came out of the Bindings' burst: 20 fewer burst binds than
  // kube-scheduler at QPS 50 (first -> last bind 38.4 s vs 38.0 s for 2,000 pods).
  ApiResult<WatchResult> result = client_error(kReasonTransport, "not started");
  for (int auth_attempt = 0; auth_attempt < 2; ++auth_attempt) {
    auto token = impl.auth.bearer_token();
    if (!token) {
      result = client_error(kReasonAuth, fmt::format("watch {}: {}", request.path, token.message()));
      break;
    }
    auto cert = impl.auth.client_certificate();
    if (!cert) {
      result = client_error(kReasonAuth, fmt::format("watch {}: {}", request.path, cert.message()));
      break;
    }
    if (impl.url.scheme == "https" && !(*cert == impl.cert)) {
      auto ctx = make_tls_context(config_, *cert);
      if (!ctx) {
        result = client_error(kReasonAuth, fmt::format("watch {}: {}", request.path, ctx.message()));
        break;
      }
      impl.tls_ctx = std::move(*ctx);
      impl.cert = *cert;
      ++impl.generation;
      close_idle();
    }
    // A watch holds its connection for minutes: always a fresh one, never returned to the pool.
    auto c = co_await connect(impl, config_, options_.keepalive, request, std::min(connect_deadline, deadline));
    if (!c) {
      result = c.error();
      break;
    }
    m.connections.with({options_.user_agent}).inc();
    std::unique_ptr<Connection> conn = std::move(*c);
    Connection* raw = conn.get();
    if (cancellation) {
      cancellation->set_hook([raw] { raw->close(); });
    }
    http::request<http::string_body> req{http::verb::get, impl.url.base_path + request.path, 11};
    req.set(http::field::host, impl.url.host_header());
    req.set(http::field::user_agent, options_.user_agent);
    req.set(http::field::accept, "application/json");
    if (!token->empty()) {
      req.set(http::field::authorization, "Bearer " + *token);
    }
    req.prepare_payload();
    if (conn->tls) {
      result = co_await run_watch(*conn->tls, *conn, request, deadline, options_.watch_read_idle_timeout,
                                  options_.max_watch_line_bytes, req, handler, cancellation);
    } else {
      result = co_await run_watch(*conn->plain, *conn, request, deadline, options_.watch_read_idle_timeout,
                                  options_.max_watch_line_bytes, req, handler, cancellation);
    }
    if (cancellation) {
      cancellation->set_hook(nullptr);
    }
    conn->close();
    if (!result && result.error().is_unauthorized() && auth_attempt == 0 && impl.auth.invalidate()) {
      continue;
    }
    break;
  }
  m.requests
      .with({"WATCH", result
                          ? std::string(watch_end_name(result->end))
                          : (result.error().code != 0 ? std::to_string(result.error().code) : result.error().reason)})
      .inc();
  co_return result;
}

// ---- typed helpers ------------------------------------------------------------------------------------------

awaitable<ApiStatus> Client::bind_pod(std::string ns, std::string pod, std::string node, std::string pod_uid,
                                      BindingMetadata metadata) {
  auto body = make_binding(ns, pod, node, pod_uid, metadata);
  Request req{HttpMethod::post,
              object_path(resources::pods(), ns, pod, "binding"),
              json::serialize(body),
              "application/json",
              {}};
  auto r = co_await send(req);
  if (!r) {
    co_return r.error();
  }
  co_return ApiStatus{};
}

awaitable<ApiResult<json::object>> Client::patch_pod_condition(std::string ns, std::string pod,
                                                               PodCondition condition) {
  co_return co_await patch(object_path(resources::pods(), ns, pod, "status"), PatchType::strategic_merge,
                           json::serialize(make_pod_condition_patch(condition)));
}

awaitable<ApiResult<json::object>> Client::create_event(EventRecord event) {
  auto body = make_event(event);
  const std::string ns = string_at_pointer(body, "/metadata/namespace");
  co_return co_await create(collection_path(resources::events(), ns), body);
}

namespace {
ApiResult<Lease> to_lease(ApiResult<json::object> r) {
  if (!r) {
    return r.error();
  }
  auto l = decode_lease(*r);
  if (!l) {
    return client_error(kReasonDecode, l.message());
  }
  return std::move(*l);
}
}  // namespace

awaitable<ApiResult<Lease>> Client::get_lease(std::string ns, std::string name) {
  co_return to_lease(co_await get(object_path(resources::leases(), ns, name)));
}

awaitable<ApiResult<Lease>> Client::create_lease(Lease lease) {
  lease.resource_version.clear();  // must be empty on create
  co_return to_lease(co_await create(collection_path(resources::leases(), lease.namespace_), encode_lease(lease)));
}

awaitable<ApiResult<Lease>> Client::update_lease(Lease lease) {
  if (lease.resource_version.empty()) {
    co_return client_error(kReasonConfig, fmt::format("update lease {}/{}: resourceVersion precondition is empty",
                                                      lease.namespace_, lease.name));
  }
  co_return to_lease(
      co_await replace(object_path(resources::leases(), lease.namespace_, lease.name), encode_lease(lease)));
}

}  // namespace gpuslice::kube

// Client tests against in-process TLS servers on 127.0.0.1 port 0 (tests/kube/test_server.h).
#include "kube/client.h"
#include "common/metrics.h"
#include "kube/reflector.h"
#include "tests/kube/test_pki.h"
#include "tests/kube/test_server.h"

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

// Never co_await inside REQUIRE: Catch2 v2 wraps the expression in __builtin_constant_p, and g++-12
// evaluates a co_await there, running the request twice.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace gpuslice::kube;
using namespace gpuslice::kube::testing;
using gpuslice::string_at_pointer;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace json = boost::json;
using asio::awaitable;

namespace {
const TestPki& pki() {
  static const TestPki p = make_pki();
  return p;
}

RestConfig config_for(const TestServer& s) {
  RestConfig rc;
  rc.server = s.url();
  rc.ca_pem = pki().ca.cert_pem;
  rc.token = "secret-token";
  return rc;
}

std::shared_ptr<Client> make_client(asio::io_context& io, RestConfig rc, ClientOptions opts = {}) {
  auto c = Client::create(io.get_executor(), std::move(rc), std::move(opts));
  if (!c) {
    FAIL("Client::create: " << c.message());
  }
  return *c;
}

Reply ok_json(const std::string& body, int status = 200) {
  return Reply{{http_response(status, body)}};
}

awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(asio::use_awaitable);
}

std::string event_line(const std::string& type, const std::string& name, const std::string& rv) {
  return fmt::format(
             R"({{"type":"{}","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{}","namespace":"ns","resourceVersion":"{}"}}}}}})",
             type, name, rv) +
         "\n";
}

// Encodes `body` as HTTP chunks of `chunk_size` bytes (so chunks end mid-line), after a 200 chunked head.
std::string chunked_stream(const std::string& body, std::size_t chunk_size, bool terminate = true) {
  std::string out = chunked_head();
  for (std::size_t i = 0; i < body.size(); i += chunk_size) {
    out += chunk(body.substr(i, chunk_size));
  }
  if (terminate) {
    out += last_chunk();
  }
  return out;
}

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& content) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpuslice-token-XXXXXX").string();
    int fd = mkstemp(tmpl.data());
    close(fd);
    path = tmpl;
    write(content);
  }
  ~TempFile() { std::filesystem::remove(path); }
  void write(const std::string& content) const { std::ofstream(path, std::ios::trunc) << content; }
};

// gpuslice_kube_connections_opened_total{client="gpuslice"} (the test clients' user agent) as exposed now.
double connections_metric() {
  const std::string text = gpuslice::metrics::default_registry().serialize();
  const std::string key = "gpuslice_kube_connections_opened_total{client=\"gpuslice\"} ";
  const auto at = text.find(key);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
}
}  // namespace

TEST_CASE("client GET: object decoded, headers sent, keep-alive connection reused") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    return ok_json(
        fmt::format(R"({{"kind":"Pod","metadata":{{"name":"p","resourceVersion":"7"}},"seen":"{}"}})", r.target));
  });
  auto client = make_client(io, config_for(server));
  const double opened_before = connections_metric();
  run_test(io, [&]() -> awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      auto r = co_await client->get(object_path(resources::pods(), "ns", "p"));
      REQUIRE(r);
      REQUIRE(name_of(*r) == "p");
      REQUIRE(string_at_pointer(*r, "/seen") == "/api/v1/namespaces/ns/pods/p");
    }
  });
  REQUIRE(server.requests().size() == 3);
  const auto& h = server.requests()[0].headers;
  REQUIRE(h.at("authorization") == "Bearer secret-token");
  REQUIRE(h.at("accept") == "application/json");
  REQUIRE(h.at("host") == "127.0.0.1:" + std::to_string(server.port()));
  REQUIRE(h.at("user-agent") == "gpuslice");
  REQUIRE(server.connections() == 1);
  REQUIRE(client->connections_opened() == 1);
  REQUIRE(connections_metric() - opened_before == 1);
  REQUIRE(client->idle_connections() == 1);
}

TEST_CASE("client decodes Status errors into ApiError") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("missing") != std::string::npos) {
      return ok_json(status_body(404, "NotFound", "pods \\\"missing\\\" not found"), 404);
    }
    if (r.method == "POST") {
      return ok_json(status_body(409, "AlreadyExists", "pods \\\"p\\\" already exists"), 409);
    }
    return Reply{{"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom"}};
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    auto nf = co_await client->get("/api/v1/namespaces/ns/pods/missing");
    REQUIRE_FALSE(nf);
    REQUIRE(nf.error().is_not_found());
    REQUIRE(nf.error().message == "pods \"missing\" not found");
    // Built outside the co_await expression: g++-12 rejects braced init lists of literals inside one.
    const json::value pod = json::parse(R"({"kind":"Pod"})");
    auto dup = co_await client->create("/api/v1/namespaces/ns/pods", pod);
    REQUIRE_FALSE(dup);
    REQUIRE(dup.error().is_already_exists());
    auto boom = co_await client->remove("/api/v1/namespaces/ns/pods/x");
    REQUIRE_FALSE(boom);
    REQUIRE(boom.error().code == 500);
    REQUIRE(boom.error().reason == "InternalError");
    REQUIRE(boom.error().message == "boom");
    REQUIRE(boom.error().is_retriable());
  });
  REQUIRE(server.requests()[1].headers.at("content-type") == "application/json");
  REQUIRE(server.requests()[1].body == R"({"kind":"Pod"})");
}

TEST_CASE("server certificate: CA and host/IP verification") {
  asio::io_context io;
  // This server's certificate names only DNS:localhost, not IP 127.0.0.1.
  const TestPki dns_only = make_pki({"DNS:localhost"});
  TestServer server(io, dns_only.server.cert_pem, dns_only.server.key_pem,
                    [](const Recorded&) { return ok_json(R"({"kind":"Status"})"); });
  RestConfig rc = config_for(server);
  rc.ca_pem = dns_only.ca.cert_pem;
  auto by_ip = make_client(io, rc);
  rc.tls_server_name = "localhost";
  auto by_name = make_client(io, rc);
  RestConfig wrong_ca = config_for(server);  // the other PKI's CA, with a name that matches
  wrong_ca.tls_server_name = "localhost";
  auto untrusted = make_client(io, wrong_ca);
  RestConfig insecure = config_for(server);
  insecure.ca_pem.clear();
  insecure.insecure_skip_tls_verify = true;
  auto skip = make_client(io, insecure);
  run_test(io, [&]() -> awaitable<void> {
    auto a = co_await by_ip->get("/version");
    REQUIRE_FALSE(a);
    REQUIRE(a.error().is_transport());
    REQUIRE(a.error().message.find("TLS handshake") != std::string::npos);
    auto b = co_await by_name->get("/version");
    REQUIRE(b);
    auto c = co_await untrusted->get("/version");
    REQUIRE_FALSE(c);
    REQUIRE(c.error().is_transport());
    auto d = co_await skip->get("/version");
    REQUIRE(d);
  });
  // SNI carries tls-server-name; the IP-only client sent none (no assertion possible server-side here).
  REQUIRE(server.requests().size() == 2);
}

TEST_CASE("client certificate authentication") {
  asio::io_context io;
  TestServer server(
      io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded&) { return ok_json(R"({"kind":"Status"})"); },
      pki().ca.cert_pem);
  RestConfig with_cert = config_for(server);
  with_cert.token.clear();
  with_cert.client_cert_pem = pki().client.cert_pem;
  with_cert.client_key_pem = pki().client.key_pem;
  RestConfig without = config_for(server);
  auto a = make_client(io, with_cert);
  auto b = make_client(io, without);
  run_test(io, [&]() -> awaitable<void> {
    auto ok = co_await a->get("/api");
    REQUIRE(ok);
    auto denied = co_await b->get("/api");
    REQUIRE_FALSE(denied);
    REQUIRE(denied.error().is_transport());
  });
  REQUIRE(server.requests().size() == 1);
  REQUIRE(server.requests()[0].headers.count("authorization") == 0);

  RestConfig bad = with_cert;
  bad.client_key_pem = "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n";
  auto e = Client::create(io.get_executor(), bad, {});
  REQUIRE_FALSE(e);
  REQUIRE(e.message().find("client-key") != std::string::npos);
  RestConfig bad_ca = with_cert;
  bad_ca.ca_pem = "garbage";
  auto e2 = Client::create(io.get_executor(), bad_ca, {});
  REQUIRE_FALSE(e2);
  REQUIRE(e2.message().find("certificate-authority") != std::string::npos);
}

TEST_CASE("every request has a deadline") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded&) {
    return Reply{{}, 0ms, false, true};
  });  // never answers
  ClientOptions opts;
  opts.timeout = 300ms;
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    auto r = co_await client->get("/api/v1/pods");
    REQUIRE_FALSE(r);
    REQUIRE(r.error().is_timeout());
    REQUIRE(r.error().message.find("GET /api/v1/pods") != std::string::npos);
    // The per-request override applies too.
    Request short_deadline{HttpMethod::get, "/api", {}, {}, 100ms};
    auto s = co_await client->send(short_deadline);
    REQUIRE_FALSE(s);
    REQUIRE(s.error().is_timeout());
  });
}

TEST_CASE("response body limit") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem,
                    [](const Recorded&) { return ok_json("{\"pad\":\"" + std::string(5000, 'x') + "\"}"); });
  ClientOptions opts;
  opts.max_response_bytes = 4096;
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    auto r = co_await client->get("/api/v1/pods");
    REQUIRE_FALSE(r);
    REQUIRE(r.error().reason == kReasonTooLarge);
  });
}

TEST_CASE("401: the token file is re-read and the request retried once") {
  asio::io_context io;
  TempFile token("old-token\n");
  std::string accepted = "old-token";
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.headers.at("authorization") != "Bearer " + accepted) {
      return ok_json(status_body(401, "Unauthorized", "Unauthorized"), 401);
    }
    return ok_json(R"({"kind":"Namespace","metadata":{"name":"default"}})");
  });
  RestConfig rc = config_for(server);
  rc.token.clear();
  rc.token_file = token.path.string();
  auto now = std::chrono::steady_clock::time_point{} + 1000s;
  ClientOptions opts;
  opts.auth.steady_now = [&] { return now; };
  auto client = make_client(io, rc, opts);
  run_test(io, [&]() -> awaitable<void> {
    {
      auto ok_1 = co_await client->get("/api/v1/namespaces/default");
      REQUIRE(ok_1);
    }
    token.write("new-token");
    accepted = "new-token";
    // Within the re-read period the client still holds the old token: 401, re-read, retry.
    auto r = co_await client->get("/api/v1/namespaces/default");
    REQUIRE(r);
    // Rotation without a 401: picked up once the period has passed.
    token.write("newer-token");
    accepted = "newer-token";
    now += 61s;
    {
      auto ok_2 = co_await client->get("/api/v1/namespaces/default");
      REQUIRE(ok_2);
    }
    // A credential that stays wrong: one retry only, then the 401 surfaces.
    accepted = "something-else";
    auto denied = co_await client->get("/api/v1/namespaces/default");
    REQUIRE_FALSE(denied);
    REQUIRE(denied.error().is_unauthorized());
  });
  std::vector<std::string> sent;
  for (const auto& r : server.requests()) {
    sent.push_back(r.headers.at("authorization"));
  }
  REQUIRE(sent == std::vector<std::string>{"Bearer old-token", "Bearer old-token", "Bearer new-token",
                                           "Bearer newer-token", "Bearer newer-token", "Bearer newer-token"});
}

TEST_CASE("client-side rate limit: a wait beyond the deadline fails fast") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem,
                    [](const Recorded&) { return ok_json(R"({"kind":"Status"})"); });
  ClientOptions opts;
  opts.qps = 1;
  opts.burst = 2;
  opts.timeout = 500ms;
  const auto frozen = std::chrono::steady_clock::time_point{} + 5000s;
  opts.steady_now = [&] { return frozen; };  // no refill: the third request would wait 1 s
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    {
      auto ok_3 = co_await client->get("/a");
      REQUIRE(ok_3);
    }
    {
      auto ok_4 = co_await client->get("/b");
      REQUIRE(ok_4);
    }
    auto r = co_await client->get("/c");
    REQUIRE_FALSE(r);
    REQUIRE(r.error().is_timeout());
    REQUIRE(r.error().message.find("rate limit") != std::string::npos);
  });
  REQUIRE(server.requests().size() == 2);
}

TEST_CASE("client-side rate limit: a watch takes no token (client-go's Watch is not rate limited)") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("watch=1") != std::string::npos) {
      return Reply{{chunked_stream(event_line("ADDED", "a", "11"), 4096)}};
    }
    return ok_json(R"({"kind":"Status"})");
  });
  ClientOptions opts;
  opts.qps = 1;
  opts.burst = 2;
  opts.timeout = 500ms;
  const auto frozen = std::chrono::steady_clock::time_point{} + 5000s;
  opts.steady_now = [&] { return frozen; };  // no refill: two tokens in all
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    {
      auto first = co_await client->get("/a");
      REQUIRE(first);
    }
    for (int i = 0; i < 3; ++i) {
      WatchOptions wo;
      wo.timeout_seconds = 60;
      auto w = co_await client->watch("/api/v1/pods", wo, [](WatchEvent&) { return true; });
      REQUIRE(w);
      REQUIRE(w->events == 1);
    }
    // The second token is still there: had the watches taken one each, this would wait past its deadline.
    auto second = co_await client->get("/b");
    REQUIRE(second);
    auto third = co_await client->get("/c");
    REQUIRE_FALSE(third);
    REQUIRE(third.error().message.find("rate limit") != std::string::npos);
  });
  REQUIRE(server.requests().size() == 5);
}

TEST_CASE("stale pooled connection errors: ECONNABORTED, ENETRESET and ETIMEDOUT count like a reset or EOF") {
  namespace aerr = boost::asio::error;
  CHECK(is_stale_connection_error(aerr::connection_aborted));  // ECONNABORTED: was treated as a hard failure
  CHECK(is_stale_connection_error(aerr::network_reset));
  CHECK(is_stale_connection_error(aerr::connection_reset));
  CHECK(is_stale_connection_error(aerr::broken_pipe));
  CHECK(is_stale_connection_error(aerr::eof));
  CHECK(is_stale_connection_error(boost::beast::http::error::end_of_stream));
  CHECK(is_stale_connection_error(boost::asio::ssl::error::stream_truncated));
  // ETIMEDOUT: the kernel gave up on a silent peer (keepalive probes unanswered, TCP_USER_TIMEOUT); was a hard
  // failure. The same errno as a system_error, as a read on the socket returns it.
  CHECK(is_stale_connection_error(aerr::timed_out));
  CHECK(is_stale_connection_error(boost::system::error_code(ETIMEDOUT, boost::system::system_category())));
  // Not stale: the request itself failed (its own deadline, cancellation, refused connect, a bad response).
  CHECK_FALSE(is_stale_connection_error(boost::beast::error::timeout));
  CHECK_FALSE(is_stale_connection_error(aerr::operation_aborted));
  CHECK_FALSE(is_stale_connection_error(aerr::connection_refused));
  CHECK_FALSE(is_stale_connection_error(boost::beast::http::error::bad_version));
}

TEST_CASE("a pooled connection closed by the server is replaced transparently") {
  asio::io_context io;
  // The server closes after each response without saying so, as an idle-timeout close would look.
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded&) {
    Reply r = ok_json(R"({"kind":"Status"})");
    r.close = true;
    return r;
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    {
      auto ok_5 = co_await client->get("/a");
      REQUIRE(ok_5);
    }
    co_await sleep_for(50ms);
    auto r = co_await client->get("/b");
    REQUIRE(r);
  });
  REQUIRE(server.connections() == 2);
  REQUIRE(server.requests().size() == 2);
}

TEST_CASE("a stale pooled connection drops the whole pool: the retry connects afresh") {
  asio::io_context io;
  bool close_after = true;
  // Two connections are pooled, then the server closes both (an API server restart): the next request must not
  // fail on the second stale connection after the first.
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded&) {
    Reply r = ok_json(R"({"kind":"Status"})");
    r.close = close_after;
    return r;
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    int done = 0;
    for (int i = 0; i < 2; ++i) {
      asio::co_spawn(
          io,
          [&]() -> awaitable<void> {
            auto r = co_await client->get("/warm");
            REQUIRE(r);
            ++done;
          },
          asio::detached);
    }
    for (int i = 0; i < 500 && done < 2; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(done == 2);
    REQUIRE(client->idle_connections() == 2);
    co_await sleep_for(50ms);  // both FINs have arrived
    close_after = false;
    auto r = co_await client->get("/after");
    REQUIRE(r);
    REQUIRE(client->idle_connections() == 1);  // the fresh one; neither stale connection was kept
  });
  REQUIRE(server.connections() == 3);
}

namespace {
// The TCP options of this process's socket connected to 127.0.0.1:`port` (the client's side of a test server
// connection), found among /proc/self/fd. -1 values when there is none.
struct SocketOptions {
  int keepalive = -1, idle = -1, interval = -1, count = -1, user_timeout = -1;
  int sockets = 0;  // client sockets found
};
SocketOptions client_socket_options(uint16_t port) {
  SocketOptions out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET ||
        ntohs(peer.sin_port) != port) {
      continue;
    }
    ++out.sockets;
    auto get = [fd](int level, int name) {
      int v = -1;
      socklen_t l = sizeof v;
      return getsockopt(fd, level, name, &v, &l) == 0 ? v : -1;
    };
    out.keepalive = get(SOL_SOCKET, SO_KEEPALIVE);
    out.idle = get(IPPROTO_TCP, TCP_KEEPIDLE);
    out.interval = get(IPPROTO_TCP, TCP_KEEPINTVL);
    out.count = get(IPPROTO_TCP, TCP_KEEPCNT);
    out.user_timeout = get(IPPROTO_TCP, TCP_USER_TIMEOUT);
  }
  return out;
}
}  // namespace

TEST_CASE("TCP keepalive and TCP_USER_TIMEOUT on every API-server connection, pooled and watch") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("watch=1") != std::string::npos) {
      Reply hold{{chunked_stream(event_line("ADDED", "a", "1"), 500, false)}};
      hold.hold = true;
      return hold;
    }
    return ok_json(R"({"kind":"Status"})");
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    auto r = co_await client->get("/a");
    REQUIRE(r);
    REQUIRE(client->idle_connections() == 1);
    const SocketOptions pooled = client_socket_options(server.port());
    CHECK(pooled.sockets == 1);
    CHECK(pooled.keepalive == 1);
    CHECK(pooled.idle == 15);
    CHECK(pooled.interval == 5);
    CHECK(pooled.count == 3);
    CHECK(pooled.user_timeout == 30000);
    client->close_idle();

    auto cancel = std::make_shared<Cancellation>();
    SocketOptions watching;
    const WatchOptions wo;
    auto w = co_await client->watch(
        "/api/v1/pods", wo,
        [&](WatchEvent&) {
          watching = client_socket_options(server.port());
          asio::post(client->get_executor(), [cancel] { cancel->cancel(); });
          return true;
        },
        cancel);
    REQUIRE(w);
    CHECK(watching.sockets == 1);
    CHECK(watching.keepalive == 1);
    CHECK(watching.idle == 15);
    CHECK(watching.user_timeout == 30000);
  });
}

TEST_CASE("set_tcp_keepalive: the given figures, and off") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  TcpKeepalive k;
  k.idle = 7s;
  k.interval = 2s;
  k.count = 4;
  k.user_timeout = 12000ms;
  REQUIRE_FALSE(set_tcp_keepalive(fd, k));
  auto get = [fd](int level, int name) {
    int v = -1;
    socklen_t l = sizeof v;
    getsockopt(fd, level, name, &v, &l);
    return v;
  };
  CHECK(get(SOL_SOCKET, SO_KEEPALIVE) == 1);
  CHECK(get(IPPROTO_TCP, TCP_KEEPIDLE) == 7);
  CHECK(get(IPPROTO_TCP, TCP_KEEPINTVL) == 2);
  CHECK(get(IPPROTO_TCP, TCP_KEEPCNT) == 4);
  CHECK(get(IPPROTO_TCP, TCP_USER_TIMEOUT) == 12000);
  k.enabled = false;
  REQUIRE_FALSE(set_tcp_keepalive(fd, k));
  CHECK(get(SOL_SOCKET, SO_KEEPALIVE) == 0);
  ::close(fd);
  // A handle that is not a socket: the error is returned, nothing thrown.
  CHECK(set_tcp_keepalive(-1, TcpKeepalive{}) == boost::system::error_code(EBADF, boost::system::system_category()));
}

TEST_CASE("list follows continue tokens, a 410 on a continue token restarts once") {
  asio::io_context io;
  int expired_once = 0;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("continue=c2") != std::string::npos && expired_once++ == 0) {
      return ok_json(status_body(410, "Expired", "The provided continue parameter is too old"), 410);
    }
    if (r.target.find("continue=c1") != std::string::npos) {
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"100","continue":"c2"},"items":[{"metadata":{"name":"b"}}]})");
    }
    if (r.target.find("continue=c2") != std::string::npos) {
      return ok_json(R"({"kind":"PodList","metadata":{"resourceVersion":"100"},"items":[{"metadata":{"name":"c"}}]})");
    }
    return ok_json(
        R"({"kind":"PodList","metadata":{"resourceVersion":"100","continue":"c1"},"items":[{"metadata":{"name":"a"}}]})");
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    ListOptions lo;
    lo.limit = 1;
    lo.label_selector = "app=x";
    auto r = co_await client->list(collection_path(resources::pods()), lo);
    REQUIRE(r);
    REQUIRE(r->resource_version == "100");
    REQUIRE(r->kind == "PodList");
    std::vector<std::string> names;
    for (const auto& item : r->items) {
      names.push_back(name_of(item));
    }
    REQUIRE(names == std::vector<std::string>{"a", "b", "c"});
  });
  std::vector<std::string> targets;
  for (const auto& r : server.requests()) {
    targets.push_back(r.target);
  }
  REQUIRE(targets == std::vector<std::string>{"/api/v1/pods?labelSelector=app%3Dx&limit=1",
                                              "/api/v1/pods?labelSelector=app%3Dx&limit=1&continue=c1",
                                              "/api/v1/pods?labelSelector=app%3Dx&limit=1&continue=c2",  // 410
                                              "/api/v1/pods?labelSelector=app%3Dx&limit=1",
                                              "/api/v1/pods?labelSelector=app%3Dx&limit=1&continue=c1",
                                              "/api/v1/pods?labelSelector=app%3Dx&limit=1&continue=c2"});
}

TEST_CASE("list_pages hands over each page as it arrives; a 410 restart begins again with a first page") {
  asio::io_context io;
  int expired_once = 0;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("continue=c2") != std::string::npos && expired_once++ == 0) {
      return ok_json(status_body(410, "Expired", "The provided continue parameter is too old"), 410);
    }
    if (r.target.find("continue=c1") != std::string::npos) {
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"100","continue":"c2"},"items":[{"metadata":{"name":"b"}}]})");
    }
    if (r.target.find("continue=c2") != std::string::npos) {
      return ok_json(R"({"kind":"PodList","metadata":{"resourceVersion":"100"},"items":[{"metadata":{"name":"c"}}]})");
    }
    const std::string rv = expired_once == 0 ? "100" : "200";  // the restarted list is a newer snapshot
    return ok_json(R"({"kind":"PodList","metadata":{"resourceVersion":")" + rv +
                   R"(","continue":"c1"},"items":[{"metadata":{"name":"a"}}]})");
  });
  auto client = make_client(io, config_for(server));
  std::vector<std::string> pages;
  run_test(io, [&]() -> awaitable<void> {
    ListOptions lo;
    lo.limit = 1;
    Client::ListPageHandler on_page = [&](ListPage& page, bool first) {
      std::string s = first ? "first:" : "";
      for (const auto& item : page.items) {
        s += name_of(item);
      }
      s += page.continue_token.empty() ? ":last" : "";
      pages.push_back(s);
    };
    auto rv = co_await client->list_pages(collection_path(resources::pods()), lo, std::move(on_page));
    REQUIRE(rv);
    REQUIRE(*rv == "200");  // the first page of the pass that completed
  });
  REQUIRE(pages == std::vector<std::string>{"first:a", "b", "first:a", "b", "c:last"});
}

TEST_CASE("watch: chunked stream split at awkward points, events in order, RV tracked") {
  const std::string events = event_line("ADDED", "a", "11") + "\n" + event_line("MODIFIED", "a", "12") +
                             event_line("BOOKMARK", "", "13") + event_line("DELETED", "a", "14");
  for (std::size_t chunk_size : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{4096}}) {
    DYNAMIC_SECTION("chunk size " << chunk_size) {
      asio::io_context io;
      const std::string raw = chunked_stream(events, chunk_size);
      // TCP writes cut through chunk headers, CRLFs and JSON alike.
      std::vector<std::size_t> cuts;
      for (std::size_t i = 3; i < raw.size(); i += 13) {
        cuts.push_back(i);
      }
      TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded&) {
        return Reply{split_at(raw, cuts), 1ms};
      });
      auto client = make_client(io, config_for(server));
      run_test(io, [&]() -> awaitable<void> {
        std::vector<std::string> seen;
        WatchOptions wo;
        wo.resource_version = "10";
        wo.timeout_seconds = 60;
        auto r = co_await client->watch(collection_path(resources::pods(), "ns"), wo, [&](WatchEvent& e) {
          seen.push_back(std::string(watch_event_type_name(e.type)) + ":" + e.resource_version);
          return true;
        });
        REQUIRE(r);
        REQUIRE(r->end == WatchEnd::closed);
        REQUIRE(r->last_resource_version == "14");
        REQUIRE(r->events == 4);
        REQUIRE(seen == std::vector<std::string>{"ADDED:11", "MODIFIED:12", "BOOKMARK:13", "DELETED:14"});
      });
      REQUIRE(server.requests().at(0).target ==
              "/api/v1/namespaces/ns/pods?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=60");
    }
  }
}

TEST_CASE("watch: 410 Gone as HTTP status and as an in-stream ERROR both end with WatchEnd::gone") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("resourceVersion=1&") != std::string::npos) {
      return ok_json(status_body(410, "Expired", "too old resource version: 1 (50)"), 410);
    }
    if (r.target.find("resourceVersion=2&") != std::string::npos) {
      const std::string body =
          event_line("ADDED", "a", "3") +
          R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 3 (50)","reason":"Expired","code":410}})j" +
          "\n" + event_line("ADDED", "never", "4");
      return Reply{{chunked_stream(body, 20)}};
    }
    const std::string body =
        R"({"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError","message":"etcd down"}})"
        "\n";
    return Reply{{chunked_stream(body, 1000)}};
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    WatchOptions wo;
    wo.resource_version = "1";
    int events = 0;
    auto count = [&](WatchEvent&) {
      ++events;
      return true;
    };
    auto http410 = co_await client->watch("/api/v1/pods", wo, count);
    REQUIRE(http410);
    REQUIRE(http410->end == WatchEnd::gone);
    wo.resource_version = "2";
    auto in_stream = co_await client->watch("/api/v1/pods", wo, count);
    REQUIRE(in_stream);
    REQUIRE(in_stream->end == WatchEnd::gone);
    REQUIRE(in_stream->last_resource_version == "3");
    REQUIRE(events == 1);  // the event after the ERROR is not delivered
    wo.resource_version = "5";
    auto other = co_await client->watch("/api/v1/pods", wo, count);
    REQUIRE_FALSE(other);
    REQUIRE(other.error().code == 500);
    REQUIRE(other.error().message == "etcd down");
  });
}

TEST_CASE("watch: an over-long line, a bad line, a handler stop, and cancellation") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("long") != std::string::npos) {
      return Reply{{chunked_stream(std::string(3000, 'x') + "\n", 500)}};
    }
    if (r.target.find("bad") != std::string::npos) {
      return Reply{{chunked_stream("{not json}\n", 500)}};
    }
    if (r.target.find("stop") != std::string::npos) {
      return Reply{{chunked_stream(event_line("ADDED", "a", "1") + event_line("ADDED", "b", "2"), 500)}};
    }
    // Holds the stream open after one event.
    Reply hold{{chunked_stream(event_line("ADDED", "a", "1"), 500, false)}};
    hold.hold = true;
    return hold;
  });
  ClientOptions opts;
  opts.max_watch_line_bytes = 1024;
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    auto all = [](WatchEvent&) { return true; };
    const WatchOptions defaults;  // named: a braced temporary in a co_await expression breaks g++-12
    auto long_line = co_await client->watch("/long", defaults, all);
    REQUIRE_FALSE(long_line);
    REQUIRE(long_line.error().reason == kReasonTooLarge);
    auto bad = co_await client->watch("/bad", defaults, all);
    REQUIRE_FALSE(bad);
    REQUIRE(bad.error().reason == kReasonDecode);
    auto stop = co_await client->watch("/stop", defaults, [](WatchEvent&) { return false; });
    REQUIRE(stop);
    REQUIRE(stop->end == WatchEnd::stopped);
    REQUIRE(stop->events == 1);

    auto cancel = std::make_shared<Cancellation>();
    auto held = co_await client->watch(
        "/held", defaults,
        [&](WatchEvent&) {
          // Cancel from inside the executor after the first event (as Reflector::stop() would).
          asio::post(client->get_executor(), [cancel] { cancel->cancel(); });
          return true;
        },
        cancel);
    REQUIRE(held);
    REQUIRE(held->end == WatchEnd::cancelled);
    REQUIRE(held->last_resource_version == "1");
  });
}

TEST_CASE("watch: no byte for the read-idle deadline ends WatchEnd::idle; a slow but live stream does not") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded& r) {
    if (r.target.find("silent-head") != std::string::npos) {
      Reply nothing;  // accepted, the request read, no response header ever
      nothing.hold = true;
      return nothing;
    }
    if (r.target.find("trickle") != std::string::npos) {
      // An event every 100 ms for about 700 ms: never 500 ms without a byte, although the whole stream lasts
      // longer than the idle deadline.
      Reply slow;
      slow.writes.push_back(chunked_head());
      for (int i = 1; i <= 6; ++i) {
        slow.writes.push_back(chunk(event_line("MODIFIED", "a", std::to_string(i))));
      }
      slow.writes.push_back(last_chunk());
      slow.pause = 100ms;
      return slow;
    }
    // Two events, then silence on an open connection (a cut path: nothing is closed, nothing arrives).
    Reply quiet{{chunked_stream(event_line("ADDED", "a", "7") + event_line("BOOKMARK", "", "8"), 500, false)}};
    quiet.hold = true;
    return quiet;
  });
  ClientOptions opts;
  opts.watch_read_idle_timeout = 500ms;
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    auto all = [](WatchEvent&) { return true; };
    WatchOptions wo;
    wo.resource_version = "5";
    wo.timeout_seconds = 60;  // the watch's own deadline is a minute away: only the idle deadline can end it
    auto started = std::chrono::steady_clock::now();
    auto quiet = co_await client->watch("/api/v1/pods", wo, all);
    auto took = std::chrono::steady_clock::now() - started;
    REQUIRE(quiet);
    CHECK(quiet->end == WatchEnd::idle);
    CHECK(std::string(watch_end_name(quiet->end)) == "idle");
    CHECK(quiet->last_resource_version == "8");
    CHECK(quiet->events == 2);
    CHECK(took >= 500ms);
    CHECK(took < 5s);

    auto head = co_await client->watch("/silent-head", wo, all);
    REQUIRE(head);
    CHECK(head->end == WatchEnd::idle);
    CHECK(head->events == 0);

    std::vector<std::string> rvs;
    started = std::chrono::steady_clock::now();
    auto trickle = co_await client->watch("/trickle", wo, [&](WatchEvent& e) {
      rvs.push_back(e.resource_version);
      return true;
    });
    took = std::chrono::steady_clock::now() - started;
    REQUIRE(trickle);
    CHECK(trickle->end == WatchEnd::closed);
    CHECK(rvs == std::vector<std::string>{"1", "2", "3", "4", "5", "6"});
    CHECK(took >= 600ms);
  });
}

TEST_CASE("watch: read-idle deadline 0 is off") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [](const Recorded&) {
    Reply slow;
    slow.writes = {chunked_head(), chunk(event_line("ADDED", "a", "1")), last_chunk()};
    slow.pause = 400ms;
    return slow;
  });
  ClientOptions opts;
  opts.watch_read_idle_timeout = 0ms;
  auto client = make_client(io, config_for(server), opts);
  run_test(io, [&]() -> awaitable<void> {
    const WatchOptions wo;
    auto r = co_await client->watch("/api/v1/pods", wo, [](WatchEvent&) { return true; });
    REQUIRE(r);
    CHECK(r->end == WatchEnd::closed);
    CHECK(r->events == 1);
  });
}

TEST_CASE("typed helpers: binding, pod status, events, leases") {
  asio::io_context io;
  std::string lease_rv = "5";
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.ends_with("/binding")) {
      if (r.body.find("\"name\":\"bound\"") != std::string::npos) {
        return ok_json(status_body(409, "Conflict", "pod bound is already assigned to node n0"), 409);
      }
      return ok_json(R"({"kind":"Status","status":"Success","code":201})", 201);
    }
    if (r.target.ends_with("/status")) {
      return ok_json(R"({"kind":"Pod","metadata":{"name":"p"}})");
    }
    if (r.target.find("/events") != std::string::npos) {
      return ok_json(r.body, 201);
    }
    if (r.target.find("/leases") != std::string::npos) {
      if (r.method == "POST") {
        return ok_json(status_body(409, "AlreadyExists", "leases.coordination.k8s.io \\\"l\\\" already exists"), 409);
      }
      if (r.method == "PUT") {
        auto body = json::parse(r.body).as_object();
        if (resource_version_of(body) != lease_rv) {
          return ok_json(status_body(409, "Conflict", "the object has been modified"), 409);
        }
        body["metadata"].as_object()["resourceVersion"] = "6";
        return ok_json(json::serialize(body));
      }
      return ok_json(
          R"({"kind":"Lease","metadata":{"name":"l","namespace":"kube-system","resourceVersion":"5"},"spec":{"holderIdentity":"a","leaseDurationSeconds":15,"renewTime":"2026-11-30T08:00:00.000000Z"}})");
    }
    return ok_json("{}", 404);
  });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    {
      auto ok_6 = co_await client->bind_pod("ns", "p", "node-1", "uid-1");
      REQUIRE(ok_6);
    }
    auto conflict = co_await client->bind_pod("ns", "bound", "node-1");
    REQUIRE_FALSE(conflict);
    REQUIRE(conflict.error().is_conflict());

    PodCondition c;
    c.reason = "Unschedulable";
    c.message = "no fit";
    {
      auto ok_7 = co_await client->patch_pod_condition("ns", "p", c);
      REQUIRE(ok_7);
    }

    EventRecord e;
    e.event_time = std::chrono::system_clock::time_point(std::chrono::seconds(1796025600));
    e.reason = "Scheduled";
    e.note = "bound to node-1";
    e.regarding.namespace_ = "ns";
    e.regarding.name = "p";
    auto created = co_await client->create_event(e);
    REQUIRE(created);
    REQUIRE(string_at_pointer(*created, "/eventTime") == "2026-11-30T08:00:00.000000Z");

    auto lease = co_await client->get_lease("kube-system", "l");
    REQUIRE(lease);
    REQUIRE(lease->spec.holder_identity == "a");
    REQUIRE(lease->resource_version == "5");
    auto exists = co_await client->create_lease(*lease);
    REQUIRE_FALSE(exists);
    REQUIRE(exists.error().is_already_exists());
    Lease mine = *lease;
    mine.spec.holder_identity = "b";
    auto updated = co_await client->update_lease(mine);
    REQUIRE(updated);
    REQUIRE(updated->resource_version == "6");
    REQUIRE(updated->spec.holder_identity == "b");
    lease_rv = "6";
    auto stale = co_await client->update_lease(mine);  // still carries RV 5
    REQUIRE_FALSE(stale);
    REQUIRE(stale.error().is_conflict());
    REQUIRE_FALSE(stale.error().is_already_exists());
    mine.resource_version.clear();
    auto no_rv = co_await client->update_lease(mine);
    REQUIRE_FALSE(no_rv);
    REQUIRE(no_rv.error().reason == kReasonConfig);
  });
  const auto& reqs = server.requests();
  REQUIRE(reqs[0].method == "POST");
  REQUIRE(reqs[0].target == "/api/v1/namespaces/ns/pods/p/binding");
  REQUIRE(
      reqs[0].body ==
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"p","namespace":"ns","uid":"uid-1"},"target":{"apiVersion":"v1","kind":"Node","name":"node-1"}})");
  REQUIRE(reqs[2].method == "PATCH");
  REQUIRE(reqs[2].target == "/api/v1/namespaces/ns/pods/p/status");
  REQUIRE(reqs[2].headers.at("content-type") == "application/strategic-merge-patch+json");
  REQUIRE(reqs[3].target == "/apis/events.k8s.io/v1/namespaces/ns/events");
  REQUIRE(reqs[5].target == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
  REQUIRE(reqs[5].body.find("resourceVersion") == std::string::npos);  // never sent on create
  REQUIRE(reqs[6].method == "PUT");
  REQUIRE(reqs[6].target == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l");
}

TEST_CASE("patch types and fieldManager") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem,
                    [](const Recorded&) { return ok_json(R"({"kind":"Pod"})"); });
  auto client = make_client(io, config_for(server));
  run_test(io, [&]() -> awaitable<void> {
    {
      auto ok_8 = co_await client->patch("/api/v1/namespaces/ns/pods/p", PatchType::json,
                                         R"([{"op":"add","path":"/x","value":1}])");
      REQUIRE(ok_8);
    }
    {
      auto ok_9 = co_await client->patch("/api/v1/namespaces/ns/pods/p", PatchType::merge,
                                         R"({"metadata":{"resourceVersion":"3"}})");
      REQUIRE(ok_9);
    }
    {
      auto ok_10 = co_await client->patch("/api/v1/namespaces/ns/pods/p", PatchType::apply, "kind: Pod\n", "gpuslice");
      REQUIRE(ok_10);
    }
  });
  const auto& reqs = server.requests();
  REQUIRE(reqs[0].headers.at("content-type") == "application/json-patch+json");
  REQUIRE(reqs[1].headers.at("content-type") == "application/merge-patch+json");
  REQUIRE(reqs[2].headers.at("content-type") == "application/apply-patch+yaml");
  REQUIRE(reqs[2].target == "/api/v1/namespaces/ns/pods/p?fieldManager=gpuslice");
}

TEST_CASE("reflector: list, watch, resume from the last RV, relist on 410, stop") {
  asio::io_context io;
  int lists = 0;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("watch=1") == std::string::npos) {
      ++lists;
      if (lists == 1) {
        return ok_json(
            R"({"kind":"PodList","metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","resourceVersion":"9"}}]})");
      }
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"20"},"items":[{"metadata":{"name":"a","resourceVersion":"9"}},{"metadata":{"name":"b","resourceVersion":"19"}}]})");
    }
    if (r.target.find("resourceVersion=10&") != std::string::npos) {
      // Ends normally after an event and a bookmark: resume from 12.
      return Reply{{chunked_stream(event_line("ADDED", "c", "11") + event_line("BOOKMARK", "", "12"), 9)}};
    }
    if (r.target.find("resourceVersion=12&") != std::string::npos) {
      return Reply{{chunked_stream(
          R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})"
          "\n",
          50)}};
    }
    Reply hold{{chunked_stream(event_line("MODIFIED", "b", "21"), 5, false)}};
    hold.hold = true;
    return hold;
  });
  auto client = make_client(io, config_for(server));
  ReflectorOptions ro;
  ro.resource = resources::pods();
  ro.field_selector = "spec.schedulerName=gpuslice-scheduler";
  ro.random = [] { return 0.0; };
  ro.watch_timeout_seconds = 100;
  std::vector<std::string> seen;
  Reflector reflector(client, ro, [&](const ReflectorEvent& e) {
    std::string s = reflector_event_type_name(e.type);
    if (e.type == ReflectorEventType::relisted) {
      s += ":" + std::to_string(e.items->size());
    } else if (e.object != nullptr) {
      s += ":" + name_of(*e.object);
    }
    seen.push_back(s + "@" + e.resource_version);
  });
  run_test(io, [&]() -> awaitable<void> {
    bool done = false;
    asio::co_spawn(io, reflector.run(), [&](std::exception_ptr) { done = true; });
    for (int i = 0; i < 500 && seen.size() < 5; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(reflector.has_synced());
    reflector.stop();
    for (int i = 0; i < 500 && !done; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(done);
  });
  REQUIRE(seen ==
          std::vector<std::string>{"RELISTED:1@10", "ADDED:c@11", "BOOKMARK:@12", "RELISTED:2@20", "MODIFIED:b@21"});
  REQUIRE(reflector.relists() == 2);
  REQUIRE(reflector.watches() == 3);
  REQUIRE(reflector.last_resource_version() == "21");
  std::vector<std::string> targets;
  for (const auto& r : server.requests()) {
    targets.push_back(r.target);
  }
  const std::string fs = "fieldSelector=spec.schedulerName%3Dgpuslice-scheduler";
  REQUIRE(targets ==
          std::vector<std::string>{
              "/api/v1/pods?" + fs + "&limit=500",
              "/api/v1/pods?watch=1&" + fs + "&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=100",
              "/api/v1/pods?watch=1&" + fs + "&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=100",
              "/api/v1/pods?" + fs + "&limit=500",
              "/api/v1/pods?watch=1&" + fs + "&resourceVersion=20&allowWatchBookmarks=true&timeoutSeconds=100"});
}

TEST_CASE("reflector: an idle watch (dead connection) resumes from the last RV seen, with no relist") {
  asio::io_context io;
  int lists = 0;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("watch=1") == std::string::npos) {
      ++lists;
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","resourceVersion":"9"}}]})");
    }
    Reply quiet;
    if (r.target.find("resourceVersion=10&") != std::string::npos) {
      // An event and a bookmark, then the connection goes silent without closing.
      quiet.writes = {chunked_stream(event_line("ADDED", "c", "11") + event_line("BOOKMARK", "", "12"), 9, false)};
    } else if (r.target.find("resourceVersion=12&") != std::string::npos) {
      quiet.writes = {chunked_stream(event_line("MODIFIED", "c", "13"), 9, false)};
    } else {
      quiet.writes = {chunked_head()};
    }
    quiet.hold = true;
    return quiet;
  });
  ClientOptions opts;
  opts.watch_read_idle_timeout = 250ms;
  auto client = make_client(io, config_for(server), opts);
  ReflectorOptions ro;
  ro.resource = resources::pods();
  ro.random = [] { return 0.0; };
  ro.watch_timeout_seconds = 100;
  std::vector<std::string> seen;
  Reflector reflector(client, ro, [&](const ReflectorEvent& e) {
    std::string s = reflector_event_type_name(e.type);
    if (e.object != nullptr) {
      s += ":" + name_of(*e.object);
    }
    seen.push_back(s + "@" + e.resource_version);
  });
  run_test(io, [&]() -> awaitable<void> {
    bool done = false;
    asio::co_spawn(io, reflector.run(), [&](std::exception_ptr) { done = true; });
    for (int i = 0; i < 500 && seen.size() < 4; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(seen.size() == 4);
    reflector.stop();
    for (int i = 0; i < 500 && !done; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(done);
  });
  CHECK(seen == std::vector<std::string>{"RELISTED@10", "ADDED:c@11", "BOOKMARK:@12", "MODIFIED:c@13"});
  CHECK(lists == 1);
  CHECK(reflector.relists() == 1);
  CHECK(reflector.idle_resumes() >= 1);
  REQUIRE(server.requests().size() >= 3);
  CHECK(server.requests()[1].target ==
        "/api/v1/pods?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=100");
  CHECK(server.requests()[2].target ==
        "/api/v1/pods?watch=1&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=100");
}

TEST_CASE("reflector delivers a paged list page by page, marking its first and last page, then watches") {
  asio::io_context io;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("watch=1") != std::string::npos) {
      Reply hold{{chunked_head()}};
      hold.hold = true;
      return hold;
    }
    if (r.target.find("continue=p2") != std::string::npos) {
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"e","managedFields":[{}]}}]})");
    }
    if (r.target.find("continue=p1") != std::string::npos) {
      return ok_json(
          R"({"kind":"PodList","metadata":{"resourceVersion":"7","continue":"p2"},"items":[{"metadata":{"name":"c"}},{"metadata":{"name":"d"}}]})");
    }
    return ok_json(
        R"({"kind":"PodList","metadata":{"resourceVersion":"7","continue":"p1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]})");
  });
  auto client = make_client(io, config_for(server));
  ReflectorOptions ro;
  ro.resource = resources::pods();
  ro.page_size = 2;
  ro.random = [] { return 0.0; };
  std::vector<std::string> seen;
  bool synced_during_pages = false;
  Reflector* self = nullptr;
  Reflector reflector(client, ro, [&](const ReflectorEvent& e) {
    REQUIRE(e.type == ReflectorEventType::relisted);
    synced_during_pages = synced_during_pages || self->has_synced();
    std::string s = e.relist_begins ? "[" : "";
    for (const auto& item : *e.items) {
      s += name_of(item);
      REQUIRE(item.at("metadata").as_object().if_contains("managedFields") == nullptr);
    }
    seen.push_back(s + (e.relist_complete ? "]" : ""));
  });
  self = &reflector;
  run_test(io, [&]() -> awaitable<void> {
    bool done = false;
    asio::co_spawn(io, reflector.run(), [&](std::exception_ptr) { done = true; });
    for (int i = 0; i < 500 && !reflector.has_synced(); ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(reflector.has_synced());
    reflector.stop();
    for (int i = 0; i < 500 && !done; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(done);
  });
  REQUIRE(seen == std::vector<std::string>{"[ab", "cd", "e]"});
  REQUIRE_FALSE(synced_during_pages);  // synced once the last page is in, not before
  REQUIRE(reflector.last_resource_version() == "7");
}

TEST_CASE("apply_keyed removes what no page of a list had, and only on its last page") {
  KeyedSet<std::string> keys;
  std::map<std::string, int> store;
  auto key_of = [](const boost::json::object& o) { return name_of(o); };
  auto upsert = [&](const boost::json::object& o) {
    keys.known.insert(name_of(o));
    ++store[name_of(o)];
  };
  auto remove = [&](const std::string& k) { store.erase(k); };
  auto named = [](std::initializer_list<const char*> names) {
    std::vector<boost::json::object> v;
    for (const char* n : names) {
      v.push_back(boost::json::object{{"metadata", boost::json::object{{"name", n}}}});
    }
    return v;
  };
  const auto first_list = named({"x", "y", "z"});
  ReflectorEvent whole;
  whole.type = ReflectorEventType::relisted;
  whole.items = &first_list;
  REQUIRE(apply_keyed(whole, keys, key_of, upsert, remove));
  REQUIRE(store.size() == 3);
  // A second list in two pages that no longer has y.
  const auto page1 = named({"z"});
  const auto page2 = named({"x", "w"});
  ReflectorEvent p1;
  p1.type = ReflectorEventType::relisted;
  p1.items = &page1;
  p1.relist_complete = false;
  ReflectorEvent p2;
  p2.type = ReflectorEventType::relisted;
  p2.items = &page2;
  p2.relist_begins = false;
  REQUIRE(apply_keyed(p1, keys, key_of, upsert, remove));
  REQUIRE(store.count("x") == 1);  // not on the first page, but the list is not over
  REQUIRE(store.count("y") == 1);
  REQUIRE(apply_keyed(p2, keys, key_of, upsert, remove));
  REQUIRE(store == std::map<std::string, int>{{"w", 1}, {"x", 2}, {"z", 2}});
  REQUIRE(keys.known == std::set<std::string>{"w", "x", "z"});
  REQUIRE(keys.listed.empty());
  // A list cut off after its first page (it failed and starts again) forgets that page's keys.
  const auto only_w = named({"w"});
  ReflectorEvent cut = p1;
  ReflectorEvent again = whole;
  again.items = &only_w;
  REQUIRE(apply_keyed(cut, keys, key_of, upsert, remove));  // z: listed, the list then fails
  REQUIRE(apply_keyed(again, keys, key_of, upsert, remove));
  REQUIRE(store == std::map<std::string, int>{{"w", 2}});
}

TEST_CASE("reflector retries a failing list with backoff") {
  asio::io_context io;
  int calls = 0;
  TestServer server(io, pki().server.cert_pem, pki().server.key_pem, [&](const Recorded& r) {
    if (r.target.find("watch=1") == std::string::npos) {
      if (++calls < 3) {
        return ok_json(status_body(503, "ServiceUnavailable", "starting"), 503);
      }
      return ok_json(R"({"kind":"NodeList","metadata":{"resourceVersion":"1"},"items":[]})");
    }
    Reply hold{{chunked_head()}};
    hold.hold = true;
    return hold;
  });
  auto client = make_client(io, config_for(server));
  ReflectorOptions ro;
  ro.resource = resources::nodes();
  ro.backoff = {10ms, 50ms, 2.0, 0.0};
  ro.random = [] { return 0.0; };
  int relisted = 0;
  Reflector reflector(client, ro, [&](const ReflectorEvent& e) { relisted += e.type == ReflectorEventType::relisted; });
  run_test(io, [&]() -> awaitable<void> {
    bool done = false;
    asio::co_spawn(io, reflector.run(), [&](std::exception_ptr) { done = true; });
    for (int i = 0; i < 500 && !reflector.has_synced(); ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(reflector.has_synced());
    co_await sleep_for(20ms);  // the watch is now connected and idle
    reflector.stop();
    for (int i = 0; i < 500 && !done; ++i) {
      co_await sleep_for(10ms);
    }
    REQUIRE(done);
  });
  REQUIRE(calls == 3);
  REQUIRE(relisted == 1);
}

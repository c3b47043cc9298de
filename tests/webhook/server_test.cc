// The TLS webhook server, in process on 127.0.0.1 port 0: a real AdmissionReview round trip with a Beast
// TLS client (and curl / openssl s_client where installed), every bad-input case of issue 2 item 6 followed
// by a good request, health and metrics endpoints, connection caps and the abuse cases of issue 14 item 3
// (idle floods, the ClientHello deadline, per-source limits, plain HTTP on the TLS port), certificate rotation.
#include "webhook/server.h"

#include "certs/certs.h"
#include "common/base64.h"
#include "common/config.h"
#include "common/log.h"
#include "common/metrics.h"
#include "tests/support/process.h"
#include "tests/webhook/tls_client.h"
#include "webhook/admission.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace wh = gpuslice::webhook;
namespace certs = gpuslice::certs;
namespace json = boost::json;
using namespace gpuslice::testing;
using namespace std::chrono_literals;

namespace {

/// A kubectl-produced GPU pod (tests/webhook/testdata/single.json) wrapped in an AdmissionReview.
std::string review_body(const std::string& uid, const std::string& api_version = "admission.k8s.io/v1") {
  json::value pod = json::parse(slurp(std::string(GPUSLICE_SOURCE_DIR) + "/tests/webhook/testdata/single.json"));
  json::object req{{"uid", uid},
                   {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                   {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                   {"namespace", "team-a"},
                   {"operation", "CREATE"},
                   {"object", pod}};
  return json::serialize(json::object{{"apiVersion", api_version}, {"kind", "AdmissionReview"}, {"request", req}});
}

/// A fresh CA + serving pair for 127.0.0.1 in a temp dir.
struct Pki {
  std::filesystem::path dir;
  certs::Bundle bundle;

  explicit Pki(const std::string& name) {
    dir = std::filesystem::temp_directory_path() / ("gpuslice-server-test-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    rotate();
  }
  ~Pki() { std::filesystem::remove_all(dir); }
  void rotate() {
    certs::ServingRequest req{"gpuslice", "kube-system", {"127.0.0.1"}, {"localhost"}, 2};
    auto b = certs::generate(req, static_cast<int64_t>(std::time(nullptr)));
    REQUIRE(b.ok());
    bundle = *b;
    REQUIRE(certs::write_bundle(bundle, dir.string()).ok());
  }
  std::string cert() const { return (dir / "tls.crt").string(); }
  std::string key() const { return (dir / "tls.key").string(); }
  std::string ca_file() const { return (dir / "ca.crt").string(); }
};

wh::ServerOptions test_options(const Pki& pki) {
  wh::ServerOptions o;
  o.bind_address = "127.0.0.1:0";
  o.tls_cert_file = pki.cert();
  o.tls_private_key_file = pki.key();
  o.threads = 2;
  o.max_body_bytes = 64 * 1024;
  o.max_header_bytes = 4 * 1024;
  o.handshake_timeout = 5s;
  o.read_timeout = 5s;
  o.idle_timeout = 30s;
  o.cert_poll_interval = 0ms;  // tests drive check_certificates() themselves unless they test the timer
  o.shutdown_grace = 1s;
  o.version = "test";
  return o;
}

/// test_options() with every deadline long except `deadline`, set to `value`: that deadline alone ends a
/// stalled connection, within a wait far shorter than the others.
wh::ServerOptions one_short_deadline(const Pki& pki, std::chrono::milliseconds wh::ServerOptions::*deadline,
                                     std::chrono::milliseconds value) {
  auto o = test_options(pki);
  o.client_hello_timeout = o.handshake_timeout = o.read_timeout = o.write_timeout = o.idle_timeout = 60s;
  o.*deadline = value;
  return o;
}

wh::ReviewHandler real_review() {
  static const gpuslice::Configuration config;
  return [](std::string_view body) { return wh::review(body, config); };
}

/// Decodes the patch of an AdmissionReview response and checks the contract fields.
json::array check_patched_response(const Response& res, const std::string& uid,
                                   const std::string& api_version = "admission.k8s.io/v1") {
  REQUIRE(res.result_int() == 200);
  auto v = json::parse(res.body());
  CHECK(v.at("apiVersion").as_string() == api_version);
  CHECK(v.at("kind").as_string() == "AdmissionReview");
  const auto& r = v.at("response");
  CHECK(r.at("uid").as_string() == uid);
  CHECK(r.at("allowed").as_bool());
  REQUIRE(r.as_object().contains("patch"));
  CHECK(r.at("patchType").as_string() == "JSONPatch");
  auto decoded = gpuslice::base64_decode(std::string(r.at("patch").as_string()));
  REQUIRE(decoded.has_value());
  return json::parse(*decoded).as_array();
}

/// The "server keeps serving everyone else" check after each abuse case: a new connection, a good review.
void expect_good_review(uint16_t port, const std::string& ca_pem, const std::string& uid = "after-abuse") {
  TlsClient c(port, ca_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body(uid)));
  REQUIRE_FALSE(ec);
  auto patch = check_patched_response(res, uid);
  CHECK_FALSE(patch.empty());
}

bool patch_sets_scheduler(const json::array& patch, const std::string& name) {
  for (const auto& op : patch) {
    if (op.at("path").as_string() == "/spec/schedulerName" && op.at("value").as_string() == name) {
      return true;
    }
  }
  return false;
}

double metric_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

/// A TCP connection from `source` (127.0.0.N) that sends nothing: one connection of an idle flood.
class IdleSocket {
 public:
  explicit IdleSocket(uint16_t port, const char* source = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, source, &src.sin_addr) == 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    REQUIRE(::inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr) == 1);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0);
  }
  ~IdleSocket() { ::close(fd_); }
  IdleSocket(const IdleSocket&) = delete;
  IdleSocket& operator=(const IdleSocket&) = delete;

  /// True when the server closed the connection (EOF or reset) within `timeout`.
  bool closed_within(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
      return false;
    }
    char c = 0;
    return ::recv(fd_, &c, 1, MSG_DONTWAIT) <= 0;
  }

 private:
  int fd_ = -1;
};

/// Waits until the server has accepted (and registered) `n` connections.
bool wait_open(const wh::Server& server, size_t n) {
  for (int i = 0; i < 400; ++i) {
    if (server.open_connections() == n) {
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

double closed_total(const std::string& reason) {
  double v = metric_value(gpuslice::metrics::default_registry().serialize(),
                          "gpuslice_webhook_connections_closed_total{reason=\"" + reason + "\"}");
  return v < 0 ? 0 : v;
}

}  // namespace

TEST_CASE("server: AdmissionReview v1 round trip over TLS rewrites a HAMi-style GPU pod") {
  Pki pki("roundtrip");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  REQUIRE(server.port() != 0);
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  for (const char* path : {"/mutate", "/webhook"}) {
    auto [ec, res] = c.request(make_request(http::verb::post, path, review_body(std::string("uid-") + path)));
    REQUIRE_FALSE(ec);
    CHECK(res[http::field::content_type] == "application/json");
    auto patch = check_patched_response(res, std::string("uid-") + path);
    CHECK(patch_sets_scheduler(patch, "gpuslice-scheduler"));
  }
  // Same keep-alive connection for both: one connection open on the server.
  CHECK(server.open_connections() == 1);
}

TEST_CASE("server: AdmissionReview v1beta1 is answered in v1beta1") {
  Pki pki("v1beta1");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body("b1", "admission.k8s.io/v1beta1")));
  REQUIRE_FALSE(ec);
  check_patched_response(res, "b1", "admission.k8s.io/v1beta1");
}

TEST_CASE("server: curl --cacert does a real AdmissionReview round trip") {
  if (!have_tool("curl")) {
    WARN("curl not installed; skipped");
    return;
  }
  Pki pki("curl");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  auto body_file = pki.dir / "review.json";
  std::ofstream(body_file) << review_body("curl-uid");
  int status = 0;
  std::string out = run_capture("curl -sS --max-time 20 --cacert " + pki.ca_file() +
                                    " -H 'Content-Type: application/json' --data-binary @" + body_file.string() +
                                    " https://127.0.0.1:" + std::to_string(server.port()) + "/mutate",
                                status);
  REQUIRE(status == 0);
  auto v = json::parse(out);
  CHECK(v.at("response").at("uid").as_string() == "curl-uid");
  CHECK(v.at("response").at("patchType").as_string() == "JSONPatch");
  // curl verifies the chain: with the wrong CA it must refuse.
  Pki other("curl-other");
  std::string bad =
      run_capture("curl -sS --max-time 20 --cacert " + other.ca_file() + " -o /dev/null -w '%{http_code}' " +
                      " https://127.0.0.1:" + std::to_string(server.port()) + "/livez 2>/dev/null",
                  status);
  CHECK(status != 0);
}

TEST_CASE("server: openssl s_client negotiates TLS 1.2/1.3 and is refused TLS 1.1 and 1.0") {
  if (!have_tool("openssl")) {
    WARN("openssl not installed; skipped");
    return;
  }
  Pki pki("sclient");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  const std::string base = "echo | timeout 20 openssl s_client -connect 127.0.0.1:" + std::to_string(server.port()) +
                           " -CAfile " + pki.ca_file() + " ";
  // s_client's exit status depends on how the close races its stdin EOF, so judge by what it printed:
  // the negotiated protocol and cipher, or "(NONE)" when the handshake was refused.
  int status = 0;
  std::string out = run_capture(base + "-tls1_2 2>&1", status);
  INFO(out);
  CHECK(out.find("Verify return code: 0 (ok)") != std::string::npos);
  CHECK(out.find("Protocol  : TLSv1.2") != std::string::npos);
  CHECK(out.find("Cipher is ECDHE-ECDSA-AES") != std::string::npos);
  out = run_capture(base + "-tls1_3 2>&1", status);
  CHECK(out.find("New, TLSv1.3, Cipher is TLS_") != std::string::npos);
  for (const char* old : {"-tls1_1", "-tls1"}) {
    out = run_capture(base + old + " -cipher DEFAULT@SECLEVEL=0 2>&1", status);
    CHECK(status != 0);
    CHECK(out.find("Cipher is (NONE)") != std::string::npos);
  }
  // A TLS 1.2 non-AEAD (CBC) cipher is refused as well.
  out = run_capture(base + "-tls1_2 -cipher ECDHE-ECDSA-AES128-SHA256 2>&1", status);
  CHECK(status != 0);
  CHECK(out.find("Cipher is (NONE)") != std::string::npos);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: TLS 1.0 and 1.1 handshakes are refused and the server keeps serving") {
  Pki pki("oldtls");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  for (int v : {TLS1_VERSION, TLS1_1_VERSION}) {
    TlsClient c(server.port(), pki.bundle.ca_cert_pem, v, v);
    CHECK(c.connect());
  }
  TlsClient ok12(server.port(), pki.bundle.ca_cert_pem, TLS1_2_VERSION, TLS1_2_VERSION);
  CHECK_FALSE(ok12.connect());
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: plain HTTP on the TLS port gets a plain 400 saying the port speaks TLS") {
  Pki pki("plain");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  const double before = closed_total("plain-http");
  RawClient raw(server.port());
  REQUIRE_FALSE(raw.connect());
  auto [ec, got] = raw.exchange(
      "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}",
      10s);
  CHECK(ec != beast::error::timeout);  // closed by the server, not by our deadline
  INFO(got);
  CHECK(got.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(got.find("Connection: close\r\n") != std::string::npos);
  CHECK(got.find("this port speaks TLS") != std::string::npos);
  CHECK(closed_total("plain-http") == before + 1);
  RawClient get(server.port());
  REQUIRE_FALSE(get.connect());
  auto [ec2, got2] = get.exchange("GET /readyz HTTP/1.0\r\n\r\n", 10s);
  CHECK(got2.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: malformed JSON gets 400 with the reason") {
  Pki pki("malformed");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", "{\"apiVersion\": "));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 400);
  CHECK(res.body().find("malformed JSON") != std::string::npos);
  // Same connection still usable.
  auto [ec2, res2] = c.request(make_request(http::verb::post, "/mutate", review_body("same-conn")));
  REQUIRE_FALSE(ec2);
  check_patched_response(res2, "same-conn");
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: JSON that is not an AdmissionReview gets 400") {
  Pki pki("notreview");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", R"({"apiVersion":"v1","kind":"Pod"})"));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 400);
  CHECK(res.body().find("not an AdmissionReview") != std::string::npos);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: AdmissionReview without request.uid gets 400") {
  Pki pki("nouid");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  auto v = json::parse(review_body("x"));
  v.at("request").as_object().erase("uid");
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", json::serialize(v)));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 400);
  CHECK(res.body().find("uid") != std::string::npos);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: wrong method on /mutate gets 405 with Allow: POST") {
  Pki pki("method");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::get, "/mutate"));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 405);
  CHECK(res[http::field::allow] == "POST");
  CHECK(res.body().find("use POST") != std::string::npos);
  auto [ec2, res2] = c.request(make_request(http::verb::post, "/livez", "{}"));
  REQUIRE_FALSE(ec2);
  CHECK(res2.result_int() == 405);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: unknown path gets 404") {
  Pki pki("path");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate-pods", review_body("x")));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 404);
  CHECK(res.body().find("/mutate-pods") != std::string::npos);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: wrong content type gets 415 and a charset parameter is accepted") {
  Pki pki("ctype");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  for (const char* ct : {"text/plain", "application/yaml", ""}) {
    auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body("ct"), ct));
    REQUIRE_FALSE(ec);
    CHECK(res.result_int() == 415);
    CHECK(res.body().find("application/json") != std::string::npos);
  }
  auto [ec, res] =
      c.request(make_request(http::verb::post, "/mutate", review_body("cs"), "Application/JSON; charset=utf-8"));
  REQUIRE_FALSE(ec);
  check_patched_response(res, "cs");
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: body over the limit gets 413") {
  Pki pki("body");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  std::string big = review_body("big");
  big.insert(big.size() - 1, ",\"pad\":\"" + std::string(70 * 1024, 'x') + "\"");
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", big));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 413);
  CHECK(res.body().find(std::to_string(64 * 1024)) != std::string::npos);
  CHECK_FALSE(res.keep_alive());
  // Just under the limit is fine.
  std::string fits = review_body("fits");
  fits.insert(fits.size() - 1, ",\"pad\":\"" + std::string(60 * 1024, 'x') + "\"");
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
  TlsClient c2(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c2.connect());
  auto [ec2, res2] = c2.request(make_request(http::verb::post, "/mutate", fits));
  REQUIRE_FALSE(ec2);
  check_patched_response(res2, "fits");
}

TEST_CASE("server: chunked body over the limit gets 413") {
  Pki pki("chunked");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  std::string raw =
      "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) {
    raw += "1000\r\n" + std::string(0x1000, ' ') + "\r\n";
  }
  raw += "0\r\n\r\n";
  REQUIRE_FALSE(c.write_raw(raw));
  auto [ec, res] = c.read_response();
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 413);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: oversized headers get 431 and the connection closed") {
  Pki pki("header");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto req = make_request(http::verb::post, "/mutate", review_body("hdr"));
  req.set("X-Padding", std::string(8 * 1024, 'h'));
  auto [ec, res] = c.request(req);
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 431);
  CHECK_FALSE(res.keep_alive());
  CHECK(c.wait_closed(10s) != beast::error::timeout);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: a client sending its request slowly hits the read deadline") {
  Pki pki("slow");
  auto o = test_options(pki);
  o.read_timeout = 400ms;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  // Half a header, then nothing: the server must close within read_timeout (we wait far longer).
  REQUIRE_FALSE(c.write_raw("POST /mutate HTTP/1.1\r\nHost: x\r\n"));
  auto ended = c.wait_closed(20s);
  CHECK(ended != beast::error::timeout);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: a client that never starts the TLS handshake hits the handshake deadline, not the read one") {
  Pki pki("handshake");
  wh::Server server(one_short_deadline(pki, &wh::ServerOptions::handshake_timeout, 400ms), real_review());
  REQUIRE(server.start().ok());
  RawClient raw(server.port());
  REQUIRE_FALSE(raw.connect());
  // Connected, sends nothing: closed at the handshake deadline.
  auto [ec, got] = raw.exchange("", 20s);
  CHECK(ec != beast::error::timeout);
  CHECK(got.empty());
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: a client that does not read its response hits the write deadline, not the read one") {
  Pki pki("write");
  // 64 MiB answers: more than the loopback socket buffers hold, so the write waits on the client.
  wh::Server server(one_short_deadline(pki, &wh::ServerOptions::write_timeout, 300ms), [](std::string_view) {
    wh::ReviewReply big;
    big.body.assign(64u << 20, ' ');
    return big;
  });
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  REQUIRE_FALSE(
      c.write_raw("POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"));
  // No read: the server gives up on the write and closes (seen as the connection count falling to 0).
  bool closed = false;
  for (int i = 0; i < 400 && !closed; ++i) {
    std::this_thread::sleep_for(50ms);
    closed = server.open_connections() == 0;
  }
  CHECK(closed);
  auto [ec, res] = c.read_response(20s);
  CHECK(ec);  // the 64 MiB body never completes
}

TEST_CASE("server: ServerOptions::from takes the handshake and write deadlines from their keys, else readTimeout") {
  gpuslice::Configuration c;
  c.webhook.read_timeout = 7s;
  auto o = wh::ServerOptions::from(c);
  CHECK(o.read_timeout == 7s);
  CHECK(o.handshake_timeout == 7s);
  CHECK(o.write_timeout == 7s);
  c.webhook.handshake_timeout = 2s;
  c.webhook.write_timeout = 30s;
  o = wh::ServerOptions::from(c);
  CHECK(o.read_timeout == 7s);
  CHECK(o.handshake_timeout == 2s);
  CHECK(o.write_timeout == 30s);
  CHECK(wh::ServerOptions::from(gpuslice::Configuration{}).handshake_timeout == 10s);  // today's default
}

TEST_CASE("server: an idle keep-alive client is closed at the idle deadline") {
  Pki pki("idle");
  auto o = test_options(pki);
  o.idle_timeout = 400ms;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body("before-idle")));
  REQUIRE_FALSE(ec);
  check_patched_response(res, "before-idle");
  CHECK(c.wait_closed(20s) != beast::error::timeout);
  // A connection that never sends a request is closed as well.
  TlsClient silent(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(silent.connect());
  CHECK(silent.wait_closed(20s) != beast::error::timeout);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: a handler that throws yields 500 and the server carries on") {
  Pki pki("throw");
  int calls = 0;
  wh::Server server(test_options(pki), [&](std::string_view body) -> wh::ReviewReply {
    if (calls++ == 0) {
      throw std::runtime_error("boom");
    }
    static const gpuslice::Configuration config;
    return wh::review(body, config);
  });
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body("t")));
  REQUIRE_FALSE(ec);
  CHECK(res.result_int() == 500);
  auto [ec2, res2] = c.request(make_request(http::verb::post, "/mutate", review_body("t2")));
  REQUIRE_FALSE(ec2);
  check_patched_response(res2, "t2");
}

TEST_CASE("server: livez readyz and healthz follow Kubernetes semantics and checks are registrable") {
  Pki pki("health");
  wh::Server server(test_options(pki), real_review());
  bool leader = false;
  server.readiness().add("leader", [&]() -> gpuslice::Status {
    if (leader) {
      return gpuslice::Status::Ok();
    }
    return gpuslice::make_error("not the leader");
  });
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto get = [&](const std::string& target) {
    auto [ec, res] = c.request(make_request(http::verb::get, target, "", ""));
    REQUIRE_FALSE(ec);
    return res;
  };
  CHECK(get("/livez").body() == "ok");
  CHECK(get("/healthz").result_int() == 200);
  auto r = get("/readyz");
  CHECK(r.result_int() == 500);
  CHECK(r.body().find("[-]leader failed") != std::string::npos);
  CHECK(r.body().find("[+]tls-certificate ok") != std::string::npos);
  CHECK(r.body().find("not the leader") == std::string::npos);  // reason withheld from unauthenticated probes
  CHECK(get("/readyz/leader").result_int() == 500);
  CHECK(get("/readyz/ping").body() == "ok");
  CHECK(get("/readyz/nope").result_int() == 404);
  CHECK(get("/readyz?exclude=leader").result_int() == 200);
  leader = true;
  r = get("/readyz?verbose");
  CHECK(r.result_int() == 200);
  CHECK(r.body().find("[+]leader ok") != std::string::npos);
  CHECK(r.body().find("readyz check passed") != std::string::npos);
  CHECK(get("/readyz").body() == "ok");
  // Checks added after start() count too.
  server.liveness().add("deadlock", [] { return gpuslice::Status(gpuslice::make_error("stuck")); });
  CHECK(get("/livez").result_int() == 500);
  CHECK(get("/healthz").result_int() == 500);
  server.liveness().remove("deadlock");
  CHECK(get("/livez").result_int() == 200);
}

TEST_CASE("server: /metrics exposes reviews by outcome and a latency histogram and build info") {
  Pki pki("metrics");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  TlsClient c(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto scrape = [&] {
    auto [ec, res] = c.request(make_request(http::verb::get, "/metrics", "", ""));
    REQUIRE_FALSE(ec);
    REQUIRE(res.result_int() == 200);
    CHECK(res[http::field::content_type].starts_with("text/plain; version=0.0.4"));
    return res.body();
  };
  auto before = scrape();
  double patched0 = metric_value(before, "gpuslice_webhook_reviews_total{outcome=\"patched\"}");
  double rejected0 = metric_value(before, "gpuslice_webhook_reviews_total{outcome=\"rejected\"}");
  double count0 = metric_value(before, "gpuslice_webhook_review_duration_seconds_count");
  REQUIRE(patched0 >= 0);
  REQUIRE(rejected0 >= 0);
  REQUIRE(count0 >= 0);
  for (int i = 0; i < 3; ++i) {
    auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", review_body("m" + std::to_string(i))));
    REQUIRE_FALSE(ec);
  }
  auto [ec, res] = c.request(make_request(http::verb::post, "/mutate", "not json"));
  REQUIRE_FALSE(ec);
  auto after = scrape();
  CHECK(metric_value(after, "gpuslice_webhook_reviews_total{outcome=\"patched\"}") == patched0 + 3);
  CHECK(metric_value(after, "gpuslice_webhook_reviews_total{outcome=\"rejected\"}") == rejected0 + 1);
  CHECK(metric_value(after, "gpuslice_webhook_review_duration_seconds_count") == count0 + 4);
  CHECK(after.find("# TYPE gpuslice_webhook_review_duration_seconds histogram") != std::string::npos);
  CHECK(after.find("gpuslice_webhook_review_duration_seconds_bucket{le=\"+Inf\"}") != std::string::npos);
  CHECK(metric_value(after, "gpuslice_build_info{version=\"test\"}") == 1);
}

TEST_CASE("server: plain-HTTP health listener serves probes and metrics but not reviews") {
  Pki pki("healthport");
  auto o = test_options(pki);
  o.health_bind_address = "127.0.0.1:0";
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  REQUIRE(server.health_port() != 0);
  REQUIRE(server.health_port() != server.port());
  RawClient raw(server.health_port());
  REQUIRE_FALSE(raw.connect());
  auto [ec, got] = raw.exchange("GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10s);
  CHECK(got.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(got.ends_with("ok"));
  RawClient raw2(server.health_port());
  REQUIRE_FALSE(raw2.connect());
  auto body = review_body("plain");
  auto [ec2, got2] = raw2.exchange(
      "POST /mutate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body,
      10s);
  CHECK(got2.rfind("HTTP/1.1 404", 0) == 0);
}

TEST_CASE("server: at the cap, connections that never sent a byte make room for a real TLS review") {
  Pki pki("flood");
  auto o = test_options(pki);
  o.max_connections = 4;
  o.client_hello_timeout = 60s;  // only the cap closes them here
  o.handshake_timeout = 60s;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  const double before = closed_total("evicted");
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<IdleSocket>(server.port()));
  }
  REQUIRE(wait_open(server, 4));
  // The API server's new connection is admitted; the oldest idle one goes.
  expect_good_review(server.port(), pki.bundle.ca_cert_pem, "at-cap");
  CHECK(idle[0]->closed_within(5s));
  for (int i = 1; i < 4; ++i) {
    CHECK_FALSE(idle[i]->closed_within(0ms));
  }
  CHECK(closed_total("evicted") == before + 1);
  // Reviews keep being admitted while the flood holds the cap, each one making room again.
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<IdleSocket>(server.port()));
    expect_good_review(server.port(), pki.bundle.ca_cert_pem, "flood-" + std::to_string(i));
  }
}

TEST_CASE("server: at the cap with every connection established, the oldest idle keep-alive one makes room") {
  Pki pki("idlecap");
  auto o = test_options(pki);
  o.max_connections = 2;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  TlsClient a(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(a.connect());
  auto [ea, ra] = a.request(make_request(http::verb::get, "/livez", "", ""));  // established on both sides
  REQUIRE_FALSE(ea);
  TlsClient b(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(b.connect());
  auto [eb, rb] = b.request(make_request(http::verb::get, "/livez", "", ""));  // b is idle after a
  REQUIRE_FALSE(eb);
  REQUIRE(wait_open(server, 2));
  expect_good_review(server.port(), pki.bundle.ca_cert_pem, "third");
  CHECK(a.wait_closed(10s) != beast::error::timeout);  // a was idle longest
  auto [ec, res] = b.request(make_request(http::verb::get, "/livez", "", ""));
  CHECK_FALSE(ec);
}

TEST_CASE("server: a keep-alive connection that answered again is younger in the idle order than one that did not") {
  // The idle order is by the time a connection last became idle (it goes busy and idle again on every request).
  Pki pki("idlereorder");
  auto o = test_options(pki);
  o.max_connections = 3;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  std::vector<std::unique_ptr<TlsClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<TlsClient>(server.port(), pki.bundle.ca_cert_pem));
    REQUIRE_FALSE(clients.back()->connect());
    auto [e, r] = clients.back()->request(make_request(http::verb::get, "/livez", "", ""));
    REQUIRE_FALSE(e);
  }
  REQUIRE(wait_open(server, 3));
  auto [e0, r0] = clients[0]->request(make_request(http::verb::post, "/mutate", review_body("again")));
  REQUIRE_FALSE(e0);
  check_patched_response(r0, "again");
  expect_good_review(server.port(), pki.bundle.ca_cert_pem, "fourth");
  CHECK(clients[1]->wait_closed(10s) != beast::error::timeout);  // idle longest: the first to answer only once
  for (int i : {0, 2}) {
    auto [ec, res] = clients[static_cast<size_t>(i)]->request(make_request(http::verb::get, "/livez", "", ""));
    CHECK_FALSE(ec);
  }
}

TEST_CASE("server: with 1 and 3 threads every keep-alive connection is answered in order and stop() closes them all") {
  Pki pki("threads");
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    auto o = test_options(pki);
    o.threads = threads;
    auto server = std::make_unique<wh::Server>(o, real_review());
    REQUIRE(server->start().ok());
    std::vector<std::unique_ptr<TlsClient>> clients;
    for (int i = 0; i < 7; ++i) {
      clients.push_back(std::make_unique<TlsClient>(server->port(), pki.bundle.ca_cert_pem));
      REQUIRE_FALSE(clients.back()->connect());
    }
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < clients.size(); ++i) {
        const std::string uid = "t" + std::to_string(i) + "-" + std::to_string(round);
        auto [ec, res] = clients[i]->request(make_request(http::verb::post, "/mutate", review_body(uid)));
        REQUIRE_FALSE(ec);
        check_patched_response(res, uid);
      }
    }
    REQUIRE(wait_open(*server, clients.size()));
    server->stop();
    for (auto& c : clients) {
      CHECK(c->wait_closed(10s) != beast::error::timeout);
    }
    CHECK(server->open_connections() == 0);
    server.reset();
  }
}

TEST_CASE("server: a review that blocks its thread does not hold up the other connections' reviews") {
  // Connections are not pinned to a thread: while one review is stuck, the other thread answers every other
  // connection (with one io_context per thread, the stuck thread's other connections would wait with it).
  Pki pki("holblock");
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  bool entered = false;
  static const gpuslice::Configuration config;
  wh::Server server(test_options(pki), [&](std::string_view body) {
    if (body.find("\"block\"") != std::string_view::npos) {
      std::unique_lock lock(mu);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return wh::review(body, config);
  });
  REQUIRE(server.start().ok());
  std::vector<std::unique_ptr<TlsClient>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::make_unique<TlsClient>(server.port(), pki.bundle.ca_cert_pem));
    REQUIRE_FALSE(clients.back()->connect());
  }
  std::thread blocked([&] {
    auto [ec, res] = clients[0]->request(make_request(http::verb::post, "/mutate", review_body("block")), 30s);
    CHECK_FALSE(ec);
  });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 10s, [&] { return entered; }));
  }
  for (size_t i = 1; i < clients.size(); ++i) {
    const std::string uid = "free" + std::to_string(i);
    auto [ec, res] = clients[i]->request(make_request(http::verb::post, "/mutate", review_body(uid)));
    CHECK_FALSE(ec);
    check_patched_response(res, uid);
  }
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  blocked.join();
}

TEST_CASE("server: at the cap with every connection inside a request, the new one is closed") {
  Pki pki("busycap");
  auto o = test_options(pki);
  o.max_connections = 1;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  bool entered = false;
  wh::Server server(o, [&](std::string_view body) {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    static const gpuslice::Configuration config;
    return wh::review(body, config);
  });
  REQUIRE(server.start().ok());
  TlsClient a(server.port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(a.connect());
  std::pair<error_code, Response> answer;
  std::thread in_flight([&] { answer = a.request(make_request(http::verb::post, "/mutate", review_body("busy"))); });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 10s, [&] { return entered; }));
  }
  TlsClient refused(server.port(), pki.bundle.ca_cert_pem);
  CHECK(refused.connect());  // accepted, then closed at once: the handshake fails
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  in_flight.join();
  REQUIRE_FALSE(answer.first);
  check_patched_response(answer.second, "busy");
  // a is idle again (once the server has written its answer): a new connection takes its room.
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    TlsClient d(server.port(), pki.bundle.ca_cert_pem);
    if (!d.connect()) {
      auto [ec, res] = d.request(make_request(http::verb::post, "/mutate", review_body("after-busy")));
      served = !ec && res.result_int() == 200;
    } else {
      std::this_thread::sleep_for(20ms);
    }
  }
  CHECK(served);
}

TEST_CASE("server: a connection that sends no ClientHello is closed at the ClientHello deadline") {
  Pki pki("hello");
  wh::Server server(one_short_deadline(pki, &wh::ServerOptions::client_hello_timeout, 300ms), real_review());
  REQUIRE(server.start().ok());
  const double before = closed_total("client-hello-timeout");
  IdleSocket idle(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(idle.closed_within(20s));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // long before the 60 s handshake deadline
  CHECK(closed_total("client-hello-timeout") == before + 1);
  // A client that sends its ClientHello at once is not affected.
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE(
    "server: one source may hold max_pending_per_source connections in their handshake, established ones "
    "uncounted") {
  Pki pki("persource");
  auto o = test_options(pki);
  o.max_pending_per_source = 3;
  o.client_hello_timeout = o.handshake_timeout = 60s;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  const double before = closed_total("per-source");
  // Established connections from 127.0.0.1 (where the tests' TLS clients come from) do not count.
  std::vector<std::unique_ptr<TlsClient>> established;
  for (int i = 0; i < 4; ++i) {
    established.push_back(std::make_unique<TlsClient>(server.port(), pki.bundle.ca_cert_pem));
    REQUIRE_FALSE(established.back()->connect());
    // Answered: the server has finished its side of the handshake too (TLS 1.3's client finishes first).
    auto [ec, res] = established.back()->request(make_request(http::verb::get, "/livez", "", ""));
    REQUIRE_FALSE(ec);
  }
  std::vector<std::unique_ptr<IdleSocket>> local;
  for (int i = 0; i < 3; ++i) {
    local.push_back(std::make_unique<IdleSocket>(server.port(), "127.0.0.1"));
  }
  std::vector<std::unique_ptr<IdleSocket>> other;
  for (int i = 0; i < 3; ++i) {
    other.push_back(std::make_unique<IdleSocket>(server.port(), "127.0.0.2"));
  }
  REQUIRE(wait_open(server, 10));
  CHECK(closed_total("per-source") == before);
  // A fourth pending one from 127.0.0.1 closes that source's oldest pending one, nobody else's.
  local.push_back(std::make_unique<IdleSocket>(server.port(), "127.0.0.1"));
  CHECK(local[0]->closed_within(5s));
  CHECK(closed_total("per-source") == before + 1);
  for (size_t i = 1; i < local.size(); ++i) {
    CHECK_FALSE(local[i]->closed_within(0ms));
  }
  for (auto& s : other) {
    CHECK_FALSE(s->closed_within(0ms));
  }
  for (auto& c : established) {
    auto [ec, res] = c->request(make_request(http::verb::get, "/livez", "", ""));
    CHECK_FALSE(ec);
  }
  expect_good_review(server.port(), pki.bundle.ca_cert_pem);
}

TEST_CASE("server: the health listener has its own cap and answers probes while the webhook port is flooded") {
  Pki pki("healthcap");
  auto o = test_options(pki);
  o.health_bind_address = "127.0.0.1:0";
  o.max_connections = 3;
  o.client_hello_timeout = o.handshake_timeout = 60s;
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  std::vector<std::unique_ptr<IdleSocket>> flood;
  for (int i = 0; i < 3; ++i) {
    flood.push_back(std::make_unique<IdleSocket>(server.port()));
  }
  REQUIRE(wait_open(server, 3));
  for (int i = 0; i < 3; ++i) {
    RawClient probe(server.health_port());
    REQUIRE_FALSE(probe.connect());
    auto [ec, got] = probe.exchange("GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10s);
    INFO(got);
    CHECK(got.rfind("HTTP/1.1 200", 0) == 0);
  }
  for (auto& s : flood) {
    CHECK_FALSE(s->closed_within(0ms));  // the probes took no room on the webhook listener
  }
}

TEST_CASE("server: ServerOptions::from takes the connection limits and the ClientHello deadline") {
  gpuslice::Configuration c;
  auto o = wh::ServerOptions::from(c);
  CHECK(o.client_hello_timeout == 3s);
  CHECK(o.max_connections == 4096);
  CHECK(o.max_pending_per_source == 1024);
  c.webhook.client_hello_timeout = 1500ms;
  c.webhook.max_connections = 10;
  c.webhook.max_pending_per_source = 2;
  o = wh::ServerOptions::from(c);
  CHECK(o.client_hello_timeout == 1500ms);
  CHECK(o.max_connections == 10);
  CHECK(o.max_pending_per_source == 2);
}

TEST_CASE("server: certificate rotation applies to new connections without dropping open ones") {
  Pki pki("rotate");
  wh::Server server(test_options(pki), real_review());
  REQUIRE(server.start().ok());
  CHECK(server.certificate_generation() == 1);
  const std::string old_ca = pki.bundle.ca_cert_pem;
  TlsClient open_conn(server.port(), old_ca);
  REQUIRE_FALSE(open_conn.connect());
  auto [e0, r0] = open_conn.request(make_request(http::verb::post, "/mutate", review_body("r0")));
  REQUIRE_FALSE(e0);

  CHECK(server.check_certificates().ok());  // nothing changed yet
  CHECK(server.certificate_generation() == 1);

  pki.rotate();  // a new CA and serving pair
  CHECK(server.check_certificates().ok());
  CHECK(server.certificate_generation() == 2);

  // The open keep-alive connection keeps working on its old session.
  auto [e1, r1] = open_conn.request(make_request(http::verb::post, "/mutate", review_body("r1")));
  REQUIRE_FALSE(e1);
  check_patched_response(r1, "r1");
  // New connections get the new certificate: the new CA verifies it, the old one does not.
  TlsClient with_old(server.port(), old_ca);
  CHECK(with_old.connect());
  expect_good_review(server.port(), pki.bundle.ca_cert_pem, "after-rotation");

  // A bad pair (key of another certificate) is rejected and the current one kept.
  const std::string good_ca = pki.bundle.ca_cert_pem;
  { std::ofstream(pki.key(), std::ios::trunc) << pki.bundle.ca_key_pem; }
  auto st = server.check_certificates();
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("tls-private-key-file") != std::string::npos);
  CHECK(server.certificate_generation() == 2);
  expect_good_review(server.port(), good_ca, "after-bad-pair");
  // Fixing the key is picked up on the next check.
  { std::ofstream(pki.key(), std::ios::trunc) << pki.bundle.key_pem; }
  CHECK(server.check_certificates().ok());
  CHECK(server.certificate_generation() == 3);
  expect_good_review(server.port(), good_ca, "after-fix");
}

TEST_CASE("server: the poll timer picks up rotation with an injected stat") {
  Pki pki("poll");
  auto o = test_options(pki);
  o.cert_poll_interval = 20ms;
  std::atomic<int64_t> fake_mtime{1};
  o.stat = [&](const std::string& p) {
    auto s = certs::stat_file(p);
    s.mtime_ns = fake_mtime.load();  // only the injected field moves, so the real rewrite alone is not enough
    s.inode = 1;
    s.size = 1;
    return s;
  };
  wh::Server server(o, real_review());
  REQUIRE(server.start().ok());
  pki.rotate();
  fake_mtime = 2;
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    std::this_thread::sleep_for(20ms);
    seen = server.certificate_generation() == 2;
  }
  CHECK(seen);
  expect_good_review(server.port(), pki.bundle.ca_cert_pem, "polled");
}

TEST_CASE("server: start() errors name the field and value") {
  Pki pki("errors");
  auto o = test_options(pki);
  o.bind_address = "127.0.0.1:99999";
  auto st = wh::Server(o, real_review()).start();
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("webhook-bind-address: \"127.0.0.1:99999\"") != std::string::npos);
  o = test_options(pki);
  o.tls_cert_file = (pki.dir / "missing.crt").string();
  st = wh::Server(o, real_review()).start();
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("tls-cert-file") != std::string::npos);
  CHECK(st.message().find("missing.crt") != std::string::npos);
  o = test_options(pki);
  o.bind_address = "example.com:443";
  st = wh::Server(o, real_review()).start();
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("not an IP address") != std::string::npos);
}

TEST_CASE("server: stop() with an open idle connection returns and closes it") {
  Pki pki("stop");
  auto server = std::make_unique<wh::Server>(test_options(pki), real_review());
  REQUIRE(server->start().ok());
  TlsClient c(server->port(), pki.bundle.ca_cert_pem);
  REQUIRE_FALSE(c.connect());
  auto [ec, res] = c.request(make_request(http::verb::get, "/readyz", "", ""));
  REQUIRE_FALSE(ec);
  server->stop();
  CHECK(c.wait_closed(10s) != beast::error::timeout);
  server.reset();
}

// webhook::route() without sockets: every route of the webhook and probe listeners, each answer compared with
// the full status, headers and text the TLS server sends (tests/webhook/server_test.cc checks the same paths
// over real connections).
#include "webhook/router.h"

#include "common/config.h"
#include "common/health.h"
#include "tests/webhook/http_request.h"
#include "webhook/admission.h"

#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wh = gpuslice::webhook;
namespace http = boost::beast::http;
namespace json = boost::json;
using gpuslice::HealthChecks;
using gpuslice::Status;

namespace {

using gpuslice::testing::make_request;

/// A kubectl-produced GPU pod (tests/webhook/testdata/single.json) wrapped in an AdmissionReview.
std::string review_body(const std::string& uid) {
  std::ifstream in(std::string(GPUSLICE_SOURCE_DIR) + "/tests/webhook/testdata/single.json", std::ios::binary);
  std::ostringstream pod;
  pod << in.rdbuf();
  json::object req{{"uid", uid},
                   {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                   {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                   {"namespace", "team-a"},
                   {"operation", "CREATE"},
                   {"object", json::parse(pod.str())}};
  return json::serialize(
      json::object{{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", req}});
}

/// The webhook listener's routes over the real review() and the given checks; /metrics serves `metrics_text`.
struct Fixture {
  gpuslice::Configuration config;
  HealthChecks liveness{"livez"};
  HealthChecks readiness{"readyz"};
  std::string metrics_text = "# TYPE x counter\nx 1\n";
  wh::Routes routes{.review = [this](std::string_view body) { return wh::review(body, config); },
                    .liveness = &liveness,
                    .readiness = &readiness,
                    .metrics = [this] { return metrics_text; }};

  Fixture() {
    liveness.add("ping", [] { return Status::Ok(); });
    readiness.add("ping", [] { return Status::Ok(); });
  }
  wh::Routed get(const std::string& target) { return wh::route(routes, make_request(http::verb::get, target, "", "")); }
};

void check_text(const wh::Response& r, unsigned status, const std::string& body) {
  CHECK(r.result_int() == status);
  CHECK(r[http::field::content_type] == "text/plain; charset=utf-8");
  CHECK(r.body() == body);
  CHECK(r[http::field::content_length] == std::to_string(body.size()));
}

}  // namespace

TEST_CASE("router: POST /mutate and /webhook run the review and answer its AdmissionReview") {
  Fixture f;
  for (const char* path : {"/mutate", "/webhook"}) {
    auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, path, review_body(path)));
    CHECK(handler == "review");
    REQUIRE(r.result_int() == 200);
    CHECK(r[http::field::content_type] == "application/json");
    CHECK(r.keep_alive());
    CHECK(r[http::field::content_length] == std::to_string(r.body().size()));
    auto v = json::parse(r.body());
    CHECK(v.at("kind").as_string() == "AdmissionReview");
    CHECK(v.at("response").at("uid").as_string() == path);
    CHECK(v.at("response").at("patchType").as_string() == "JSONPatch");
  }
  // The request's HTTP version and Connection: close carry over.
  auto req = make_request(http::verb::post, "/mutate", review_body("close"));
  req.version(10);
  req.keep_alive(false);
  auto [r, handler] = wh::route(f.routes, req);
  CHECK(r.version() == 10);
  CHECK_FALSE(r.keep_alive());
}

TEST_CASE("router: review body errors are the codec's 400 with its reason") {
  Fixture f;
  auto [r1, h1] = wh::route(f.routes, make_request(http::verb::post, "/mutate", "{\"apiVersion\": "));
  CHECK(h1 == "review");
  CHECK(r1.result_int() == 400);
  CHECK(r1.body().find("malformed JSON") != std::string::npos);
  auto [r2, h2] = wh::route(f.routes, make_request(http::verb::post, "/mutate", R"({"apiVersion":"v1","kind":"Pod"})"));
  CHECK(r2.result_int() == 400);
  CHECK(r2.body().find("not an AdmissionReview") != std::string::npos);
  CHECK(r2.keep_alive());  // a bad body does not end the connection
}

TEST_CASE("router: a Content-Type other than application/json gets 415; parameters and case are accepted") {
  Fixture f;
  for (std::string ct : {"text/plain", "application/yaml", "", "application/jsonx"}) {
    auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, "/mutate", review_body("ct"), ct));
    CHECK(handler == "review");
    check_text(r, 415, "415 unsupported media type: Content-Type \"" + ct + "\" (want application/json)\n");
  }
  for (const char* ct : {"Application/JSON; charset=utf-8", " application/json ;charset=UTF-8", "application/json"}) {
    auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, "/mutate", review_body("ok"), ct));
    CHECK(r.result_int() == 200);
  }
}

TEST_CASE("router: a review handler that throws gets 500 for that request only") {
  Fixture f;
  f.routes.review = [](std::string_view) -> wh::ReviewReply { throw std::runtime_error("boom"); };
  auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, "/mutate", review_body("t")));
  CHECK(handler == "review");
  check_text(r, 500, "500 internal server error: the review failed\n");
  CHECK(r.keep_alive());
}

TEST_CASE("router: the wrong method gets 405 with Allow") {
  Fixture f;
  for (auto verb : {http::verb::get, http::verb::put, http::verb::head}) {
    auto [r, handler] = wh::route(f.routes, make_request(verb, "/webhook"));
    CHECK(handler == "review");
    CHECK(r.result_int() == 405);
    CHECK(r[http::field::allow] == "POST");
    if (verb == http::verb::get) {
      check_text(r, 405, "405 method not allowed: GET /webhook (use POST)\n");
    }
  }
  auto [live, h1] = wh::route(f.routes, make_request(http::verb::post, "/livez/ping", "{}"));
  CHECK(h1 == "health");
  check_text(live, 405, "405 method not allowed: POST /livez/ping (use GET)\n");
  CHECK(live[http::field::allow] == "GET, HEAD");
  auto [metrics, h2] = wh::route(f.routes, make_request(http::verb::delete_, "/metrics"));
  CHECK(h2 == "metrics");
  check_text(metrics, 405, "405 method not allowed: DELETE /metrics (use GET)\n");
  CHECK(metrics[http::field::allow] == "GET, HEAD");
}

TEST_CASE("router: unknown paths get 404 naming the path") {
  Fixture f;
  for (const char* path : {"/", "/mutate-pods", "/mutate/x", "/livezz", "/livez/", "/readyzx/ping", "/metrics/x"}) {
    auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, path, review_body("x")));
    CHECK(handler == "other");
    check_text(r, 404, "404 page not found: " + std::string(path) + "\n");
  }
  // The query is not part of the path.
  auto [r, handler] = f.get("/nope?verbose");
  check_text(r, 404, "404 page not found: /nope\n");
}

TEST_CASE("router: the probe listener (no review route) answers reviews with 404") {
  Fixture f;
  f.routes.review = nullptr;
  auto [r, handler] = wh::route(f.routes, make_request(http::verb::post, "/mutate", review_body("plain")));
  CHECK(handler == "other");
  check_text(r, 404, "404 page not found: /mutate is served on the TLS port only\n");
  CHECK(f.get("/readyz").response.result_int() == 200);
}

TEST_CASE("router: /livez, /healthz and /readyz serve their checks with Kubernetes semantics") {
  Fixture f;
  bool leader = false;
  f.readiness.add("leader", [&]() -> Status {
    return leader ? Status::Ok() : Status(gpuslice::make_error("not the leader (identity a)"));
  });
  auto [live, handler] = f.get("/livez");
  CHECK(handler == "health");
  check_text(live, 200, "ok");
  check_text(f.get("/healthz").response, 200, "ok");
  check_text(f.get("/livez?verbose").response, 200, "[+]ping ok\nlivez check passed\n");
  check_text(f.get("/readyz").response, 500, "[+]ping ok\n[-]leader failed: reason withheld\nreadyz check failed\n");
  check_text(f.get("/readyz/leader").response, 500, "internal server error: leader check failed\n");
  check_text(f.get("/readyz/ping").response, 200, "ok");
  check_text(f.get("/readyz/nope").response, 404, "404 page not found: no check \"nope\" under /readyz\n");
  check_text(f.get("/readyz?exclude=leader").response, 200, "ok");
  check_text(f.get("/readyz?verbose&exclude=leader").response, 200,
             "[+]ping ok\n[+]leader excluded: ok\nreadyz check passed\n");
  leader = true;
  check_text(f.get("/readyz?verbose").response, 200, "[+]ping ok\n[+]leader ok\nreadyz check passed\n");
  // /healthz is the liveness set: a failing liveness check fails both.
  f.liveness.add("deadlock", [] { return Status(gpuslice::make_error("stuck")); });
  CHECK(f.get("/livez").response.result_int() == 500);
  check_text(f.get("/healthz").response, 500, "[+]ping ok\n[-]deadlock failed: reason withheld\nlivez check failed\n");
}

TEST_CASE("router: /metrics serves the registry text with the Prometheus content type") {
  Fixture f;
  auto [r, handler] = f.get("/metrics");
  CHECK(handler == "metrics");
  CHECK(r.result_int() == 200);
  CHECK(r[http::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r.body() == f.metrics_text);
  f.routes.metrics = []() -> std::string { throw std::runtime_error("registry broke"); };
  auto [broken, h2] = f.get("/metrics");
  check_text(broken, 500, "500 internal server error\n");
  f.routes.metrics = nullptr;
  CHECK(f.get("/metrics").response.result_int() == 404);
}

TEST_CASE("router: HEAD is GET without the body, with GET's Content-Length") {
  Fixture f;
  auto [r, handler] = wh::route(f.routes, make_request(http::verb::head, "/metrics", "", ""));
  CHECK(r.result_int() == 200);
  CHECK(r.body().empty());
  CHECK(r[http::field::content_length] == std::to_string(f.metrics_text.size()));
  auto [live, h2] = wh::route(f.routes, make_request(http::verb::head, "/livez", "", ""));
  CHECK(live.body().empty());
  CHECK(live[http::field::content_length] == "2");
}

TEST_CASE("router: the answers to refused requests close the connection and name the limit") {
  auto body = wh::body_too_large(65536);
  check_text(body, 413, "413 request entity too large: the body exceeds the limit of 65536 bytes\n");
  CHECK_FALSE(body.keep_alive());
  CHECK(body[http::field::connection] == "close");
  auto header = wh::header_too_large(4096);
  check_text(header, 431, "431 request header fields too large: the header exceeds the limit of 4096 bytes\n");
  CHECK_FALSE(header.keep_alive());
  auto bad = wh::malformed_request("bad method");
  check_text(bad, 400, "400 bad request: malformed HTTP: bad method\n");
  CHECK_FALSE(bad.keep_alive());
}

TEST_CASE("router: registered pages answer GET and HEAD with their query; other methods 405; unknown paths 404") {
  Fixture f;
  gpuslice::Pages pages;
  std::string seen_query;
  pages.add("/status.json", [&](std::string_view query) {
    seen_query = std::string(query);
    return gpuslice::Page{200, "application/json", "{\"ok\":true}"};
  });
  pages.add("/broken", [](std::string_view) -> gpuslice::Page { throw std::runtime_error("view broke"); });
  CHECK(f.get("/status.json").response.result_int() == 404);  // no pages on these routes
  f.routes.pages = &pages;
  auto [r, handler] = f.get("/status.json?limit=5&sort=used");
  CHECK(handler == "page");
  CHECK(r.result_int() == 200);
  CHECK(r[http::field::content_type] == "application/json");
  CHECK(r[http::field::cache_control] == "no-store");
  CHECK(r["X-Content-Type-Options"] == "nosniff");
  CHECK(r.body() == "{\"ok\":true}");
  CHECK(seen_query == "limit=5&sort=used");
  auto [head, h2] = wh::route(f.routes, make_request(http::verb::head, "/status.json", "", ""));
  CHECK(head.body().empty());
  CHECK(head[http::field::content_length] == "11");
  auto [post, h3] = wh::route(f.routes, make_request(http::verb::post, "/status.json", "", ""));
  check_text(post, 405, "405 method not allowed: POST /status.json (use GET)\n");
  CHECK(post[http::field::allow] == "GET, HEAD");
  check_text(f.get("/status.json/x").response, 404, "404 page not found: /status.json/x\n");
  check_text(f.get("/broken").response, 500, "500 internal server error\n");
  pages.remove("/status.json");
  CHECK(f.get("/status.json").response.result_int() == 404);
}

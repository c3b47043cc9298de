// Pure helpers: backoff, token bucket, paths and queries, server URLs.
#include "kube/backoff.h"
#include "kube/rate_limiter.h"
#include "kube/url.h"

#include <catch2/catch.hpp>

using namespace gpuslice::kube;
using namespace std::chrono_literals;

TEST_CASE("backoff grows exponentially to the cap, with jitter from the injected source") {
  double u = 0.0;
  Backoff b({100ms, 1000ms, 2.0, 0.5}, [&] { return u; });
  REQUIRE(b.next() == 100ms);
  REQUIRE(b.next() == 200ms);
  REQUIRE(b.next() == 400ms);
  REQUIRE(b.next() == 800ms);
  REQUIRE(b.next() == 1000ms);
  REQUIRE(b.next() == 1000ms);
  REQUIRE(b.attempts() == 6);
  u = 0.5;
  REQUIRE(b.next() == 1250ms);  // 1000 * (1 + 0.5 * 0.5)
  b.reset();
  REQUIRE(b.next() == 125ms);
}

TEST_CASE("backoff tolerates a broken random source and huge attempt counts") {
  Backoff b({10ms, 50ms, 3.0, 1.0}, [] { return 7.0; });
  for (int i = 0; i < 2000; ++i) {
    auto d = b.next();
    REQUIRE(d >= 10ms);
    REQUIRE(d <= 50ms);
  }
}

TEST_CASE("backoff with a seeded source is deterministic and within bounds") {
  Backoff a({100ms, 10s, 2.0, 0.5}, make_uniform_random(42));
  Backoff c({100ms, 10s, 2.0, 0.5}, make_uniform_random(42));
  for (int i = 0; i < 20; ++i) {
    auto x = a.next();
    REQUIRE(x == c.next());
    REQUIRE(x <= 15s);
  }
}

TEST_CASE("token bucket: burst, then qps, with injected time") {
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  TokenBucket tb(10.0, 3, t0);
  REQUIRE(tb.reserve(t0) == 0ms);
  REQUIRE(tb.reserve(t0) == 0ms);
  REQUIRE(tb.reserve(t0) == 0ms);
  // Fourth request: 1/10 s until a token refills; fifth borrows one more.
  REQUIRE(std::chrono::duration_cast<std::chrono::milliseconds>(tb.reserve(t0)) == 100ms);
  REQUIRE(std::chrono::duration_cast<std::chrono::milliseconds>(tb.reserve(t0)) == 200ms);
  REQUIRE_FALSE(tb.try_take(t0));
  // After a second, 10 tokens refilled minus the 2 borrowed, capped at the burst.
  REQUIRE(tb.tokens(t0 + 1s) == Approx(3.0));
  REQUIRE(tb.try_take(t0 + 1s));
  REQUIRE(tb.tokens(t0 + 1s) == Approx(2.0));
  // Time running backwards does not mint tokens.
  REQUIRE(tb.tokens(t0) == Approx(2.0));
}

TEST_CASE("token bucket with qps <= 0 is unlimited") {
  const auto t0 = std::chrono::steady_clock::time_point{};
  TokenBucket tb(0, 1, t0);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(tb.reserve(t0) == 0ms);
  }
  REQUIRE(tb.unlimited());
}

TEST_CASE("collection and object paths") {
  REQUIRE(collection_path(resources::pods()) == "/api/v1/pods");
  REQUIRE(collection_path(resources::pods(), "kube-system") == "/api/v1/namespaces/kube-system/pods");
  REQUIRE(collection_path(resources::nodes(), "ignored") == "/api/v1/nodes");
  REQUIRE(object_path(resources::pods(), "ns", "p-1", "binding") == "/api/v1/namespaces/ns/pods/p-1/binding");
  REQUIRE(object_path(resources::leases(), "kube-system", "gpuslice") ==
          "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpuslice");
  REQUIRE(collection_path(resources::events(), "default") == "/apis/events.k8s.io/v1/namespaces/default/events");
  REQUIRE(object_path(resources::nodes(), "", "a/b c") == "/api/v1/nodes/a%2Fb%20c");
}

TEST_CASE("query building escapes selectors") {
  ListOptions lo;
  lo.label_selector = "app in (a,b),tier!=db";
  lo.field_selector = "spec.nodeName=,spec.schedulerName=gpuslice-scheduler";
  lo.limit = 100;
  lo.continue_token = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTB9+/=";
  REQUIRE(build_query(list_query(lo)) ==
          "?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb"
          "&fieldSelector=spec.nodeName%3D%2Cspec.schedulerName%3Dgpuslice-scheduler"
          "&limit=100&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTB9%2B%2F%3D");
  ListOptions none;
  none.limit = 0;
  REQUIRE(build_query(list_query(none)).empty());

  WatchOptions wo;
  wo.resource_version = "12345";
  wo.timeout_seconds = 290;
  REQUIRE(build_query(watch_query(wo)) == "?watch=1&resourceVersion=12345&allowWatchBookmarks=true&timeoutSeconds=290");
  wo.allow_bookmarks = false;
  wo.timeout_seconds = 0;
  wo.label_selector = "a=b";
  REQUIRE(build_query(watch_query(wo)) == "?watch=1&labelSelector=a%3Db&resourceVersion=12345");
}

TEST_CASE("delete options body") {
  REQUIRE(delete_options_body({}).empty());
  DeleteOptions o;
  o.grace_period_seconds = 0;
  o.propagation = DeletePropagation::background;
  o.precondition_uid = "u-1";
  const auto body = delete_options_body(o);
  REQUIRE(body.find("\"gracePeriodSeconds\":0") != std::string::npos);
  REQUIRE(body.find("\"propagationPolicy\":\"Background\"") != std::string::npos);
  REQUIRE(body.find("\"preconditions\":{\"uid\":\"u-1\"}") != std::string::npos);
}

TEST_CASE("server URLs") {
  auto a = parse_server_url("https://10.0.0.1:6443");
  REQUIRE(a);
  REQUIRE(a->host == "10.0.0.1");
  REQUIRE(a->port == "6443");
  REQUIRE(a->host_is_ip);
  REQUIRE(a->host_header() == "10.0.0.1:6443");
  auto b = parse_server_url("https://[::1]:16443/prefix/");
  REQUIRE(b);
  REQUIRE(b->host == "::1");
  REQUIRE(b->host_is_ip);
  REQUIRE(b->base_path == "/prefix");
  REQUIRE(b->host_header() == "[::1]:16443");
  auto c = parse_server_url("https://kubernetes.default.svc");
  REQUIRE(c);
  REQUIRE(c->port == "443");
  REQUIRE_FALSE(c->host_is_ip);
  REQUIRE(c->host_header() == "kubernetes.default.svc");

  auto http = parse_server_url("http://127.0.0.1:8080");
  REQUIRE_FALSE(http);
  REQUIRE(http.message().find("http://127.0.0.1:8080") != std::string::npos);
  REQUIRE(parse_server_url("http://127.0.0.1:8080", true));
  REQUIRE_FALSE(parse_server_url("127.0.0.1:6443"));
  REQUIRE_FALSE(parse_server_url("https://:6443"));
  auto bad_port = parse_server_url("https://host:99999");
  REQUIRE_FALSE(bad_port);
  REQUIRE(bad_port.message().find("99999") != std::string::npos);
  REQUIRE_FALSE(parse_server_url("https://host:6x43"));
  REQUIRE_FALSE(parse_server_url("https://[::1:6443"));
  REQUIRE_FALSE(parse_server_url("https://u:p@host"));
  REQUIRE_FALSE(parse_server_url("https://host/path?q=1"));
}

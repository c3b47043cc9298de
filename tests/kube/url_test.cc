// API paths, queries, delete options and server URLs (kube/url.h).
#include "kube/url.h"

#include <catch2/catch.hpp>

using namespace gpuslice::kube;
using namespace std::chrono_literals;

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

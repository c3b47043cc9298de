#include "kube/objects.h"
#include "kube/auth.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice::kube;
using gpuslice::string_at_pointer;
namespace json = boost::json;
using namespace std::chrono;

namespace {
system_clock::time_point at(int64_t unix_seconds, int64_t micros = 0) {
  return system_clock::time_point(duration_cast<system_clock::duration>(seconds(unix_seconds) + microseconds(micros)));
}
}  // namespace

TEST_CASE("Status errors are decoded from the body, or synthesized from the HTTP status") {
  auto e = decode_status_error(
      409,
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"leases.coordination.k8s.io \"x\" already exists","reason":"AlreadyExists","code":409})");
  REQUIRE(e.code == 409);
  REQUIRE(e.reason == "AlreadyExists");
  REQUIRE(e.is_already_exists());
  REQUIRE(e.is_conflict());
  REQUIRE(e.message == "leases.coordination.k8s.io \"x\" already exists");
  REQUIRE(e.to_string() == "409 AlreadyExists: leases.coordination.k8s.io \"x\" already exists");
  REQUIRE(ApiError{0, kReasonTimeout, "GET /api/v1/pods"}.to_string() == "Timeout: GET /api/v1/pods");
  REQUIRE(ApiError{500, "", "No agent available"}.to_string() == "500 Error: No agent available");
  REQUIRE(ApiError{404, "NotFound", ""}.to_string() == "404 NotFound");

  auto plain = decode_status_error(503, "upstream down\n");
  REQUIRE(plain.code == 503);
  REQUIRE(plain.reason == "ServiceUnavailable");
  REQUIRE(plain.message == "upstream down ");
  REQUIRE(plain.is_retriable());

  auto empty = decode_status_error(404, "");
  REQUIRE(empty.is_not_found());
  REQUIRE(empty.reason == "NotFound");
  REQUIRE_FALSE(empty.is_retriable());

  auto gone = decode_status_error(
      410, R"j({"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"})j");
  REQUIRE(gone.is_gone());
  REQUIRE(gone.reason == "Expired");
}

TEST_CASE("watch events decode with their resourceVersion, ERROR carries the Status") {
  auto ev = decode_watch_event(
      R"({"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"77"}}})");
  REQUIRE(ev);
  REQUIRE(ev->type == WatchEventType::modified);
  REQUIRE(ev->resource_version == "77");
  REQUIRE(name_of(ev->object) == "p");

  auto bm = decode_watch_event(R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"90"}}})");
  REQUIRE(bm);
  REQUIRE(bm->type == WatchEventType::bookmark);
  REQUIRE(bm->resource_version == "90");

  auto err = decode_watch_event(
      R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 12 (40)","reason":"Expired","code":410}})j");
  REQUIRE(err);
  REQUIRE(err->type == WatchEventType::error);
  REQUIRE(err->error.code == 410);
  REQUIRE(err->error.reason == "Expired");
  REQUIRE(err->error.message.find("too old") != std::string::npos);

  REQUIRE_FALSE(decode_watch_event("{\"type\":\"ADDED\""));
  REQUIRE_FALSE(decode_watch_event("[1]"));
  auto unknown = decode_watch_event(R"({"type":"SYNC","object":{}})");
  REQUIRE_FALSE(unknown);
  REQUIRE(unknown.message().find("SYNC") != std::string::npos);
  REQUIRE_FALSE(decode_watch_event(R"({"type":"ADDED","object":"x"})"));
  REQUIRE_FALSE(decode_watch_event(R"({"object":{}})"));
}

TEST_CASE("lists decode items, resourceVersion and continue") {
  auto page = decode_list(
      R"({"kind":"PodList","metadata":{"resourceVersion":"100","continue":"c1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]})");
  REQUIRE(page);
  REQUIRE(page->kind == "PodList");
  REQUIRE(page->resource_version == "100");
  REQUIRE(page->continue_token == "c1");
  REQUIRE(page->items.size() == 2);
  REQUIRE(name_of(page->items[1]) == "b");
  auto empty = decode_list(R"({"kind":"NodeList","metadata":{"resourceVersion":"5"},"items":null})");
  REQUIRE(empty);
  REQUIRE(empty->items.empty());
  REQUIRE_FALSE(decode_list(R"({"items":{}})"));
  REQUIRE_FALSE(decode_list(R"({"items":[1]})"));
  REQUIRE_FALSE(decode_list("nope"));
}

TEST_CASE("MicroTime and Time are RFC 3339 with 6 and 0 fraction digits") {
  // The codec itself, parsing included, is tested in tests/common/rfc3339_test.cc.
  REQUIRE(format_micro_time(at(1796083200, 123456)) == "2026-12-01T00:00:00.123456Z");
  REQUIRE(format_micro_time(at(0)) == "1970-01-01T00:00:00.000000Z");
  REQUIRE(format_time(at(1796083200, 999999)) == "2026-12-01T00:00:00Z");
  REQUIRE(format_micro_time(at(-1, 500000)) == "1969-12-31T23:59:59.500000Z");
  const auto now = at(1800000000, 654321);
  REQUIRE(gpuslice::parse_rfc3339(format_micro_time(now)).value() == now);
}

TEST_CASE("binding and PodScheduled condition patch") {
  auto b = make_binding("ns", "pod-a", "node-1", "uid-9");
  REQUIRE(
      json::serialize(b) ==
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"pod-a","namespace":"ns","uid":"uid-9"},"target":{"apiVersion":"v1","kind":"Node","name":"node-1"}})");
  PodCondition c;
  c.reason = "Unschedulable";
  c.message = "0/3 nodes: CardInsufficientCore";
  c.last_transition_time = at(1796083200);
  REQUIRE(
      json::serialize(make_pod_condition_patch(c)) ==
      R"({"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/3 nodes: CardInsufficientCore","lastTransitionTime":"2026-12-01T00:00:00Z"}]}})");
}

TEST_CASE("events.k8s.io/v1 Event: MicroTime, generated name, truncation") {
  EventRecord e;
  e.event_time = at(1796083200, 42);
  e.reporting_instance = "gpuslice-0";
  e.reason = "FailedScheduling";
  e.type = "Warning";
  e.note = std::string(1001, 'a') + std::string(20, 'b') + "\xC3\xA9\xC3\xA9";  // byte 1024 is mid "é"
  e.note += std::string(100, 'c');
  e.regarding.namespace_ = "team-a";
  e.regarding.name = "pod-x";
  e.regarding.uid = "u1";
  auto o = make_event(e);
  REQUIRE(string_at_pointer(o, "/eventTime") == "2026-12-01T00:00:00.000042Z");
  REQUIRE(string_at_pointer(o, "/metadata/namespace") == "team-a");
  REQUIRE(string_at_pointer(o, "/metadata/name").rfind("pod-x.", 0) == 0);
  REQUIRE(string_at_pointer(o, "/reportingController") == "gpuslice.io/scheduler");
  REQUIRE(string_at_pointer(o, "/regarding/uid") == "u1");
  REQUIRE(string_at_pointer(o, "/regarding/kind") == "Pod");
  const std::string note = string_at_pointer(o, "/note");
  REQUIRE(note.size() <= 1024);
  REQUIRE(note.size() == 1023);  // 1021 ASCII + one whole "é"; the second would cross 1024
  REQUIRE(truncate_utf8("h\xC3\xA9llo", 2) == "h");
  REQUIRE(truncate_utf8("abc", 10) == "abc");
  EventRecord longer = e;
  longer.reason = std::string(300, 'r');
  REQUIRE(string_at_pointer(make_event(longer), "/reason").size() == 128);
}

TEST_CASE("Lease encode and decode round trip") {
  Lease l;
  l.namespace_ = "kube-system";
  l.name = "gpuslice";
  l.resource_version = "55";
  l.spec.holder_identity = "gpuslice-0_abc";
  l.spec.lease_duration_seconds = 15;
  l.spec.acquire_time = at(1796083200, 1);
  l.spec.renew_time = at(1796083210, 2);
  l.spec.lease_transitions = 3;
  const auto o = encode_lease(l);
  REQUIRE(string_at_pointer(o, "/spec/renewTime") == "2026-12-01T00:00:10.000002Z");
  auto back = decode_lease(o);
  REQUIRE(back);
  REQUIRE(back->spec.holder_identity == l.spec.holder_identity);
  REQUIRE(back->resource_version == "55");
  REQUIRE(back->spec.lease_duration_seconds == 15);
  REQUIRE(back->spec.lease_transitions == 3);
  REQUIRE(back->spec.acquire_time == l.spec.acquire_time);
  REQUIRE(back->spec.renew_time == l.spec.renew_time);

  auto bad = decode_lease(json::parse(R"({"metadata":{"name":"x"},"spec":{"leaseDurationSeconds":"15"}})").as_object());
  REQUIRE_FALSE(bad);
  REQUIRE(bad.message().find("leaseDurationSeconds") != std::string::npos);
  REQUIRE_FALSE(decode_lease(json::parse(R"({"metadata":{"name":"x"},"spec":{"renewTime":"yesterday"}})").as_object()));
  auto empty = decode_lease(json::parse(R"({"metadata":{"name":"x","resourceVersion":"1"}})").as_object());
  REQUIRE(empty);
  REQUIRE(empty->spec.holder_identity.empty());
}

TEST_CASE("Lease JSON round-trips as the leader elector writes it") {
  Lease l{"kube-system", "gpuslice-scheduler", "42", "", {"a_1", 15, at(1796024904), at(1796024906), 3}};
  auto j = encode_lease(l);
  REQUIRE(j.at("apiVersion") == "coordination.k8s.io/v1");
  REQUIRE(j.at("kind") == "Lease");
  REQUIRE(j.at("metadata").at("resourceVersion") == "42");
  REQUIRE(string_at_pointer(j, "/spec/acquireTime") == "2026-11-30T07:48:24.000000Z");
  auto back = decode_lease(j);
  REQUIRE(back);
  REQUIRE(back->spec == l.spec);
  REQUIRE(back->resource_version == "42");
  REQUIRE(back->namespace_ == "kube-system");
  REQUIRE(back->name == "gpuslice-scheduler");

  // A release: holderIdentity is written even when empty, so the PUT clears it; no resourceVersion on create.
  Lease released = l;
  released.spec.holder_identity.clear();
  released.resource_version.clear();
  auto r = encode_lease(released);
  REQUIRE(r.at("spec").as_object().contains("holderIdentity"));
  REQUIRE(r.at("spec").at("holderIdentity") == "");
  REQUIRE_FALSE(r.at("metadata").as_object().contains("resourceVersion"));

  auto bad = decode_lease(json::parse(R"({"metadata":{"name":"x"},"spec":{"leaseTransitions":1.5}})").as_object());
  REQUIRE_FALSE(bad);
  REQUIRE(bad.message().rfind("lease x: spec.leaseTransitions = ", 0) == 0);
  REQUIRE_FALSE(decode_lease(json::parse(R"({"metadata":{"name":"x"},"spec":[]})").as_object()));
  REQUIRE_FALSE(decode_lease(json::parse(R"({"spec":{}})").as_object()));
}

// SpreadSources (scheduler/framework/spread_sources.h): the selector kube-scheduler's default spreading derives for
// a pod. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/helper/spread.go (DefaultSelector,
// GetPodServices) and its spread_test.go shapes: Services of the pod's namespace whose non-nil selector matches the
// pod's labels merge their selectors; the pod's controller (the first ownerReference with controller: true) of kind
// v1 ReplicationController merges its selector, apps/v1 ReplicaSet or StatefulSet adds its selector's
// requirements; any other owner, or an owner not in the store, adds nothing.
#include "scheduler/framework/spread_sources.h"

#include "scheduler/framework/pod_facts.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <memory>
#include <string>

using namespace gpuslice::scheduler;
using gpuslice::Status;
namespace json = boost::json;

namespace {

json::object J(std::string_view text) {
  return json::parse(text).as_object();
}

std::shared_ptr<const PodFacts> facts(std::string_view pod) {
  auto f = parse_pod_facts(J(pod));
  REQUIRE(f.ok());
  return *f;
}

/// The selector's requirements as "key op values" lines, in order, for readable comparisons.
std::string describe(const LabelSelector& s) {
  std::string out;
  for (const auto& r : s.requirements) {
    out += r.key;
    switch (r.op) {
      case LabelSelector::Op::in:
        out += " in";
        break;
      case LabelSelector::Op::not_in:
        out += " notin";
        break;
      case LabelSelector::Op::exists:
        out += " exists";
        break;
      case LabelSelector::Op::does_not_exist:
        out += " !exists";
        break;
    }
    for (const auto& v : r.values) {
      out += " " + v;
    }
    out += "; ";
  }
  return out;
}

const char* kWebPod = R"({"metadata":{"name":"web-1","namespace":"shop","labels":{"app":"web","tier":"front"}},
  "spec":{"containers":[{"name":"c","image":"x"}]}})";

}  // namespace

TEST_CASE("SpreadSources: Services of the pod's namespace whose selector matches merge their selectors") {
  SpreadSources src;
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":"web"}}})")));
  // Matches too (both labels present): its keys merge in.
  REQUIRE(src.upsert_service(
      J(R"({"metadata":{"name":"front","namespace":"shop"},"spec":{"selector":{"tier":"front","app":"web"}}})")));
  // Does not match (tier differs): ignored.
  REQUIRE(
      src.upsert_service(J(R"({"metadata":{"name":"back","namespace":"shop"},"spec":{"selector":{"tier":"back"}}})")));
  // Another namespace: ignored although it matches the labels.
  REQUIRE(
      src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"other"},"spec":{"selector":{"version":"2"}}})")));
  // Nil selector (an ExternalName Service): matches nothing, not everything; {} matches but adds nothing.
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"ext","namespace":"shop"},"spec":{"type":"ExternalName"}})")));
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"all","namespace":"shop"},"spec":{"selector":{}}})")));
  CHECK(src.size() == 4);  // nil and {} selectors contribute nothing, so they are not kept

  auto pod = facts(kWebPod);
  LabelSelector sel = src.default_selector("shop", *pod);
  CHECK_FALSE(sel.nothing);
  CHECK(describe(sel) == "app in web; tier in front; ");
  CHECK(sel.matches(pod->labels));

  // A pod of the namespace that no Service selects: an empty selector, i.e. no default spreading.
  auto lone = facts(R"({"metadata":{"name":"x","namespace":"shop","labels":{"app":"db"}},"spec":{}})");
  CHECK(src.default_selector("shop", *lone).requirements.empty());

  // Removing a Service removes its part; removing one not stored says so.
  CHECK(src.remove_service("shop", "front"));
  CHECK_FALSE(src.remove_service("shop", "front"));
  CHECK(describe(src.default_selector("shop", *pod)) == "app in web; ");
  // An update replaces the previous selector (here: the Service stops matching).
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":"api"}}})")));
  CHECK(src.default_selector("shop", *pod).requirements.empty());
}

TEST_CASE("SpreadSources: the pod's controller adds its selector (RC merged, ReplicaSet/StatefulSet requirements)") {
  SpreadSources src;
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":"web"}}})")));
  REQUIRE(src.upsert_replica_set(J(R"({"metadata":{"name":"web-5d9f","namespace":"shop"},"spec":{"selector":{
      "matchLabels":{"pod-template-hash":"5d9f"},
      "matchExpressions":[{"key":"tier","operator":"In","values":["front","edge"]}]}}})")));
  REQUIRE(src.upsert_stateful_set(
      J(R"({"metadata":{"name":"db","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"db"}}}})")));
  REQUIRE(src.upsert_replication_controller(
      J(R"({"metadata":{"name":"legacy","namespace":"shop"},"spec":{"selector":{"app":"web","gen":"1"}}})")));

  auto owned = [](std::string api, std::string kind, std::string name, bool controller = true) {
    return facts(R"({"metadata":{"name":"p","namespace":"shop","labels":{"app":"web","tier":"front",
        "pod-template-hash":"5d9f"},"ownerReferences":[{"apiVersion":")" +
                 api + R"(","kind":")" + kind + R"(","name":")" + name + R"(","uid":"u1","controller":)" +
                 (controller ? "true" : "false") + R"(}]},"spec":{}})");
  };
  auto rs = owned("apps/v1", "ReplicaSet", "web-5d9f");
  CHECK(rs->controller_kind == ControllerKind::replica_set);
  CHECK(rs->controller_name == "web-5d9f");
  // The Service's merged set first, then the ReplicaSet's requirements (matchLabels, then matchExpressions).
  CHECK(describe(src.default_selector("shop", *rs)) == "app in web; pod-template-hash in 5d9f; tier in front edge; ");

  auto rc = owned("v1", "ReplicationController", "legacy");
  CHECK(rc->controller_kind == ControllerKind::replication_controller);
  CHECK(describe(src.default_selector("shop", *rc)) == "app in web; gen in 1; ");

  auto ss = owned("apps/v1", "StatefulSet", "db");
  CHECK(ss->controller_kind == ControllerKind::stateful_set);
  CHECK(describe(src.default_selector("shop", *ss)) == "app in web; app in db; ");

  // Not a controller reference, an unsupported kind or group version, an owner not stored: the Services only.
  CHECK(owned("apps/v1", "ReplicaSet", "web-5d9f", false)->controller_kind == ControllerKind::none);
  CHECK(owned("batch/v1", "Job", "train")->controller_kind == ControllerKind::none);
  CHECK(owned("extensions/v1beta1", "ReplicaSet", "web-5d9f")->controller_kind == ControllerKind::none);
  CHECK(describe(src.default_selector("shop", *owned("apps/v1", "ReplicaSet", "gone"))) == "app in web; ");
  // The owner is looked up in the pod's namespace only.
  CHECK(describe(src.default_selector("other", *rs)).empty());

  // A ReplicaSet with a nil or empty selector adds nothing (LabelSelectorAsSelector: Nothing / Everything).
  REQUIRE(src.upsert_replica_set(J(R"({"metadata":{"name":"web-5d9f","namespace":"shop"},"spec":{"selector":{}}})")));
  CHECK(describe(src.default_selector("shop", *rs)) == "app in web; ");
  CHECK(src.remove_replica_set("shop", "web-5d9f") == false);  // not kept: it contributes nothing
  CHECK(src.remove_stateful_set("shop", "db"));
  CHECK(src.remove_replication_controller("shop", "legacy"));
  CHECK(src.size() == 1);
}

TEST_CASE("SpreadSources: a malformed object is refused with its kind, key, field and value, and not kept") {
  SpreadSources src;
  REQUIRE(src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":"web"}}})")));
  Status bad = src.upsert_service(J(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":7}}})"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "service shop/web: spec.selector.app: 7 is not a string");
  // The previous version is dropped, not left standing for an object the API no longer holds.
  CHECK(src.size() == 0);

  Status op = src.upsert_replica_set(J(R"({"metadata":{"name":"rs","namespace":"shop"},"spec":{"selector":{
      "matchExpressions":[{"key":"tier","operator":"Near","values":["a"]}]}}})"));
  REQUIRE_FALSE(op.ok());
  CHECK_THAT(op.message(), Catch::StartsWith("replicaset shop/rs: spec.selector"));
  CHECK_THAT(op.message(), Catch::Contains("Near"));

  Status unnamed = src.upsert_stateful_set(J(R"({"metadata":{"namespace":"shop"},"spec":{}})"));
  REQUIRE_FALSE(unnamed.ok());
  CHECK(unnamed.message() == "statefulset: metadata.name: missing");
}

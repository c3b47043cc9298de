// PodTopologySpread on its own and through the profile. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/podtopologyspread/filtering.go (calPreFilterState counts the pods of the pod's
// namespace matching the selector, not terminating, on nodes carrying every constraint's key and passing the
// inclusion policies; Filter: a node without the key is UnschedulableAndUnresolvable "node(s) didn't match pod
// topology spread constraints (missing required label)", matchNum + selfMatch - minMatch > maxSkew is Unschedulable
// "node(s) didn't match pod topology spread constraints"; minDomains) and scoring.go (ScheduleAnyway: per
// constraint cnt x log(domains + 2) + maxSkew - 1 rounded, nodes without the keys ignored (0), NormalizeScore
// MaxNodeScore * (max + min - s) / max, all MaxNodeScore when max is 0), with filtering_test.go / scoring_test.go
// shapes.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

namespace {
const char* kS = R"({"metadata":{"name":"%N","namespace":"default","labels":{"app":"s"}},
  "spec":{"containers":[{"name":"c","image":"x"}]}})";
std::string named(const char* t, const std::string& n) {
  std::string s = t;
  s.replace(s.find("%N"), 2, n);
  return s;
}
PodInfo spreading(const std::string& constraint) {
  return pod_info(J(R"({"metadata":{"name":"new","namespace":"default","labels":{"app":"s"}},"spec":{
    "containers":[{"name":"c","image":"x"}],"topologySpreadConstraints":[)" +
                    constraint + "]}}"));
}
}  // namespace

TEST_CASE("PodTopologySpread Filter: skew per domain, missing key, namespace and terminating pods not counted") {
  Snapshot s = nodes_snapshot({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}},
                               NodeSpec{"a2", {card("GPU-2")}, {{"zone", "a"}}},
                               NodeSpec{"b1", {card("GPU-3")}, {{"zone", "b"}}}, NodeSpec{"nokey", {card("GPU-4")}}});
  REQUIRE(s.upsert_pod(bound(named(kS, "s1"), "a1")));
  REQUIRE(s.upsert_pod(bound(named(kS, "s2"), "a1")));
  // Same labels in another namespace, and a terminating one: neither counts.
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"o","namespace":"other","labels":{"app":"s"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})",
                             "b1")));
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"t","namespace":"default","labels":{"app":"s"},
      "deletionTimestamp":"2026-12-01T00:00:00Z"},"spec":{"containers":[{"name":"c","image":"x"}]}})",
                             "b1")));
  PluginHarness h(framework::make_pod_topology_spread(2));

  PluginResult zone = h.run(s, spreading(R"({"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule",
      "labelSelector":{"matchLabels":{"app":"s"}}})"));
  REQUIRE(zone.filter_ran);
  // zone a: 2, zone b: 0 -> a: 2 + 1 - 0 > 1
  CHECK(zone.filter.at("a1").code == Code::unschedulable);
  CHECK(zone.reasons("a1") == "node(s) didn't match pod topology spread constraints");
  CHECK_FALSE(zone.passes("a2"));
  CHECK(zone.passes("b1"));
  CHECK(zone.filter.at("nokey").code == Code::unresolvable);
  CHECK(zone.reasons("nokey") == "node(s) didn't match pod topology spread constraints (missing required label)");

  // maxSkew 3 allows zone a.
  CHECK(h.run(s, spreading(R"({"maxSkew":3,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule",
      "labelSelector":{"matchLabels":{"app":"s"}}})"))
            .passes("a1"));
  // Hostname: a1 2, a2 0, b1 0 (nokey is a domain too: it carries kubernetes.io/hostname).
  PluginResult host = h.run(s, spreading(R"({"maxSkew":1,"topologyKey":"kubernetes.io/hostname",
      "whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"app":"s"}}})"));
  CHECK_FALSE(host.passes("a1"));
  CHECK(host.passes("a2"));
  CHECK(host.passes("nokey"));
  // A selector the pod itself does not match: selfMatch 0, so a1 (2 - 0 = 2 > 1) still fails, a2 passes.
  PluginResult other = h.run(s, spreading(R"({"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule",
      "labelSelector":{"matchLabels":{"app":"s"},"matchExpressions":[{"key":"tier","operator":"DoesNotExist"}]}})"));
  CHECK_FALSE(other.passes("a1"));
  CHECK(other.passes("b1"));
  // ScheduleAnyway only: PreFilter skips.
  CHECK(h.run(s, spreading(R"({"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway",
      "labelSelector":{"matchLabels":{"app":"s"}}})"))
            .pre_filter.code == Code::skip);
}

TEST_CASE("PodTopologySpread Score: ScheduleAnyway counts weighted by log(domains + 2), reverse-normalised") {
  Snapshot s = nodes_snapshot({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}},
                               NodeSpec{"b1", {card("GPU-2")}, {{"zone", "b"}}},
                               NodeSpec{"c1", {card("GPU-3")}, {{"zone", "c"}}}, NodeSpec{"nokey", {card("GPU-4")}}});
  REQUIRE(s.upsert_pod(bound(named(kS, "s1"), "a1")));
  REQUIRE(s.upsert_pod(bound(named(kS, "s2"), "a1")));
  REQUIRE(s.upsert_pod(bound(named(kS, "s3"), "b1")));
  PluginHarness h(framework::make_pod_topology_spread(2));
  PodInfo p = spreading(R"({"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway",
      "labelSelector":{"matchLabels":{"app":"s"}}})");
  PluginResult r = h.run(s, p);
  CHECK(r.triggers_scoring);
  auto sc = h.scores(s, p, {"a1", "b1", "c1", "nokey"});
  REQUIRE(sc);
  // 3 domains: weight log(5) = 1.609; raw a 2 x 1.609 = 3, b 2, c 0; nokey ignored -> 0.
  // 100 x (3 + 0 - raw) / 3: a 0, b 33, c 100.
  CHECK(*sc == std::map<std::string, int64_t>{{"a1", 0}, {"b1", 33}, {"c1", 100}, {"nokey", 0}});
  // maxSkew 3 adds 2 to every counted node: raw a 5, b 4, c 2 -> 100 x (7 - raw) / 5 = 40, 60, 100.
  PodInfo q = spreading(R"({"maxSkew":3,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway",
      "labelSelector":{"matchLabels":{"app":"s"}}})");
  h.run(s, q);
  CHECK(*h.scores(s, q, {"a1", "b1", "c1"}) == std::map<std::string, int64_t>{{"a1", 40}, {"b1", 60}, {"c1", 100}});
  // Nothing matches anywhere: every raw score 0 -> MaxNodeScore.
  PodInfo none = spreading(R"({"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway",
      "labelSelector":{"matchLabels":{"app":"nobody"}}})");
  h.run(s, none);
  CHECK(*h.scores(s, none, {"a1", "b1", "c1"}) ==
        std::map<std::string, int64_t>{{"a1", 100}, {"b1", 100}, {"c1", 100}});
}

TEST_CASE("PodTopologySpread: DoNotSchedule keeps the skew within maxSkew, minDomains counts missing domains") {
  Snapshot s =
      cluster({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}}, NodeSpec{"b1", {card("GPU-2")}, {{"zone", "b"}}}});
  REQUIRE(s.upsert_pod(P(
      R"({"metadata":{"name":"p0","labels":{"app":"s"}},"spec":{"nodeName":"a1","containers":[{"name":"c","image":"x"}]}})")));
  const char* spread = R"({"metadata":{"name":"p","labels":{"app":"s"}},"spec":{"containers":[{"name":"c","image":"x"}],
    "topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule",%N
      "labelSelector":{"matchLabels":{"app":"s"}}}]}})";
  std::string t = spread;
  t.replace(t.find("%N"), 2, "");
  Decision d = decide(s, P(t));
  REQUIRE(d.scheduled);
  CHECK(d.node == "b1");
  REQUIRE(s.upsert_pod(P(
      R"({"metadata":{"name":"p1","labels":{"app":"s"}},"spec":{"nodeName":"a1","containers":[{"name":"c","image":"x"}]}})")));
  // a has 2, b has 0. Restricted to zone a by nodeSelector: with nodeAffinityPolicy Honor (default) only zone a
  // is a domain, so the skew is 2 + 1 - 2 = 1 and it fits; with Ignore, zone b's 0 is the minimum and it does not.
  auto only_a = P(t);
  only_a["spec"].as_object()["nodeSelector"] = json::object{{"zone", "a"}};
  CHECK(decide(s, only_a).node == "a1");
  std::string ig = spread;
  ig.replace(ig.find("%N"), 2, R"("nodeAffinityPolicy":"Ignore",)");
  auto only_a_ignore = P(ig);
  only_a_ignore["spec"].as_object()["nodeSelector"] = json::object{{"zone", "a"}};
  Decision blocked = decide(s, only_a_ignore);
  CHECK_FALSE(blocked.scheduled);
  CHECK(blocked.message.find("node(s) didn't match pod topology spread constraints") != std::string::npos);
  // minDomains 3 with two domains: the global minimum is 0, so zone b (0 pods) still takes one.
  std::string md = spread;
  md.replace(md.find("%N"), 2, R"("minDomains":3,)");
  CHECK(decide(s, P(md)).node == "b1");
  // A node without the key is unresolvable with the upstream text.
  REQUIRE(s.upsert_node(node(NodeSpec{"nolabel", {card("GPU-3")}})));
  auto pinned = P(t);
  pinned["spec"].as_object()["nodeName"] = "nolabel";
  Decision missing = decide(s, pinned);
  CHECK(missing.message.find("1 node(s) didn't match pod topology spread constraints (missing required label)") !=
        std::string::npos);
}

TEST_CASE("PodTopologySpread: system default constraints from the pod's Services, scored without requiring all keys") {
  // scoring.go with systemDefaulted: {maxSkew 3, kubernetes.io/hostname} and {maxSkew 5, topology.kubernetes.io/
  // zone}, ScheduleAnyway, over DefaultSelector; requireAllTopologies is false, so a node without a zone label is
  // scored for its hostname, and counts as the zone value "" in the zone's size.
  const std::string zone = "topology.kubernetes.io/zone";
  Snapshot s =
      nodes_snapshot({NodeSpec{"a1", {card("GPU-1")}, {{zone, "a"}}}, NodeSpec{"a2", {card("GPU-2")}, {{zone, "a"}}},
                      NodeSpec{"b1", {card("GPU-3")}, {{zone, "b"}}}, NodeSpec{"nozone", {card("GPU-4")}}});
  REQUIRE(s.upsert_pod(bound(named(kS, "s1"), "a1")));
  REQUIRE(s.upsert_pod(bound(named(kS, "s2"), "a1")));
  REQUIRE(s.upsert_pod(bound(named(kS, "s3"), "b1")));
  PodInfo p = pod_info(J(R"({"metadata":{"name":"new","namespace":"default","labels":{"app":"s"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  PluginHarness h(framework::make_pod_topology_spread(2));

  // No Service or controller selects the pod: an empty DefaultSelector, no default constraints, nothing to score.
  PluginResult none = h.run(s, p);
  CHECK(none.pre_filter.code == Code::skip);
  CHECK_FALSE(none.triggers_scoring);
  CHECK_FALSE(h.scores(s, p, {"a1", "a2", "b1", "nozone"}));

  REQUIRE(s.objects().spread_sources().upsert_service(
      J(R"({"metadata":{"name":"svc","namespace":"default"},"spec":{"selector":{"app":"s"}}})")));
  PluginResult r = h.run(s, p);
  CHECK(r.pre_filter.code == Code::skip);  // ScheduleAnyway only: nothing to filter
  CHECK(r.triggers_scoring);
  auto sc = h.scores(s, p, {"a1", "a2", "b1", "nozone"});
  REQUIRE(sc);
  // hostname: 4 scored nodes, weight log(6) = 1.792; zone: values a, b, "" -> weight log(5) = 1.609.
  // a1: 2 x 1.792 + 2 + 2 x 1.609 + 4 = 12.80 -> 13; a2: 0 + 2 + 7.22 -> 9; b1: 1.792 + 2 + 1.609 + 4 -> 9;
  // nozone: hostname only, 0 + 2 = 2. Normalised 100 x (13 + 2 - raw) / 13: 15, 46, 46, 100.
  CHECK(*sc == std::map<std::string, int64_t>{{"a1", 15}, {"a2", 46}, {"b1", 46}, {"nozone", 100}});

  // The weights come from the nodes that passed the filters: without nozone, hostname log(5), zone log(4).
  // a1: 2 x 1.609 + 2 + 2 x 1.386 + 4 = 11.99 -> 12; a2: 2 + 6.77 -> 9; b1: 1.609 + 2 + 1.386 + 4 = 8.99 -> 9.
  // Normalised 100 x (12 + 9 - raw) / 12: 75, 100, 100.
  h.run(s, p);
  CHECK(*h.scores(s, p, {"a1", "a2", "b1"}) == std::map<std::string, int64_t>{{"a1", 75}, {"a2", 100}, {"b1", 100}});

  // scheduler.defaultSpreading false (defaultingType: List, no constraints): no default spreading.
  PluginHarness off(framework::make_pod_topology_spread(2, false));
  CHECK_FALSE(off.run(s, p).triggers_scoring);
  CHECK_FALSE(off.scores(s, p, {"a1", "a2", "b1", "nozone"}));

  // Constraints of its own replace the defaults entirely, and then every key is required again.
  PodInfo own = spreading(R"({"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone",
      "whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app":"s"}}})");
  h.run(s, own);
  // zone only, nozone ignored (0); values a, b -> log(4) = 1.386: a 2.77 -> 3, b 1.386 -> 1; 100 x (4 - raw) / 3.
  CHECK(*h.scores(s, own, {"a1", "a2", "b1", "nozone"}) ==
        std::map<std::string, int64_t>{{"a1", 33}, {"a2", 33}, {"b1", 100}, {"nozone", 0}});
}

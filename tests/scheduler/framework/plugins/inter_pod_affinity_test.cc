// InterPodAffinity on its own and through the profile. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/interpodaffinity/filtering.go (Filter: required affinity failing
// UnschedulableAndUnresolvable "node(s) didn't match pod affinity rules", including a node without the term's
// topology key; required anti-affinity failing Unschedulable "node(s) didn't match pod anti-affinity rules";
// existing pods' anti-affinity failing Unschedulable "node(s) didn't satisfy existing pods anti-affinity rules";
// the first pod of a group matching its own affinity) and scoring.go (preferred terms of the incoming pod and of
// the existing pods, required affinity of existing pods at hardPodAffinityWeight 1, NormalizeScore
// MaxNodeScore * (score - min) / (max - min)), with filtering_test.go / scoring_test.go's shapes.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("InterPodAffinity Filter: per-node codes and reasons of the three rules") {
  Snapshot s = nodes_snapshot({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}},
                               NodeSpec{"a2", {card("GPU-2")}, {{"zone", "a"}}},
                               NodeSpec{"b1", {card("GPU-3")}, {{"zone", "b"}}}, NodeSpec{"nozone", {card("GPU-4")}}});
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"db","namespace":"default","labels":{"app":"db"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})",
                             "a1")));
  PluginHarness h(framework::make_inter_pod_affinity(2));

  PluginResult plain = h.run(s, pod_info(gpu_pod("p", "1")));
  CHECK(plain.pre_filter.code == Code::skip);  // no terms and no existing anti-affinity

  PodInfo near_db = pod_info(J(R"({"metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}]}}}})"));
  PluginResult aff = h.run(s, near_db);
  CHECK(aff.passes("a1"));
  CHECK(aff.passes("a2"));  // same zone as the db pod
  CHECK(aff.filter.at("b1").code == Code::unresolvable);
  CHECK(aff.reasons("b1") == "node(s) didn't match pod affinity rules");
  CHECK(aff.reasons("nozone") == "node(s) didn't match pod affinity rules");

  PodInfo away = pod_info(J(R"({"metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchExpressions":[{"key":"app","operator":"In","values":["db","cache"]}]},
       "topologyKey":"zone"}]}}}})"));
  PluginResult anti = h.run(s, away);
  CHECK(anti.filter.at("a2").code == Code::unschedulable);
  CHECK(anti.reasons("a2") == "node(s) didn't match pod anti-affinity rules");
  CHECK(anti.passes("b1"));
  CHECK(anti.passes("nozone"));  // no topology key: anti-affinity cannot match there

  // The db pod gets required anti-affinity to app=web on hostname: a web pod without terms avoids a1 only.
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"db","namespace":"default","labels":{"app":"db"}},
      "spec":{"containers":[{"name":"c","image":"x"}],"affinity":{"podAntiAffinity":{
      "requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app":"web"}},
      "topologyKey":"kubernetes.io/hostname"}]}}}})",
                             "a1")));
  PluginResult sym = h.run(s, pod_info(J(R"({"metadata":{"name":"w","namespace":"default","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})")));
  CHECK(sym.filter.at("a1").code == Code::unschedulable);
  CHECK(sym.reasons("a1") == "node(s) didn't satisfy existing pods anti-affinity rules");
  CHECK(sym.passes("a2"));
}

TEST_CASE("InterPodAffinity Score: preferred terms both ways and existing required affinity, min-max normalised") {
  Snapshot s = nodes_snapshot({NodeSpec{"a1", {card("GPU-1")}, {{"zone", "a"}}},
                               NodeSpec{"a2", {card("GPU-2")}, {{"zone", "a"}}},
                               NodeSpec{"b1", {card("GPU-3")}, {{"zone", "b"}}}});
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"db","namespace":"default","labels":{"app":"db"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})",
                             "a1")));
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"cache","namespace":"default","labels":{"app":"cache"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})",
                             "a2")));
  PluginHarness h(framework::make_inter_pod_affinity(2));
  const std::vector<std::string> all{"a1", "a2", "b1"};

  // Prefer zone of app=db (weight 10), avoid the host of app=cache (weight 5): raw a1 10, a2 10-5=5, b1 0.
  PodInfo p = pod_info(J(R"({"metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{
      "podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":10,"podAffinityTerm":{
        "labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}}]},
      "podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":5,"podAffinityTerm":{
        "labelSelector":{"matchLabels":{"app":"cache"}},"topologyKey":"kubernetes.io/hostname"}}]}}}})"));
  PluginResult r = h.run(s, p);
  CHECK(r.triggers_scoring);
  auto sc = h.scores(s, p, all);
  REQUIRE(sc);
  CHECK(*sc == std::map<std::string, int64_t>{{"a1", 100}, {"a2", 50}, {"b1", 0}});

  // Symmetry: an existing pod in zone b prefers app=web near it (weight 30) and another one in zone a requires
  // affinity to app=web (hardPodAffinityWeight 1). PreScore counts them for a web pod that prefers nothing itself
  // (whether scoring runs at all for such a pod is decided by triggers_scoring: docs/scheduling.md).
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"fan","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":30,
      "podAffinityTerm":{"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"zone"}}]}}}})",
                             "b1")));
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"needy","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"zone"}]}}}})",
                             "a2")));
  PodInfo web = pod_info(J(R"({"metadata":{"name":"w","namespace":"default","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  h.run(s, web);
  auto sym = h.scores(s, web, all);
  REQUIRE(sym);
  // raw a1 1, a2 1, b1 30 -> (x-1)*100/29
  CHECK(*sym == std::map<std::string, int64_t>{{"a1", 0}, {"a2", 0}, {"b1", 100}});
  // All equal: 0 everywhere.
  PodInfo other = pod_info(J(R"({"metadata":{"name":"o","namespace":"elsewhere","labels":{"app":"x"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  h.run(s, other);
  CHECK_FALSE(h.scores(s, other, all).has_value());  // nothing matched: PreScore skips
}

TEST_CASE("InterPodAffinity: required anti-affinity on hostname keeps the second replica off the node") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  Decision first = decide(s, P(fill(kWeb, "web-1", "")));
  REQUIRE(first.scheduled);
  REQUIRE(s.upsert_pod(P(fill(kWeb, "web-1", R"("nodeName":"n1",)"))));
  Decision second = decide(s, P(fill(kWeb, "web-2", "")));
  CHECK_FALSE(second.scheduled);
  CHECK(second.message == "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");

  REQUIRE(s.upsert_node(node(NodeSpec{"n2", {card("GPU-2")}})));
  Decision again = decide(s, P(fill(kWeb, "web-2", "")));
  REQUIRE(again.scheduled);
  CHECK(again.node == "n2");
}

TEST_CASE("InterPodAffinity: an existing pod's anti-affinity repels a pod without terms (symmetry)") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.upsert_pod(P(fill(kWeb, "web-1", R"("nodeName":"n1",)"))));
  Decision d = decide(s, P(R"({"metadata":{"name":"plain","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.");
  // Another namespace is not matched by a term without namespaces.
  Decision other = decide(s, P(R"({"metadata":{"name":"plain","namespace":"other","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  CHECK(other.scheduled);
}

TEST_CASE("InterPodAffinity: required affinity needs a matching pod in the domain, or matches itself first") {
  Snapshot s =
      cluster({NodeSpec{"n1", {card("GPU-1")}, {{"zone", "a"}}}, NodeSpec{"n2", {card("GPU-2")}, {{"zone", "b"}}}});
  const char* aff =
      R"({"metadata":{"name":"%N","labels":{"app":"db"}},"spec":{%S "containers":[{"name":"c","image":"x"}],
    "affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}]}}}})";
  Decision first = decide(s, P(fill(aff, "db-1", "")));
  REQUIRE(first.scheduled);  // no pod matches anywhere and it matches its own term
  REQUIRE(s.upsert_pod(P(fill(aff, "db-1", R"("nodeName":"n2",)"))));
  Decision second = decide(s, P(fill(aff, "db-2", "")));
  REQUIRE(second.scheduled);
  CHECK(second.node == "n2");
  // A pod with affinity to app=db but not itself labelled: only zone b.
  Decision d = decide(s, P(R"({"metadata":{"name":"client"},"spec":{"containers":[{"name":"c","image":"x"}],
    "affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"db"}},"topologyKey":"zone"}]}}}})"));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
}

TEST_CASE("InterPodAffinity: namespaceSelector and mismatchLabelKeys") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.objects().upsert_namespace(P(R"({"metadata":{"name":"team-a","labels":{"tier":"gold"}}})")));
  REQUIRE(s.upsert_pod(P(R"({"metadata":{"name":"x","namespace":"team-a","labels":{"app":"web","tenant":"t1"}},
      "spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}})")));
  const char* anti = R"({"metadata":{"name":"y","namespace":"default","labels":{"tenant":"%N"}},"spec":{%S
    "containers":[{"name":"c","image":"x"}],"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
    {"labelSelector":{"matchLabels":{"app":"web"}},"namespaceSelector":{"matchLabels":{"tier":"gold"}},
     "mismatchLabelKeys":["tenant"],"topologyKey":"kubernetes.io/hostname"}]}}}})";
  CHECK(decide(s, P(fill(anti, "t1", ""))).scheduled);        // same tenant value: term does not match x
  CHECK_FALSE(decide(s, P(fill(anti, "t2", ""))).scheduled);  // another tenant: x repels it
}

TEST_CASE("InterPodAffinity: existing pods' preferred terms alone make the pod score, and only pods with such terms") {
  // scoring.go PreScore: an incoming pod without preferences of its own is still scored by the existing pods'
  // preferred terms and required affinity (HavePodsWithAffinityList). Kept fast: without any such pod in the
  // snapshot nothing is walked and scoring is not triggered.
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-n1")}}, NodeSpec{"n2", {card("GPU-n2")}}});
  PluginHarness h(framework::make_inter_pod_affinity(2));
  PodInfo web = pod_info(J(R"({"metadata":{"name":"w","namespace":"default","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})"));
  PodInfo other = pod_info(J(R"({"metadata":{"name":"o","namespace":"default","labels":{"app":"db"}},
      "spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})"));
  CHECK_FALSE(s.any_pod_with_affinity_score_terms());
  CHECK_FALSE(h.run(s, web).triggers_scoring);

  // Required anti-affinity only filters: it does not make anybody score.
  REQUIRE(s.upsert_pod(P(fill(kWeb, "guard", R"("nodeName":"n2",)"))));
  CHECK_FALSE(s.any_pod_with_affinity_score_terms());
  CHECK_FALSE(h.run(s, other).triggers_scoring);
  REQUIRE(s.remove_pod("default", "guard"));

  // A GPU pod on n1 (so binpack ranks n1 first) that prefers no other app=web on its host (weight 50).
  json::object loner = placed_pod("loner", "n1", "GPU-n1,NVIDIA,10000,10:;");
  loner["metadata"].as_object()["labels"] = json::object{{"app", "web"}};
  spec(loner)["affinity"] = J(R"({"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
      {"weight":50,"podAffinityTerm":{"labelSelector":{"matchLabels":{"app":"web"}},
       "topologyKey":"kubernetes.io/hostname"}}]}})");
  REQUIRE(s.upsert_pod(loner));
  CHECK(s.any_pod_with_affinity_score_terms());
  PluginResult r = h.run(s, web);
  CHECK(r.pre_filter.code == Code::skip);  // nothing to filter ...
  CHECK(r.triggers_scoring);               // ... but something to score
  auto sc = h.scores(s, web, {"n1", "n2"});
  REQUIRE(sc);
  CHECK(*sc == std::map<std::string, int64_t>{{"n1", 0}, {"n2", 100}});
  // A pod the term does not match is not scored by it.
  CHECK_FALSE(h.run(s, other).triggers_scoring);

  // Through the profile: the web pod avoids n1 although binpack ranks n1 first; the db pod takes n1.
  Decision d = decide(s, P(R"({"metadata":{"name":"w","namespace":"default","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})"));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
  Decision o = decide(s, P(R"({"metadata":{"name":"o","namespace":"default","labels":{"app":"db"}},
      "spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})"));
  REQUIRE(o.scheduled);
  CHECK(o.node == "n1");
  CHECK(o.nodes_visited == 1);  // no preference: the first node of the best GPU score group, nothing more

  // Existing required affinity to app=web (hardPodAffinityWeight 1) draws the web pod to n2's host when the
  // loner is gone.
  REQUIRE(s.remove_pod("default", "loner"));
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"needy","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x"}],"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
      {"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"kubernetes.io/hostname"}]}}}})",
                             "n2")));
  CHECK(h.run(s, web).triggers_scoring);
  CHECK(*h.scores(s, web, {"n1", "n2"}) == std::map<std::string, int64_t>{{"n1", 0}, {"n2", 100}});
}

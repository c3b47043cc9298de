// NodeAffinity on its own. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/nodeaffinity/
// node_affinity.go: Filter on nodeSelector AND required node affinity (terms ORed, expressions ANDed, In, NotIn,
// Exists, DoesNotExist, Gt, Lt, matchFields metadata.name; an empty term matches nothing), failing
// UnschedulableAndUnresolvable with ErrReasonPod "node(s) didn't match Pod's node affinity/selector"; Score sums
// the weights of the preferred terms a node matches, NormalizeScore = helper.DefaultNormalizeScore(MaxNodeScore,
// reverse=false). Matching per k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
// (node_affinity_test.go cases).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

namespace {
PodInfo with_spec(const char* extra) {
  boost::json::object p = gpu_pod("p", "1");
  const boost::json::object fields = J(extra);
  for (const auto& kv : fields) {
    spec(p)[kv.key()] = kv.value();
  }
  return pod_info(p);
}
Snapshot three() {
  return nodes_snapshot({NodeSpec{"a", {card("GPU-a")}, {{"zone", "z1"}, {"gen", "3"}}},
                         NodeSpec{"b", {card("GPU-b")}, {{"zone", "z2"}, {"gen", "5"}, {"ssd", "true"}}},
                         NodeSpec{"c", {card("GPU-c")}}});
}
}  // namespace

TEST_CASE("NodeAffinity Filter: nodeSelector, required terms and their operators") {
  Snapshot s = three();
  PluginHarness h(framework::make_node_affinity(2));

  CHECK(h.run(s, pod_info(gpu_pod("p", "1"))).pre_filter.code == Code::skip);

  PluginResult sel = h.run(s, with_spec(R"({"nodeSelector":{"zone":"z1"}})"));
  CHECK(sel.passes("a"));
  CHECK(sel.filter.at("b").code == Code::unresolvable);
  CHECK(sel.reasons("b") == "node(s) didn't match Pod's node affinity/selector");
  CHECK_FALSE(sel.passes("c"));

  auto req = [&](const char* terms) {
    std::string t =
        R"({"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":)";
    t += terms;
    t += "}}}}";
    PluginResult r = h.run(s, with_spec(t.c_str()));
    std::string fit;
    for (const char* n : {"a", "b", "c"}) {
      fit += r.passes(n) ? n : "";
    }
    return fit;
  };
  CHECK(req(R"([{"matchExpressions":[{"key":"zone","operator":"In","values":["z2","z9"]}]}])") == "b");
  CHECK(req(R"([{"matchExpressions":[{"key":"zone","operator":"NotIn","values":["z1"]}]}])") == "bc");
  CHECK(req(R"([{"matchExpressions":[{"key":"ssd","operator":"Exists"}]}])") == "b");
  CHECK(req(R"([{"matchExpressions":[{"key":"ssd","operator":"DoesNotExist"}]}])") == "ac");
  CHECK(req(R"([{"matchExpressions":[{"key":"gen","operator":"Gt","values":["4"]}]}])") == "b");
  CHECK(req(R"([{"matchExpressions":[{"key":"gen","operator":"Lt","values":["4"]}]}])") == "a");
  CHECK(req(R"([{"matchFields":[{"key":"metadata.name","operator":"In","values":["c"]}]}])") == "c");
  // Terms ORed, expressions ANDed.
  CHECK(req(R"([{"matchExpressions":[{"key":"zone","operator":"In","values":["z1"]}]},
                {"matchFields":[{"key":"metadata.name","operator":"In","values":["c"]}]}])") == "ac");
  CHECK(req(R"([{"matchExpressions":[{"key":"zone","operator":"Exists"},{"key":"ssd","operator":"Exists"}]}])") == "b");
  // nodeSelector AND affinity.
  PluginResult both = h.run(s, with_spec(R"({"nodeSelector":{"zone":"z1"},"affinity":{"nodeAffinity":{
      "requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
        {"matchExpressions":[{"key":"ssd","operator":"Exists"}]}]}}}})"));
  CHECK_FALSE(both.passes("a"));
  CHECK_FALSE(both.passes("b"));
}

TEST_CASE("NodeAffinity Score: summed preferred weights, normalised to the best node") {
  Snapshot s = three();
  PluginHarness h(framework::make_node_affinity(2));
  PodInfo p = with_spec(R"({"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
      {"weight":2,"preference":{"matchExpressions":[{"key":"zone","operator":"Exists"}]}},
      {"weight":8,"preference":{"matchExpressions":[{"key":"ssd","operator":"In","values":["true"]}]}}]}}})");
  PluginResult r = h.run(s, p);
  CHECK(r.triggers_scoring);
  auto sc = h.scores(s, p, {"a", "b", "c"});
  REQUIRE(sc);
  // raw a=2, b=10, c=0 -> x*100/10
  CHECK(*sc == std::map<std::string, int64_t>{{"a", 20}, {"b", 100}, {"c", 0}});
  // No node matches a preference: all 0.
  PodInfo q = with_spec(R"({"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
      {"weight":5,"preference":{"matchExpressions":[{"key":"gpu","operator":"Exists"}]}}]}}})");
  h.run(s, q);
  CHECK(*h.scores(s, q, {"a", "b", "c"}) == std::map<std::string, int64_t>{{"a", 0}, {"b", 0}, {"c", 0}});
  // No preferences: no scoring.
  PodInfo none = pod_info(gpu_pod("p", "1"));
  CHECK_FALSE(h.run(s, none).triggers_scoring);
  CHECK_FALSE(h.scores(s, none, {"a", "b"}).has_value());
}

// TaintToleration on its own. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go: Filter rejects a node with a NoSchedule or
// NoExecute taint the pod does not tolerate, UnschedulableAndUnresolvable, "node(s) had untolerated taint {k: v}"
// (PreferNoSchedule never filters); Score counts the intolerable PreferNoSchedule taints, counting only
// tolerations with an empty or PreferNoSchedule effect (getAllTolerationPreferNoSchedule), and NormalizeScore is
// helper.DefaultNormalizeScore(MaxNodeScore, reverse=true) (pkg/scheduler/framework/plugins/helper/
// normalize_score.go). Toleration matching as k8s.io/component-helpers ToleratesTaint (taint_toleration_test.go).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

namespace {
NodeSpec tainted(std::string name, const char* taints) {
  NodeSpec n{std::move(name), {card("GPU-" + name)}};
  n.taints = boost::json::parse(taints).as_array();
  return n;
}
PodInfo tolerating(const char* tolerations) {
  boost::json::object p = gpu_pod("p", "1");
  if (tolerations != nullptr) {
    spec(p)["tolerations"] = boost::json::parse(tolerations);
  }
  return pod_info(p);
}
}  // namespace

TEST_CASE("TaintToleration Filter: untolerated NoSchedule/NoExecute taints, with upstream's message") {
  Snapshot s = nodes_snapshot({tainted("ns", R"([{"key":"dedicated","value":"user1","effect":"NoSchedule"}])"),
                               tainted("ne", R"([{"key":"gone","effect":"NoExecute"}])"),
                               tainted("soft", R"([{"key":"slow","value":"yes","effect":"PreferNoSchedule"}])"),
                               NodeSpec{"clean", {card("GPU-c")}}});
  PluginHarness h(framework::make_taint_toleration(3));

  PluginResult none = h.run(s, tolerating(nullptr));
  CHECK(none.filter.at("ns").code == Code::unresolvable);
  CHECK(none.reasons("ns") == "node(s) had untolerated taint {dedicated: user1}");
  CHECK(none.reasons("ne") == "node(s) had untolerated taint {gone: }");
  CHECK(none.passes("soft"));
  CHECK(none.passes("clean"));

  // Equal with the value, Exists without, an empty key with Exists tolerating everything, effect must match.
  CHECK(h.run(s, tolerating(R"([{"key":"dedicated","operator":"Equal","value":"user1","effect":"NoSchedule"}])"))
            .passes("ns"));
  CHECK_FALSE(h.run(s, tolerating(R"([{"key":"dedicated","operator":"Equal","value":"user2"}])")).passes("ns"));
  CHECK(h.run(s, tolerating(R"([{"key":"dedicated","operator":"Exists"}])")).passes("ns"));
  CHECK_FALSE(h.run(s, tolerating(R"([{"key":"dedicated","operator":"Exists","effect":"NoExecute"}])")).passes("ns"));
  PluginResult all = h.run(s, tolerating(R"([{"operator":"Exists"}])"));
  CHECK(all.passes("ns"));
  CHECK(all.passes("ne"));
}

TEST_CASE("TaintToleration Score: fewer intolerable PreferNoSchedule taints score higher, reverse-normalised") {
  Snapshot s = nodes_snapshot({NodeSpec{"zero", {card("GPU-0")}},
                               tainted("one", R"([{"key":"a","value":"1","effect":"PreferNoSchedule"}])"),
                               tainted("two", R"([{"key":"a","value":"1","effect":"PreferNoSchedule"},
                          {"key":"b","value":"2","effect":"PreferNoSchedule"}])")});
  PluginHarness h(framework::make_taint_toleration(3));
  const std::vector<std::string> all{"zero", "one", "two"};

  PluginResult r = h.run(s, tolerating(nullptr));
  CHECK(r.triggers_scoring);  // some node has a PreferNoSchedule taint
  auto sc = h.scores(s, tolerating(nullptr), all);
  REQUIRE(sc);
  // raw 0, 1, 2 -> 100 - raw*100/2
  CHECK(*sc == std::map<std::string, int64_t>{{"zero", 100}, {"one", 50}, {"two", 0}});

  // Tolerating a=1 (PreferNoSchedule): raw 0, 0, 1.
  PodInfo tol = tolerating(R"([{"key":"a","operator":"Equal","value":"1","effect":"PreferNoSchedule"}])");
  h.run(s, tol);
  CHECK(*h.scores(s, tol, all) == std::map<std::string, int64_t>{{"zero", 100}, {"one", 100}, {"two", 0}});
  // A NoSchedule toleration does not count for scoring.
  PodInfo hard = tolerating(R"([{"key":"a","operator":"Exists","effect":"NoSchedule"}])");
  h.run(s, hard);
  CHECK(*h.scores(s, hard, all) == std::map<std::string, int64_t>{{"zero", 100}, {"one", 50}, {"two", 0}});
  // Every node tolerated: raw all 0 -> all MaxNodeScore.
  PodInfo every = tolerating(R"([{"operator":"Exists"}])");
  h.run(s, every);
  CHECK(*h.scores(s, every, all) == std::map<std::string, int64_t>{{"zero", 100}, {"one", 100}, {"two", 100}});
  // Only untainted nodes feasible: PreScore skips.
  CHECK_FALSE(h.scores(s, tolerating(nullptr), {"zero"}).has_value());
}

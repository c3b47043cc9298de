// NodeResourcesBalancedAllocation on its own. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go (PreScore Skip for a best-effort pod;
// Score (1 - std) x MaxNodeScore over the cpu and memory fractions of the node's and the pod's actual requests,
// std = |f1 - f2| / 2 for two resources, each fraction capped at 1) with balanced_allocation_test.go's shapes.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;

namespace {
PodInfo asking(const std::string& name, const std::string& cpu, const std::string& mem) {
  return pod_info(J(R"({"metadata":{"name":")" + name + R"(","namespace":"default"},"spec":{"containers":[
      {"name":"c","image":"x","resources":{"requests":{"cpu":")" +
                    cpu + R"(","memory":")" + mem + R"("}}}]}})"));
}
}  // namespace

TEST_CASE("NodeResourcesBalancedAllocation: (1 - std) x 100 over cpu and memory fractions, best effort skipped") {
  NodeSpec a{"a", {card("GPU-1")}};
  a.cpu = "4";
  a.memory = "8Gi";
  NodeSpec b = a;
  b.name = "b";
  Snapshot s = nodes_snapshot({a, b});
  REQUIRE(s.upsert_pod(J(R"({"metadata":{"name":"used","namespace":"default"},"spec":{"nodeName":"a",
      "containers":[{"name":"c","image":"x","resources":{"requests":{"cpu":"2","memory":"0"}}}]},
      "status":{"phase":"Running"}})")));
  PluginHarness h(framework::make_node_resources_balanced_allocation(1));
  CHECK(h.plugin().name() == "NodeResourcesBalancedAllocation");
  CHECK(h.plugin().resource_score);

  // 1 cpu, 2 GiB: a: cpu 3/4, memory 2/8 -> std 0.25 -> 75; b: 1/4 and 2/8 -> 100.
  PodInfo p = asking("p", "1", "2Gi");
  h.run(s, p);
  auto sc = h.scores(s, p, {"a", "b"});
  REQUIRE(sc);
  CHECK(*sc == std::map<std::string, int64_t>{{"a", 75}, {"b", 100}});
  // Fractions capped at 1: 8 cpu on b -> 1 vs 2/8 -> std 0.375 -> 62.
  PodInfo big = asking("big", "8", "2Gi");
  h.run(s, big);
  CHECK(h.scores(s, big, {"b"})->at("b") == 62);
  // Best effort (no request at all): PreScore skips, the plugin takes no part.
  PodInfo be = pod_info(J(R"({"metadata":{"name":"be","namespace":"default"},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  h.run(s, be);
  CHECK_FALSE(h.scores(s, be, {"a", "b"}).has_value());
}

// NodeUnschedulable on its own. Asserts the behaviour of kubernetes/kubernetes
// pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go (Filter: spec.unschedulable rejects
// unless the pod tolerates node.kubernetes.io/unschedulable:NoSchedule, UnschedulableAndUnresolvable with
// ErrReasonUnschedulable "node(s) were unschedulable") and its node_unschedulable_test.go cases.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

TEST_CASE("NodeUnschedulable: a cordoned node is unresolvable unless the pod tolerates the unschedulable taint") {
  NodeSpec cordoned{"cordoned", {card("GPU-1")}};
  cordoned.unschedulable = true;
  Snapshot s = nodes_snapshot({cordoned, NodeSpec{"open", {card("GPU-2")}}});
  PluginHarness h(framework::make_node_unschedulable());

  PluginResult plain = h.run(s, pod_info(gpu_pod("p", "1")));
  REQUIRE(plain.filter_ran);
  CHECK(plain.passes("open"));
  CHECK_FALSE(plain.passes("cordoned"));
  CHECK(plain.filter.at("cordoned").code == Code::unresolvable);
  CHECK(plain.reasons("cordoned") == "node(s) were unschedulable");

  // Upstream's "pod with toleration" cases: key with Exists, and key+effect.
  for (const char* tol : {R"([{"key":"node.kubernetes.io/unschedulable","operator":"Exists"}])",
                          R"([{"key":"node.kubernetes.io/unschedulable","operator":"Exists","effect":"NoSchedule"}])",
                          R"([{"operator":"Exists"}])"}) {
    boost::json::object p = gpu_pod("t", "1");
    spec(p)["tolerations"] = boost::json::parse(tol);
    PluginResult r = h.run(s, pod_info(p));
    INFO(tol);
    CHECK(r.passes("cordoned"));
  }
  // A toleration for another effect does not help.
  boost::json::object p = gpu_pod("t", "1");
  spec(p)["tolerations"] =
      boost::json::parse(R"([{"key":"node.kubernetes.io/unschedulable","operator":"Exists","effect":"NoExecute"}])");
  CHECK_FALSE(h.run(s, pod_info(p)).passes("cordoned"));
}

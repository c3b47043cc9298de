// NodeName on its own. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/nodename/node_name.go:
// Filter passes only the node spec.nodeName names (no nodeName: every node), else UnschedulableAndUnresolvable
// with ErrReason "node(s) didn't match the requested node name" (node_name_test.go).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

TEST_CASE("NodeName: only the named node fits, without spec.nodeName the plugin skips") {
  Snapshot s = nodes_snapshot({NodeSpec{"a", {card("GPU-1")}}, NodeSpec{"b", {card("GPU-2")}}});
  PluginHarness h(framework::make_node_name());

  PluginResult none = h.run(s, pod_info(gpu_pod("p", "1")));
  CHECK(none.pre_filter.code == Code::skip);
  CHECK_FALSE(none.filter_ran);

  boost::json::object named = gpu_pod("p", "1");
  spec(named)["nodeName"] = "b";
  PluginResult r = h.run(s, pod_info(named));
  REQUIRE(r.filter_ran);
  CHECK(r.passes("b"));
  CHECK_FALSE(r.passes("a"));
  CHECK(r.filter.at("a").code == Code::unresolvable);
  CHECK(r.reasons("a") == "node(s) didn't match the requested node name");

  spec(named)["nodeName"] = "gone";
  PluginResult gone = h.run(s, pod_info(named));
  CHECK_FALSE(gone.passes("a"));
  CHECK_FALSE(gone.passes("b"));
}

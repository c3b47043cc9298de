// DynamicResources on its own. Upstream (kubernetes/kubernetes
// pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go) allocates ResourceClaims in PreFilter
// .. Reserve and skips pods without spec.resourceClaims (PreFilter returns Skip). gpuslice does not allocate DRA
// claims, so it asserts the documented difference: the pod is refused at PreFilter, unresolvable, with a message
// saying why, instead of being placed with unallocated claims.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("DynamicResources: skips pods without resourceClaims, refuses pods with them at PreFilter") {
  Snapshot s = nodes_snapshot({NodeSpec{"a", {card("GPU-1")}}});
  PluginHarness h(framework::make_dynamic_resources());

  PluginResult plain = h.run(s, pod_info(gpu_pod("p", "1")));
  CHECK(plain.pre_filter.code == Code::skip);

  boost::json::object dra = gpu_pod("p", "1");
  spec(dra)["resourceClaims"] = boost::json::parse(R"([{"name":"gpu","resourceClaimName":"claim-1"}])");
  PluginResult r = h.run(s, pod_info(dra));
  CHECK(r.pre_filter.code == Code::unresolvable);
  REQUIRE(r.pre_filter.reasons.size() == 1);
  CHECK(r.pre_filter.reasons[0] == framework::reason::kDynamicResources);
  CHECK_FALSE(r.filter_ran);

  // Through the profile: the PreFilter message names it once for all nodes, as a FitError with a PreFilterMsg.
  Decision d = schedule(s, pod_info(dra), ScheduleOptions{});
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: " + std::string(framework::reason::kDynamicResources) + ".");
}

TEST_CASE("DynamicResources: pods with resourceClaims stay Pending with a message") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  Decision d = decide(s, P(R"({"metadata":{"name":"dra"},"spec":{"containers":[{"name":"c","image":"x"}],
      "resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"t"}]}})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message.find("gpuslice does not allocate DRA claims") != std::string::npos);
  CHECK(d.message.rfind("0/1 nodes are available: pod uses spec.resourceClaims", 0) == 0);
}

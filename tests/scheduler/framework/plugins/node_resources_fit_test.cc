// NodeResourcesFit on its own. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go
// (fitsRequest: "Too many pods" when pods+1 > allocatable pods; "Insufficient <resource>" for cpu, memory and
// ephemeral-storage when requested + asked > allocatable, a zero request never failing; every insufficient
// resource a reason of its own; Unschedulable, not unresolvable) and fit_test.go's cases. Scoring
// (LeastAllocated) is deliberately not part of gpuslice's profile (docs/scheduling.md): no score is asserted.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

namespace {
boost::json::object requesting(const std::string& name, const std::string& cpu, const std::string& mem,
                               const std::string& eph = "") {
  boost::json::object req{{"cpu", cpu}, {"memory", mem}};
  if (!eph.empty()) {
    req["ephemeral-storage"] = eph;
  }
  return boost::json::object{
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"containers",
         boost::json::array{boost::json::object{{"name", "c"}, {"image", "x"}, {"resources", {{"requests", req}}}}}}}}};
}
}  // namespace

TEST_CASE("NodeResourcesFit: each insufficient resource is a reason, Too many pods, zero requests fit") {
  NodeSpec small{"small", {card("GPU-1")}};
  small.cpu = "2";
  small.memory = "4Gi";
  small.pods = "2";
  Snapshot s = nodes_snapshot({small});
  boost::json::object bound = requesting("used", "1500m", "3Gi");
  spec(bound)["nodeName"] = "small";
  boost::json::object st{{"phase", "Running"}};
  bound["status"] = st;
  REQUIRE(s.upsert_pod(bound));
  PluginHarness h(framework::make_node_resources_fit());

  CHECK(h.run(s, pod_info(requesting("fits", "500m", "1Gi"))).passes("small"));
  PluginResult cpu = h.run(s, pod_info(requesting("cpu", "501m", "1Gi")));
  CHECK(cpu.filter.at("small").code == Code::unschedulable);
  CHECK(cpu.reasons("small") == "Insufficient cpu");
  CHECK(h.run(s, pod_info(requesting("both", "1", "2Gi"))).reasons("small") == "Insufficient cpu, Insufficient memory");
  CHECK(h.run(s, pod_info(requesting("eph", "0", "0", "200Gi"))).reasons("small") == "Insufficient ephemeral-storage");

  // The second pod fills allocatable pods (2): a third does not fit even with no requests.
  boost::json::object second = requesting("used-2", "0", "0");
  spec(second)["nodeName"] = "small";
  second["status"] = st;
  REQUIRE(s.upsert_pod(second));
  CHECK(h.run(s, pod_info(requesting("zero", "0", "0"))).reasons("small") == "Too many pods");
  CHECK(h.run(s, pod_info(requesting("all", "1", "2Gi"))).reasons("small") ==
        "Insufficient cpu, Insufficient memory, Too many pods");
}

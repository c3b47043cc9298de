// NodeVolumeLimits (CSI) on its own. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/nodevolumelimits/csi.go: the pod's new attachable CSI volumes (a bound claim by
// its PV's driver and handle, an unbound claim by its StorageClass's provisioner, an inline volume by its driver)
// plus the distinct ones already on the node must stay within the CSINode's allocatable.count per driver, else
// Unschedulable with ErrReasonMaxVolumeCountExceeded "node(s) exceed max volume count"; a volume already attached
// there does not count twice; nodes without a CSINode or a count have no limit (csi_test.go cases).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("NodeVolumeLimits: CSI attach counts per driver against CSINode allocatable") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  REQUIRE(s.objects().upsert_csi_node(
      J(R"({"metadata":{"name":"n1"},"spec":{"drivers":[{"name":"csi.example.com","allocatable":{"count":2}}]}})")));
  for (const char* pv : {"pv-1", "pv-2", "pv-3"}) {
    REQUIRE(s.objects().upsert_volume(J(std::string(R"({"metadata":{"name":")") + pv +
                                        R"("},"spec":{"csi":{"driver":"csi.example.com","volumeHandle":")" + pv +
                                        R"("}}})")));
    REQUIRE(s.objects().upsert_claim(J(std::string(R"({"metadata":{"name":"c-)") + pv +
                                       R"(","namespace":"default"},"spec":{"volumeName":")" + pv + R"("}})")));
  }
  auto claiming = [](const std::string& name, std::vector<std::string> claims) {
    std::string vols;
    for (size_t i = 0; i < claims.size(); ++i) {
      vols += (i ? "," : "") + std::string(R"({"name":"v)") + std::to_string(i) +
              R"(","persistentVolumeClaim":{"claimName":")" + claims[i] + R"("}})";
    }
    return R"({"metadata":{"name":")" + name + R"(","namespace":"default"},"spec":{"containers":[{"name":"c",
        "image":"x"}],"volumes":[)" +
           vols + "]}}";
  };
  PluginHarness h(framework::make_node_volume_limits());
  CHECK(h.run(s, pod_info(gpu_pod("p", "1"))).pre_filter.code == Code::skip);

  REQUIRE(s.upsert_pod(bound(claiming("user", {"c-pv-1"}), "n1")));
  CHECK(h.run(s, pod_info(J(claiming("p", {"c-pv-2"})))).passes("n1"));            // 1 + 1 <= 2
  PluginResult over = h.run(s, pod_info(J(claiming("p", {"c-pv-2", "c-pv-3"}))));  // 1 + 2 > 2
  CHECK(over.filter.at("n1").code == Code::unschedulable);
  CHECK(over.reasons("n1") == "node(s) exceed max volume count");
  CHECK(over.passes("n2"));  // no CSINode: no limit
  // pv-1 is already attached on n1: sharing it adds nothing.
  CHECK(h.run(s, pod_info(J(claiming("p", {"c-pv-1", "c-pv-2"})))).passes("n1"));
}

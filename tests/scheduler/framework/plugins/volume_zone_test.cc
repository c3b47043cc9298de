// VolumeZone on its own. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/volumezone/volume_zone.go:
// PreFilter collects the zone/region labels of the pod's bound PVs (GA and beta keys, "a__b" value sets) and
// skips without any; Filter passes nodes without any zone/region label, else fails UnschedulableAndUnresolvable
// with ErrReasonConflict "node(s) had no available volume zone" when a PV's value set does not hold the node's
// value (volume_zone_test.go cases).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("VolumeZone: a bound PV's zone set against each node's zone") {
  Snapshot s = nodes_snapshot({NodeSpec{"z1", {card("GPU-1")}, {{"topology.kubernetes.io/zone", "z1"}}},
                               NodeSpec{"z2", {card("GPU-2")}, {{"topology.kubernetes.io/zone", "z2"}}},
                               NodeSpec{"z3", {card("GPU-3")}, {{"failure-domain.beta.kubernetes.io/zone", "z3"}}},
                               NodeSpec{"plain", {card("GPU-4")}}});
  REQUIRE(s.objects().upsert_volume(J(R"({"metadata":{"name":"pv-a","labels":{"topology.kubernetes.io/zone":"z1__z3"}},
      "spec":{}})")));
  REQUIRE(
      s.objects().upsert_claim(J(R"({"metadata":{"name":"a","namespace":"default"},"spec":{"volumeName":"pv-a"}})")));
  REQUIRE(s.objects().upsert_volume(J(R"({"metadata":{"name":"pv-none"},"spec":{}})")));
  REQUIRE(s.objects().upsert_claim(
      J(R"({"metadata":{"name":"none","namespace":"default"},"spec":{"volumeName":"pv-none"}})")));
  PluginHarness h(framework::make_volume_zone());
  auto claiming = [](const std::string& claim) {
    return pod_info(J(R"({"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c",
        "image":"x"}],"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":")" +
                      claim + R"("}}]}})"));
  };
  CHECK(h.run(s, claiming("none")).pre_filter.code == Code::skip);     // PV without zone labels
  CHECK(h.run(s, claiming("missing")).pre_filter.code == Code::skip);  // VolumeBinding's concern

  PluginResult r = h.run(s, claiming("a"));
  REQUIRE(r.filter_ran);
  CHECK(r.passes("z1"));
  CHECK(r.filter.at("z2").code == Code::unresolvable);
  CHECK(r.reasons("z2") == "node(s) had no available volume zone");
  // Only a PV's beta key is translated to the node's GA key (translateToGALabel), not the other way round.
  CHECK_FALSE(r.passes("z3"));
  CHECK(r.passes("plain"));  // a node without zone labels is not constrained

  REQUIRE(s.objects().upsert_volume(
      J(R"({"metadata":{"name":"pv-beta","labels":{"failure-domain.beta.kubernetes.io/zone":"z1"}},"spec":{}})")));
  REQUIRE(s.objects().upsert_claim(
      J(R"({"metadata":{"name":"beta","namespace":"default"},"spec":{"volumeName":"pv-beta"}})")));
  PluginResult beta = h.run(s, claiming("beta"));
  CHECK(beta.passes("z1"));  // PV beta key, node GA key
  CHECK_FALSE(beta.passes("z2"));
  CHECK_FALSE(beta.passes("z3"));
}

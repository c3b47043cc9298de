// VolumeBinding on its own and, for the volume plugins together, through the profile. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/volumebinding/volume_binding.go (PreFilter: a missing claim is
// UnschedulableAndUnresolvable `persistentvolumeclaim "<name>" not found`, an unbound Immediate claim "pod has
// unbound immediate PersistentVolumeClaims"; Filter: a bound PV whose nodeAffinity excludes the node "node(s) had
// volume node affinity conflict"; WaitForFirstConsumer claims provisioned on a node the class's allowedTopologies
// permits, binder.go) and the other volume plugins' messages in the combined case below.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("VolumeBinding: PreFilter verdicts and per-node PV node affinity") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  PluginHarness h(framework::make_volume_binding());
  auto with_claim = [](const std::string& claim) {
    return pod_info(J(R"({"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c",
        "image":"x"}],"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":")" +
                      claim + R"("}}]}})"));
  };
  CHECK(h.run(s, pod_info(gpu_pod("p", "1"))).pre_filter.code == Code::skip);

  PluginResult missing = h.run(s, with_claim("nope"));
  CHECK(missing.pre_filter.code == Code::unresolvable);
  CHECK(missing.pre_filter.reasons == std::vector<std::string>{"persistentvolumeclaim \"nope\" not found"});

  REQUIRE(s.objects().upsert_claim(J(R"({"metadata":{"name":"unbound","namespace":"default"},"spec":{}})")));
  PluginResult unbound = h.run(s, with_claim("unbound"));
  CHECK(unbound.pre_filter.code == Code::unresolvable);
  CHECK(unbound.pre_filter.reasons == std::vector<std::string>{"pod has unbound immediate PersistentVolumeClaims"});

  REQUIRE(s.objects().upsert_volume(J(R"({"metadata":{"name":"pv"},"spec":{"nodeAffinity":{"required":{
      "nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["n2"]}]}]}}}})")));
  REQUIRE(
      s.objects().upsert_claim(J(R"({"metadata":{"name":"local","namespace":"default"},"spec":{"volumeName":"pv"}})")));
  PluginResult local = h.run(s, with_claim("local"));
  REQUIRE(local.filter_ran);
  CHECK(local.passes("n2"));
  CHECK(local.filter.at("n1").code == Code::unresolvable);
  CHECK(local.reasons("n1") == "node(s) had volume node affinity conflict");
}

TEST_CASE("VolumeBinding / VolumeZone / VolumeRestrictions / NodeVolumeLimits") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}, {{"topology.kubernetes.io/zone", "z1"}}},
                        NodeSpec{"n2", {card("GPU-2")}, {{"topology.kubernetes.io/zone", "z2"}}}});
  auto with_claim = [](std::string name, std::string claim) {
    return P(R"({"metadata":{"name":")" + name + R"("},"spec":{"containers":[{"name":"c","image":"x"}],
        "volumes":[{"name":"v","persistentVolumeClaim":{"claimName":")" +
             claim + R"("}}]}})");
  };
  Decision missing = decide(s, with_claim("p", "nope"));
  CHECK(missing.message == "0/2 nodes are available: persistentvolumeclaim \"nope\" not found.");

  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"unbound","namespace":"default"},"spec":{"accessModes":["ReadWriteOnce"]}})")));
  CHECK(decide(s, with_claim("p", "unbound")).message ==
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.");

  // Bound to a local PV on n2: only n2.
  REQUIRE(s.objects().upsert_volume(P(R"({"metadata":{"name":"pv-local"},"spec":{"capacity":{"storage":"1Gi"},
      "nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["n2"]}]}]}}}})")));
  REQUIRE(s.objects().upsert_claim(P(
      R"({"metadata":{"name":"data","namespace":"default"},"spec":{"volumeName":"pv-local","accessModes":["ReadWriteOncePod"]}})")));
  Decision local = decide(s, with_claim("p", "data"));
  REQUIRE(local.scheduled);
  CHECK(local.node == "n2");
  auto pinned = with_claim("p", "data");
  pinned["spec"].as_object()["nodeSelector"] = json::object{{"kubernetes.io/hostname", "n1"}};
  CHECK(decide(s, pinned).message ==
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had volume node "
        "affinity conflict.");

  // ReadWriteOncePod: a second pod using the claim is refused.
  auto user = with_claim("user", "data");
  user["spec"].as_object()["nodeName"] = "n2";
  REQUIRE(s.upsert_pod(user));
  CHECK(decide(s, with_claim("p2", "data")).message ==
        "0/2 nodes are available: node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
        "access mode.");

  // Zone-labelled PV in z1.
  REQUIRE(s.objects().upsert_volume(
      P(R"({"metadata":{"name":"pv-z1","labels":{"topology.kubernetes.io/zone":"z1"}},"spec":{}})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"zoned","namespace":"default"},"spec":{"volumeName":"pv-z1"}})")));
  Decision z = decide(s, with_claim("p3", "zoned"));
  REQUIRE(z.scheduled);
  CHECK(z.node == "n1");

  // WaitForFirstConsumer: refused with a message unless the caller selects volume nodes.
  REQUIRE(s.objects().upsert_storage_class(P(R"({"metadata":{"name":"wffc"},"provisioner":"csi.example.com",
      "volumeBindingMode":"WaitForFirstConsumer","allowedTopologies":[{"matchLabelExpressions":[{"key":"topology.kubernetes.io/zone","values":["z2"]}]}]})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"late","namespace":"default"},"spec":{"storageClassName":"wffc"}})")));
  CHECK(decide(s, with_claim("p4", "late")).message.find("waits for its first consumer") != std::string::npos);
  auto info = parse_pod(with_claim("p4", "late"), gpuslice::DeviceConfig{});
  ScheduleOptions opt;
  opt.select_volume_nodes = true;
  Decision w = schedule(s, *info, opt);
  REQUIRE(w.scheduled);
  CHECK(w.node == "n2");
  CHECK(w.claims_to_select == std::vector<std::string>{"late"});

  // CSI attach limit 1 on n2, already used by a pod there.
  REQUIRE(s.objects().upsert_csi_node(
      P(R"({"metadata":{"name":"n2"},"spec":{"drivers":[{"name":"csi.example.com","allocatable":{"count":1}}]}})")));
  REQUIRE(s.objects().upsert_claim(
      P(R"({"metadata":{"name":"late2","namespace":"default"},"spec":{"storageClassName":"wffc"}})")));
  auto holder = with_claim("holder", "late2");
  holder["spec"].as_object()["nodeName"] = "n2";
  REQUIRE(s.upsert_pod(holder));
  Decision lim = schedule(s, *info, opt);
  CHECK_FALSE(lim.scheduled);
  CHECK(lim.message.find("node(s) exceed max volume count") != std::string::npos);
}

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

// ---- static binding of unbound WaitForFirstConsumer claims (binder.go FindPodVolumes / findMatchingVolumes,
// pv_helpers.go FindMatchingVolume; the shapes of binder_test.go's TestFindPodVolumesWithoutProvisioning) ----
namespace {

constexpr const char* kNoProvisionerClass =
    R"({"metadata":{"name":"local"},"provisioner":"kubernetes.io/no-provisioner",
    "volumeBindingMode":"WaitForFirstConsumer"})";

/// A PV of `cls` with `capacity`, phase Available unless `extra_status` says otherwise; `spec` and `meta` add fields.
json::object pv(const std::string& name, const std::string& capacity, const std::string& node = "",
                const std::string& spec = "", const std::string& meta = "", const std::string& cls = "local",
                const std::string& phase = "Available") {
  std::string affinity;
  if (!node.empty()) {
    affinity =
        R"(,"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname",
        "operator":"In","values":[")" +
        node + R"("]}]}]}})";
  }
  return J(R"({"metadata":{"name":")" + name + R"(","resourceVersion":"rv-)" + name + "\"" + meta +
           R"(},"spec":{"storageClassName":")" + cls + R"(","capacity":{"storage":")" + capacity +
           R"("},"accessModes":["ReadWriteOnce"])" + affinity + spec + R"(},"status":{"phase":")" + phase + R"("}})");
}
json::object claim(const std::string& name, const std::string& request, const std::string& spec = "",
                   const std::string& meta = "", const std::string& cls = "local") {
  return J(R"({"metadata":{"name":")" + name + R"(","namespace":"default","uid":"uid-)" + name +
           R"(","resourceVersion":"crv-)" + name + "\"" + meta + R"(},"spec":{"storageClassName":")" + cls +
           R"(","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":")" + request + "\"}}" + spec +
           "}}");
}
json::object claiming_pod(const std::string& name, const std::vector<std::string>& claims,
                          const std::string& node_selector = "") {
  json::array vols;
  for (const std::string& c : claims) {
    vols.push_back(json::object{{"name", "v-" + c}, {"persistentVolumeClaim", json::object{{"claimName", c}}}});
  }
  json::object pod = J(R"({"metadata":{"name":")" + name +
                       R"(","namespace":"default"},"spec":{"containers":[{"name":"c","image":"x"}]}})");
  pod["spec"].as_object()["volumes"] = std::move(vols);
  if (!node_selector.empty()) {
    pod["spec"].as_object()["nodeSelector"] = json::object{{"kubernetes.io/hostname", node_selector}};
  }
  return pod;
}
Decision decide_binding(const Snapshot& s, const json::object& pod) {
  auto info = parse_pod(pod, gpuslice::DeviceConfig{});
  REQUIRE(info.ok());
  ScheduleOptions opt;
  opt.select_volume_nodes = true;
  return schedule(s, *info, opt);
}
/// claim -> PV of a decision's static bindings.
std::map<std::string, std::string> bound_to(const Decision& d) {
  std::map<std::string, std::string> m;
  for (const StaticBinding& b : d.volumes_to_bind) {
    m[b.claim] = b.volume;
  }
  return m;
}
constexpr const char* kNoPv = "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.";

}  // namespace

TEST_CASE(
    "VolumeBinding: static binding picks the smallest matching PV (class, capacity, access modes, selector, "
    "volumeMode, phase, deletion, claimRef)") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_volume(
      pv("pv-5g", "5Gi", "", R"(,"accessModes":["ReadWriteOnce","ReadWriteMany"])", R"(,"labels":{"tier":"fast"})")));
  REQUIRE(o.upsert_volume(pv("pv-2g", "2Gi")));
  REQUIRE(o.upsert_volume(pv("pv-1g-other", "1Gi", "", "", "", "other")));  // class mismatch
  REQUIRE(o.upsert_volume(pv("pv-1g-released", "1Gi", "", "", "", "local", "Released")));
  REQUIRE(o.upsert_volume(pv("pv-1g-deleting", "1Gi", "", "", R"(,"deletionTimestamp":"2026-12-04T00:00:00Z")")));
  REQUIRE(o.upsert_volume(pv("pv-1g-taken", "1Gi", "", R"(,"claimRef":{"namespace":"default","name":"someone"})")));
  REQUIRE(o.upsert_volume(pv("pv-3g-block", "3Gi", "", R"(,"volumeMode":"Block")")));

  // Smallest fit: 1Gi asked; the 1Gi PVs are of another class, Released, deleting or claimed by another claim.
  REQUIRE(o.upsert_claim(claim("small", "1Gi")));
  Decision d = decide_binding(s, claiming_pod("p", {"small"}));
  REQUIRE(d.scheduled);
  CHECK(bound_to(d) == std::map<std::string, std::string>{{"small", "pv-2g"}});
  REQUIRE(d.volumes_to_bind.size() == 1);
  const StaticBinding& b = d.volumes_to_bind[0];
  CHECK(b.claim_uid == "uid-small");
  CHECK(b.claim_resource_version == "crv-small");
  CHECK(b.volume_resource_version == "rv-pv-2g");
  CHECK_FALSE(b.pre_bound);
  CHECK(b.needs_write);
  CHECK(d.claims_to_select.empty());

  // Access modes: ReadWriteMany only on pv-5g.
  REQUIRE(o.upsert_claim(claim("rwx", "1Gi", R"(,"accessModes":["ReadWriteMany"])")));
  CHECK(bound_to(decide_binding(s, claiming_pod("p", {"rwx"}))) ==
        std::map<std::string, std::string>{{"rwx", "pv-5g"}});
  // Selector: tier=fast only on pv-5g; a selector nothing matches leaves no PV.
  REQUIRE(o.upsert_claim(claim("fast", "1Gi", R"(,"selector":{"matchLabels":{"tier":"fast"}})")));
  CHECK(bound_to(decide_binding(s, claiming_pod("p", {"fast"}))) ==
        std::map<std::string, std::string>{{"fast", "pv-5g"}});
  REQUIRE(o.upsert_claim(
      claim("slow", "1Gi", R"(,"selector":{"matchExpressions":[{"key":"tier","operator":"In","values":["slow"]}]})")));
  CHECK(decide_binding(s, claiming_pod("p", {"slow"})).message == kNoPv);
  // volumeMode: a Block claim takes only the Block PV; a Filesystem claim never takes it.
  REQUIRE(o.upsert_claim(claim("raw", "1Gi", R"(,"volumeMode":"Block")")));
  CHECK(bound_to(decide_binding(s, claiming_pod("p", {"raw"}))) ==
        std::map<std::string, std::string>{{"raw", "pv-3g-block"}});
  // Capacity: nothing holds 6Gi. A class without a provisioner cannot make one: the node fails.
  REQUIRE(o.upsert_claim(claim("huge", "6Gi")));
  Decision none = decide_binding(s, claiming_pod("p", {"huge"}));
  CHECK_FALSE(none.scheduled);
  CHECK(none.message == kNoPv);

  // The claim's class comes from the beta annotation first (GetPersistentVolumeClaimClass).
  REQUIRE(o.upsert_claim(
      claim("beta", "1Gi", "", R"(,"annotations":{"volume.beta.kubernetes.io/storage-class":"local"})", "other")));
  CHECK(bound_to(decide_binding(s, claiming_pod("p", {"beta"}))) ==
        std::map<std::string, std::string>{{"beta", "pv-2g"}});

  // A malformed selector is an error naming the field and value; the claim is not stored.
  auto bad = o.upsert_claim(
      claim("bad", "1Gi", R"(,"selector":{"matchExpressions":[{"key":"tier","operator":"Maybe","values":["x"]}]})"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("persistentvolumeclaim default/bad: spec.selector") != std::string::npos);
  CHECK(bad.message().find("Maybe") != std::string::npos);
  CHECK(o.find_claim("default", "bad") == nullptr);
}

TEST_CASE("VolumeBinding: static binding per node follows the PV's node affinity") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_volume(pv("local-n2", "1Gi", "n2")));
  REQUIRE(o.upsert_claim(claim("data", "1Gi")));
  PluginHarness h(framework::make_volume_binding());
  ScheduleOptions opt;
  opt.select_volume_nodes = true;
  PluginResult r = h.run(s, pod_info(claiming_pod("p", {"data"})), opt);
  REQUIRE(r.filter_ran);
  CHECK(r.passes("n2"));
  CHECK(r.filter.at("n1").code == Code::unresolvable);
  CHECK(r.reasons("n1") == "node(s) didn't find available persistent volumes to bind");
  Decision d = decide_binding(s, claiming_pod("p", {"data"}));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
  CHECK(bound_to(d) == std::map<std::string, std::string>{{"data", "local-n2"}});

  // A larger PV on n1: each node binds its own (binpack ties by name: n1 first), pinned to n2 the smaller one.
  REQUIRE(o.upsert_volume(pv("local-n1", "5Gi", "n1")));
  Decision both = decide_binding(s, claiming_pod("p", {"data"}));
  REQUIRE(both.scheduled);
  CHECK(both.node == "n1");
  CHECK(bound_to(both) == std::map<std::string, std::string>{{"data", "local-n1"}});
  Decision pinned = decide_binding(s, claiming_pod("p", {"data"}, "n2"));
  REQUIRE(pinned.scheduled);
  CHECK(bound_to(pinned) == std::map<std::string, std::string>{{"data", "local-n2"}});

  // Without a caller that binds (select_volume_nodes false) the pod stays Pending with a message saying so.
  CHECK(decide(s, claiming_pod("p", {"data"})).message.find("does not bind or provision") != std::string::npos);
}

TEST_CASE("VolumeBinding: a PV pre-bound to the claim wins, and only on its own node") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_volume(pv("small-n1", "1Gi", "n1")));
  // Larger, and not Available (the PV controller has not synced it): pre-bound PVs skip the phase check.
  REQUIRE(o.upsert_volume(pv("pre-n2", "10Gi", "n2",
                             R"(,"claimRef":{"namespace":"default","name":"data","uid":"uid-data"})", "", "local",
                             "Pending")));
  REQUIRE(o.upsert_claim(claim("data", "1Gi")));
  PluginHarness h(framework::make_volume_binding());
  ScheduleOptions opt;
  opt.select_volume_nodes = true;
  PluginResult r = h.run(s, pod_info(claiming_pod("p", {"data"})), opt);
  REQUIRE(r.filter_ran);
  CHECK(r.passes("n2"));
  CHECK(r.reasons("n1") == "node(s) didn't find available persistent volumes to bind");  // not small-n1
  Decision d = decide_binding(s, claiming_pod("p", {"data"}));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
  REQUIRE(d.volumes_to_bind.size() == 1);
  CHECK(d.volumes_to_bind[0].volume == "pre-n2");
  CHECK(d.volumes_to_bind[0].pre_bound);
  CHECK_FALSE(d.volumes_to_bind[0].needs_write);  // claimRef complete: GetBindVolumeToClaim is not dirty

  // Pre-bound by name only (no UID): still this claim's, the UID gets written, no bound-by-controller.
  REQUIRE(o.upsert_volume(pv("pre-n2", "10Gi", "n2", R"(,"claimRef":{"namespace":"default","name":"data"})")));
  Decision by_name = decide_binding(s, claiming_pod("p", {"data"}));
  REQUIRE(by_name.volumes_to_bind.size() == 1);
  CHECK(by_name.volumes_to_bind[0].pre_bound);
  CHECK(by_name.volumes_to_bind[0].needs_write);
  // A claimRef with another UID belongs to an earlier claim of that name: not ours, small-n1 is taken instead.
  REQUIRE(o.upsert_volume(
      pv("pre-n2", "10Gi", "n2", R"(,"claimRef":{"namespace":"default","name":"data","uid":"uid-old"})")));
  Decision other = decide_binding(s, claiming_pod("p", {"data"}));
  REQUIRE(other.scheduled);
  CHECK(bound_to(other) == std::map<std::string, std::string>{{"data", "small-n1"}});
}

TEST_CASE("VolumeBinding: selected-node fast path, provisioning fallback and no-provisioner classes") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_storage_class(
      J(R"({"metadata":{"name":"dyn"},"provisioner":"csi.example.com","volumeBindingMode":"WaitForFirstConsumer"})")));
  PluginHarness h(framework::make_volume_binding());
  ScheduleOptions opt;
  opt.select_volume_nodes = true;

  // selected-node already n2: n1 fails at once, n2 provisions (no PV matching attempted, even with one on n2).
  REQUIRE(o.upsert_volume(pv("dyn-pv-n2", "1Gi", "n2", "", "", "dyn")));
  REQUIRE(o.upsert_claim(
      claim("asked", "1Gi", "", R"(,"annotations":{"volume.kubernetes.io/selected-node":"n2"})", "dyn")));
  PluginResult r = h.run(s, pod_info(claiming_pod("p", {"asked"})), opt);
  REQUIRE(r.filter_ran);
  CHECK(r.reasons("n1") == "node(s) didn't find available persistent volumes to bind");
  CHECK(r.passes("n2"));
  Decision d = decide_binding(s, claiming_pod("p", {"asked"}));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n2");
  CHECK(d.claims_to_select == std::vector<std::string>{"asked"});
  CHECK(d.volumes_to_bind.empty());

  // A dynamic class: the matching existing PV is bound (on n2), elsewhere the claim is provisioned.
  REQUIRE(o.upsert_claim(claim("fresh", "1Gi", "", "", "dyn")));
  Decision pinned_n2 = decide_binding(s, claiming_pod("p", {"fresh"}, "n2"));
  CHECK(bound_to(pinned_n2) == std::map<std::string, std::string>{{"fresh", "dyn-pv-n2"}});
  CHECK(pinned_n2.claims_to_select.empty());
  Decision pinned_n1 = decide_binding(s, claiming_pod("p", {"fresh"}, "n1"));
  CHECK(pinned_n1.volumes_to_bind.empty());
  CHECK(pinned_n1.claims_to_select == std::vector<std::string>{"fresh"});

  // selected-node on a class without a provisioner: never provisionable, every node fails.
  REQUIRE(o.upsert_claim(claim("stuck", "1Gi", "", R"(,"annotations":{"volume.kubernetes.io/selected-node":"n1"})")));
  CHECK(decide_binding(s, claiming_pod("p", {"stuck"})).message ==
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.");
}

TEST_CASE("VolumeBinding: two claims of one pod never get the same PV, smaller requests choosing first") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_volume(pv("pv-2g", "2Gi")));
  REQUIRE(o.upsert_volume(pv("pv-3g", "3Gi")));
  REQUIRE(o.upsert_claim(claim("big", "2Gi")));
  REQUIRE(o.upsert_claim(claim("little", "1Gi")));
  // byPVCSize: little (1Gi) takes the smallest fit pv-2g, big (2Gi) then pv-3g - although the pod lists big first.
  Decision d = decide_binding(s, claiming_pod("p", {"big", "little"}));
  REQUIRE(d.scheduled);
  CHECK(bound_to(d) == std::map<std::string, std::string>{{"big", "pv-3g"}, {"little", "pv-2g"}});
  // One PV for two claims: the second has no match.
  REQUIRE(o.remove_volume("pv-2g"));
  CHECK(decide_binding(s, claiming_pod("p", {"big", "little"})).message == kNoPv);
}

TEST_CASE("VolumeBinding: a PV chosen by an assumed decision is not offered again until forgotten") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}});
  ClusterObjects& o = s.objects();
  REQUIRE(o.upsert_storage_class(J(kNoProvisionerClass)));
  REQUIRE(o.upsert_volume(pv("only", "1Gi")));
  REQUIRE(o.upsert_claim(claim("first", "1Gi")));
  REQUIRE(o.upsert_claim(claim("second", "1Gi")));
  auto first = parse_pod(claiming_pod("p1", {"first"}), gpuslice::DeviceConfig{});
  REQUIRE(first.ok());
  Decision d1 = decide_binding(s, claiming_pod("p1", {"first"}));
  REQUIRE(bound_to(d1) == std::map<std::string, std::string>{{"first", "only"}});
  REQUIRE(s.assume(*first, d1.node, d1.devices, 0));
  o.assume_claim_ref("only", AssumedClaimRef{"default", "first", "uid-first", "default/p1"});

  // p2 decided before the API shows the claimRef: no PV for it.
  CHECK(decide_binding(s, claiming_pod("p2", {"second"})).message == kNoPv);
  // A PV event without claimRef (older than our write) keeps the assumption.
  REQUIRE(o.upsert_volume(pv("only", "1Gi", "", "", R"(,"labels":{"x":"y"})")));
  CHECK(decide_binding(s, claiming_pod("p2", {"second"})).message == kNoPv);
  // p1 itself, decided again, still finds it (pre-bound to its claim by the assumption).
  CHECK(bound_to(decide_binding(s, claiming_pod("p1", {"first"}))) ==
        std::map<std::string, std::string>{{"first", "only"}});
  // The bind failed: forget() undoes the assumption, p2 may take it.
  CHECK(s.forget("default", "p1"));
  CHECK(o.assumed_claim_ref("only") == nullptr);
  CHECK(bound_to(decide_binding(s, claiming_pod("p2", {"second"}))) ==
        std::map<std::string, std::string>{{"second", "only"}});

  // Assumed again; the API then shows the claimRef: the assumption gives way to the API's object.
  o.assume_claim_ref("only", AssumedClaimRef{"default", "first", "uid-first", "default/p1"});
  REQUIRE(o.upsert_volume(
      pv("only", "1Gi", "", R"(,"claimRef":{"namespace":"default","name":"first","uid":"uid-first"})")));
  CHECK(o.assumed_claim_ref("only") == nullptr);
  CHECK(decide_binding(s, claiming_pod("p2", {"second"})).message == kNoPv);
  // remove_pod (the pod re-decided or deleted) drops its assumptions too.
  o.assume_claim_ref("only", AssumedClaimRef{"default", "second", "uid-second", "default/p2"});
  REQUIRE(o.assumed_claim_ref("only") != nullptr);
  s.remove_pod("default", "p2");
  CHECK(o.assumed_claim_ref("only") == nullptr);
}

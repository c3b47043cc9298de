// VolumeRestrictions on its own. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go: PreFilter rejects a pod whose
// ReadWriteOncePod claim another pod already uses (UnschedulableAndUnresolvable, ErrReasonReadWriteOncePodConflict
// "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"); Filter
// (isVolumeConflict) fails Unschedulable with ErrReasonDiskConflict "node(s) had no available disk" for the same
// GCE PD unless both read-only, the same AWS EBS volume always, the same RBD image with overlapping monitors unless
// both read-only, the same iSCSI IQN unless both read-only (volume_restrictions_test.go cases).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

namespace {
std::string disk_pod(const std::string& name, const std::string& volume) {
  return R"({"metadata":{"name":")" + name + R"(","namespace":"default"},"spec":{"containers":[{"name":"c",
    "image":"x"}],"volumes":[{"name":"v",)" +
         volume + "}]}}";
}
}  // namespace

TEST_CASE("VolumeRestrictions Filter: disk conflicts by kind, read-only exceptions, per node") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}, NodeSpec{"n2", {card("GPU-2")}}});
  REQUIRE(s.upsert_pod(bound(disk_pod("gce", R"("gcePersistentDisk":{"pdName":"pd-1","readOnly":true})"), "n1")));
  REQUIRE(s.upsert_pod(bound(disk_pod("ebs", R"("awsElasticBlockStore":{"volumeID":"vol-1","readOnly":true})"), "n1")));
  REQUIRE(s.upsert_pod(
      bound(disk_pod("rbd", R"("rbd":{"pool":"p","image":"img","monitors":["m1","m2"],"readOnly":true})"), "n1")));
  PluginHarness h(framework::make_volume_restrictions());
  auto verdict = [&](const std::string& volume) { return h.run(s, pod_info(J(disk_pod("new", volume)))); };

  CHECK(h.run(s, pod_info(gpu_pod("p", "1"))).pre_filter.code == Code::skip);

  PluginResult rw = verdict(R"("gcePersistentDisk":{"pdName":"pd-1"})");
  CHECK(rw.filter.at("n1").code == Code::unschedulable);
  CHECK(rw.reasons("n1") == "node(s) had no available disk");
  CHECK(rw.passes("n2"));
  CHECK(verdict(R"("gcePersistentDisk":{"pdName":"pd-1","readOnly":true})").passes("n1"));  // both read-only
  CHECK(verdict(R"("gcePersistentDisk":{"pdName":"pd-2"})").passes("n1"));
  CHECK_FALSE(verdict(R"("awsElasticBlockStore":{"volumeID":"vol-1","readOnly":true})").passes("n1"));  // always
  CHECK_FALSE(verdict(R"("rbd":{"pool":"p","image":"img","monitors":["m2","m3"]})").passes("n1"));
  CHECK(verdict(R"("rbd":{"pool":"p","image":"img","monitors":["m3"]})").passes("n1"));  // no common monitor
  CHECK(verdict(R"("rbd":{"pool":"p","image":"img","monitors":["m1"],"readOnly":true})").passes("n1"));
}

TEST_CASE("VolumeRestrictions PreFilter: a ReadWriteOncePod claim in use elsewhere is unresolvable") {
  Snapshot s = nodes_snapshot({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.objects().upsert_claim(J(R"({"metadata":{"name":"once","namespace":"default"},
      "spec":{"accessModes":["ReadWriteOncePod"],"volumeName":"pv"}})")));
  REQUIRE(s.objects().upsert_claim(J(R"({"metadata":{"name":"many","namespace":"default"},
      "spec":{"accessModes":["ReadWriteOnce"],"volumeName":"pv2"}})")));
  PluginHarness h(framework::make_volume_restrictions());
  auto claiming = [](const std::string& name, const std::string& claim) {
    return disk_pod(name, R"("persistentVolumeClaim":{"claimName":")" + claim + R"("})");
  };
  CHECK(h.run(s, pod_info(J(claiming("first", "once")))).pre_filter.code == Code::skip);  // unused yet
  REQUIRE(s.upsert_pod(bound(claiming("first", "once"), "n1")));
  REQUIRE(s.upsert_pod(bound(claiming("holder", "many"), "n1")));
  PluginResult r = h.run(s, pod_info(J(claiming("second", "once"))));
  CHECK(r.pre_filter.code == Code::unresolvable);
  CHECK(r.pre_filter.reasons == std::vector<std::string>{"node has pod using PersistentVolumeClaim with the same name "
                                                         "and ReadWriteOncePod access mode"});
  // The same pod again (its own record) is no conflict; a ReadWriteOnce claim is not this plugin's concern.
  CHECK(h.run(s, pod_info(J(claiming("first", "once")))).pre_filter.code == Code::skip);
  CHECK(h.run(s, pod_info(J(claiming("second", "many")))).pre_filter.code == Code::skip);
}

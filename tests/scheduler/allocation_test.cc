// Device strings and the scheduler-owned annotation names (scheduler/allocation.h, hami-protocol.md §4).
#include "scheduler/allocation.h"
#include "common/gpu_request.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <map>
#include <string>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;
namespace json = boost::json;

TEST_CASE("device strings: HAMi's examples decode with every slot kept", "[allocation]") {
  auto one = decode_pod_devices("GPU-a,NVIDIA,3000,30:;");
  REQUIRE(one.ok());
  REQUIRE(one->size() == 1);
  CHECK(one->at(0) == ContainerDevices{{"GPU-a", "NVIDIA", 3000, 30}});

  auto two = decode_pod_devices("GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,3000,30:;");
  REQUIRE(two.ok());
  REQUIRE(two->size() == 1);
  CHECK(two->at(0).size() == 2);

  auto gap = decode_pod_devices(";GPU-a,NVIDIA,5000,0:;");
  REQUIRE(gap.ok());
  REQUIRE(gap->size() == 2);
  CHECK(gap->at(0).empty());
  CHECK(gap->at(1) == ContainerDevices{{"GPU-a", "NVIDIA", 5000, 0}});

  auto init = decode_pod_devices("GPU-a,NVIDIA,2000,20:;;GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,3000,30:;");
  REQUIRE(init.ok());
  REQUIRE(init->size() == 3);
  CHECK(init->at(0).size() == 1);
  CHECK(init->at(1).empty());
  CHECK(init->at(2).size() == 2);
}

TEST_CASE("device strings: encode keeps empty slots and round-trips", "[allocation]") {
  PodDevices pd = {{{"GPU-a", "NVIDIA", 2000, 20}}, {}, {{"GPU-b", "NVIDIA", 3000, 30}, {"GPU-c", "NVIDIA", 3000, 30}}};
  std::string s = encode_pod_devices(pd);
  CHECK(s == "GPU-a,NVIDIA,2000,20:;;GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,3000,30:;");
  auto back = decode_pod_devices(s);
  REQUIRE(back.ok());
  CHECK(back.value() == pd);
  CHECK(encode_pod_devices({}) == "");
  CHECK(encode_pod_devices({{}, {}}) == ";;");
  CHECK(decode_pod_devices(";;").value() == PodDevices{{}, {}});
  CHECK(decode_pod_devices("").value().empty());
  CHECK(has_devices(pd));
  CHECK_FALSE(has_devices({{}, {}}));
  // The device plugin empties consumed entries: "; ;" style leftovers hold no vendor word.
  CHECK_FALSE(has_devices(decode_pod_devices(";;").value()));
}

TEST_CASE("device strings: tolerant where HAMi is, errors name slot, field and value", "[allocation]") {
  // Segments without a comma are ignored; a trailing unterminated slot still counts.
  auto r = decode_pod_devices("junk:GPU-a,NVIDIA,1,2:;GPU-b,NVIDIA,3,4:");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK(r->at(0).size() == 1);
  CHECK(r->at(1).at(0).uuid == "GPU-b");
  // Extra fields beyond 4 are accepted (HAMi reads the first four).
  CHECK(decode_pod_devices("GPU-a,NVIDIA,1,2,extra:;").ok());

  auto bad_mem = decode_pod_devices(";GPU-a,NVIDIA,lots,30:;");
  REQUIRE_FALSE(bad_mem.ok());
  CHECK_THAT(bad_mem.message(), Contains("container[1].device[0].mem: \"lots\""));
  auto bad_cores = decode_pod_devices("GPU-a,NVIDIA,1,-5:;");
  REQUIRE_FALSE(bad_cores.ok());
  CHECK_THAT(bad_cores.message(), Contains("cores: \"-5\""));
  auto short_dev = decode_pod_devices("GPU-a,NVIDIA,1:;");
  REQUIRE_FALSE(short_dev.ok());
  CHECK_THAT(short_dev.message(), Contains("want 4"));
  CHECK_FALSE(decode_pod_devices(",NVIDIA,1,1:;").ok());
}

TEST_CASE("scheduler-owned annotation names are HAMi's", "[allocation]") {
  CHECK(kVgpuNodeAnnotation == "hami.io/vgpu-node");
  CHECK(kVgpuTimeAnnotation == "hami.io/vgpu-time");
  CHECK(kDevicesToAllocateAnnotation == "hami.io/vgpu-devices-to-allocate");
  CHECK(kDevicesAllocatedAnnotation == "hami.io/vgpu-devices-allocated");
  CHECK(kBindPhaseAnnotation == "hami.io/bind-phase");
  CHECK(kBindTimeAnnotation == "hami.io/bind-time");
  CHECK(kNodeLockAnnotation == "hami.io/mutex.lock");
}

TEST_CASE("allocation annotations carry node, time and identical device strings", "[allocation]") {
  const PodDevices devices{{}, {{"GPU-a", "NVIDIA", 3000, 30}}};
  json::object a = allocation_annotations("n", devices, 1700000000);
  CHECK(a.size() == 4);
  CHECK(a.at("hami.io/vgpu-node").as_string() == "n");
  CHECK(a.at("hami.io/vgpu-time").as_string() == "1700000000");
  CHECK(a.at("hami.io/vgpu-devices-to-allocate").as_string() == ";GPU-a,NVIDIA,3000,30:;");
  CHECK(a.at("hami.io/vgpu-devices-allocated") == a.at("hami.io/vgpu-devices-to-allocate"));
}

TEST_CASE("allocation binding metadata: annotations, bind phase and the vgpu-node label", "[allocation]") {
  const PodDevices devices{{{"GPU-a", "NVIDIA", 3000, 30}}};
  auto m = allocation_binding_metadata("gpu-0", devices, 1796024904);
  CHECK(m.annotations == std::map<std::string, std::string>{
                             {"hami.io/vgpu-node", "gpu-0"},
                             {"hami.io/vgpu-time", "1796024904"},
                             {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,3000,30:;"},
                             {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,3000,30:;"},
                             {"hami.io/bind-phase", "allocating"},
                             {"hami.io/bind-time", "1796024904"},
                         });
  CHECK(m.labels == std::map<std::string, std::string>{{"hami.io/vgpu-node", "gpu-0"}});
  // The Binding as sent: both maps inside its metadata, next to the UID precondition.
  auto b = gpuslice::kube::make_binding("ns", "p", "gpu-0", "uid-1", m);
  CHECK(b.at("metadata").at("uid") == "uid-1");
  CHECK(b.at("metadata").at("annotations").at("hami.io/bind-phase") == "allocating");
  CHECK(b.at("metadata").at("labels").at("hami.io/vgpu-node") == "gpu-0");

  // A node name longer than a label value allows keeps only the annotation; 63 characters still fit.
  const std::string long_name(64, 'n');
  auto blind = allocation_binding_metadata(long_name, devices, 1);
  CHECK(blind.labels.empty());
  CHECK(blind.annotations.at("hami.io/vgpu-node") == long_name);
  CHECK(vgpu_node_label_patch(long_name).empty());
  const std::string max_name(63, 'n');
  CHECK(allocation_binding_metadata(max_name, devices, 1).labels.at("hami.io/vgpu-node") == max_name);
  CHECK(json::parse(vgpu_node_label_patch("gpu-0")) ==
        json::parse(R"({"metadata":{"labels":{"hami.io/vgpu-node":"gpu-0"}}})"));
}

TEST_CASE("owned-annotations removal patch: every scheduler-owned key null, precondition when given", "[allocation]") {
  auto patch = json::parse(owned_annotations_removal_patch("7")).as_object();
  const auto& meta = patch.at("metadata").as_object();
  CHECK(meta.at("resourceVersion") == "7");
  const auto& a = meta.at("annotations").as_object();
  CHECK(a.size() == std::size(kSchedulerOwnedAnnotations));
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    REQUIRE(a.contains(k));
    CHECK(a.at(k).is_null());
  }
  CHECK_FALSE(meta.contains("labels"));
  CHECK_FALSE(json::parse(owned_annotations_removal_patch("")).at("metadata").as_object().contains("resourceVersion"));
}

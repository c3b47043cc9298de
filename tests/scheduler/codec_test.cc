// Inventory and allocation codecs, quantities (hami-protocol.md §3, §4).
#include "scheduler/allocation.h"
#include "scheduler/inventory.h"
#include "scheduler/quantity.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;

TEST_CASE("quantities parse into milli-units", "[quantity]") {
  CHECK(parse_quantity_milli("4").value() == 4000);
  CHECK(parse_quantity_milli("500m").value() == 500);
  CHECK(parse_quantity_milli("1.5").value() == 1500);
  CHECK(parse_quantity_milli("1Ki").value() == 1024000);
  CHECK(parse_quantity_milli("16Gi").value() == (int64_t(16) << 30) * 1000);
  CHECK(parse_quantity_milli("2k").value() == 2000000);
  CHECK(parse_quantity_milli("1e3").value() == 1000000);
  CHECK(parse_quantity_milli("0.0001").value() == 1);  // rounded up to one milli-unit
  CHECK(parse_quantity_milli("+3").value() == 3000);
  for (const char* bad : {"", "-1", "abc", "1X", "1e", "1e999", "99999999999999999999"}) {
    auto r = parse_quantity_milli(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Contains(std::string("\"") + bad + "\""));
  }
}

TEST_CASE("register annotation: HAMi JSON with omitempty fields", "[inventory]") {
  auto r = decode_node_devices(
      "n1", R"([{"id":"GPU-a","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA GeForce RTX 3070","mode":"hami-core","health":true},
               {"id":"GPU-b","index":1,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA GeForce RTX 3070","numa":1}])");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK(r->at(0).id == "GPU-a");
  CHECK(r->at(0).index == 0);  // omitted: zero
  CHECK(r->at(0).numa == 0);
  CHECK(r->at(0).health);
  CHECK(r->at(0).devmem == 32768);
  CHECK(r->at(1).index == 1);
  CHECK(r->at(1).numa == 1);
  CHECK_FALSE(r->at(1).health);  // health omitted means false (CardNotHealth in Fit)
  CHECK(r->at(1).mode.empty());
}

TEST_CASE("register annotation: JSON encode round-trips and omits zero values", "[inventory]") {
  std::vector<DeviceInfo> devs(2);
  devs[0] = DeviceInfo{"GPU-x", 0, 10, 81920, 100, "NVIDIA A100", 0, "", true};
  devs[1] = DeviceInfo{"GPU-y", 3, 4, 1000, 200, "NVIDIA L4", 1, "mig", false};
  std::string text = encode_node_devices_json(devs);
  CHECK(text.find("\"index\"") == text.rfind("\"index\""));  // only the second device has one
  CHECK(text.find("\"health\":false") == std::string::npos);
  auto back = decode_node_devices("n", text);
  REQUIRE(back.ok());
  CHECK(back.value() == devs);
}

TEST_CASE("register annotation: legacy delimited form, 7 and 9 fields", "[inventory]") {
  auto r = decode_node_devices("n1", "GPU-a,10,16384,100,NVIDIA-Tesla T4,0,true:GPU-b,10,16384,100,NVIDIA-Tesla T4,1,false,1,mps:");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK(r->at(0).type == "NVIDIA-Tesla T4");
  CHECK(r->at(0).health);
  CHECK(r->at(1).numa == 1);
  CHECK(r->at(1).index == 1);
  CHECK(r->at(1).mode == "mps");
  CHECK_FALSE(r->at(1).health);
  auto back = decode_node_devices("n1", encode_node_devices_legacy(r.value()));
  REQUIRE(back.ok());
  CHECK(back.value() == r.value());
}

TEST_CASE("register annotation: errors name node, field and value", "[inventory]") {
  struct Case {
    const char* text;
    const char* want;
  };
  for (Case c : {Case{R"([{"id":"GPU-a","devmem":"abc"}])", "devices[0].devmem: \"abc\" is not an integer"},
                 Case{R"([{"id":"GPU-a","health":"yes"}])", "devices[0].health"},
                 Case{R"({"id":"x"})", "must be a JSON array"},
                 Case{R"([{"id":"GPU-a"},{"id":"GPU-a"}])", "devices[1].id: \"GPU-a\" is listed twice"},
                 Case{R"([{"count":1}])", "devices[0].id: \"\" must not be empty"},
                 Case{R"([{"id":"GPU-a","count":-1}])", "devices[0].count"},
                 Case{"[{", "invalid JSON"},
                 Case{"GPU-a,10,x,100,NVIDIA,0,true:", "devices[0].devmem: \"x\" is not an integer"},
                 Case{"GPU-a,10,100,NVIDIA:", "has 4 fields, want 7 or 9"},
                 Case{"GPU-a,10,1,100,NVIDIA,0,maybe:", "devices[0].health: \"maybe\""}}) {
    auto r = decode_node_devices("gpu-node-7", c.text);
    INFO(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Contains("node \"gpu-node-7\": hami.io/node-nvidia-register: "));
    CHECK_THAT(r.message(), Contains(c.want));
  }
}

TEST_CASE("device-cordon lists and nvidia type detection", "[inventory]") {
  CHECK(decode_cordon(" GPU-a, GPU-b ,,") == std::vector<std::string>{"GPU-a", "GPU-b"});
  CHECK(decode_cordon("").empty());
  CHECK(is_nvidia_type("NVIDIA A100-SXM4-80GB"));
  CHECK(is_nvidia_type("Tesla nvidia"));
  CHECK(is_nvidia_type("nViDiA"));
  CHECK_FALSE(is_nvidia_type("AMD MI300"));
  CHECK_FALSE(is_nvidia_type("NVIDI"));
}

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

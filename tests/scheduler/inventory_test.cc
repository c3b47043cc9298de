// The node registration and device-cordon annotations (scheduler/inventory.h, hami-protocol.md §3).
#include "scheduler/inventory.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;

TEST_CASE("register annotation: HAMi JSON with omitempty fields", "[inventory]") {
  auto r = decode_node_devices(
      "n1",
      R"([{"id":"GPU-a","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA GeForce RTX 3070","mode":"hami-core","health":true},
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
  auto r = decode_node_devices(
      "n1", "GPU-a,10,16384,100,NVIDIA-Tesla T4,0,true:GPU-b,10,16384,100,NVIDIA-Tesla T4,1,false,1,mps:");
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
  for (Case c :
       {Case{R"([{"id":"GPU-a","devmem":"abc"}])", "devices[0].devmem: \"abc\" is not an integer"},
        Case{R"([{"id":"GPU-a","health":"yes"}])", "devices[0].health"}, Case{R"({"id":"x"})", "must be a JSON array"},
        Case{R"([{"id":"GPU-a"},{"id":"GPU-a"}])", "devices[1].id: \"GPU-a\" is listed twice"},
        Case{R"([{"count":1}])", "devices[0].id: \"\" must not be empty"},
        Case{R"([{"id":"GPU-a","count":-1}])", "devices[0].count"}, Case{"[{", "invalid JSON"},
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

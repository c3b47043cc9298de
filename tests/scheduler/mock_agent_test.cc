// The lab's device agent (scheduler/mock_agent.h) against HAMi v2.10's plugin as we read it: kubelet's
// Allocate calls, the plugin's decoder (empty entries dropped), the erase of one entry per call, the
// environment a container gets, and GetPendingPod's fallback.
#include "scheduler/mock_agent.h"

#include "kube/objects.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <string>

using namespace gpuslice;
using namespace gpuslice::scheduler;
namespace json = boost::json;

TEST_CASE("device plugin emulation: kubelet's calls, v2.10 decode, erase and environment", "[mock_agent]") {
  // kubelet: init containers first (sidecars too), only containers with an nvidia.com/gpu limit, that many devices.
  json::object pod{
      {"metadata", json::object{{"name", "p"}, {"namespace", "default"}}},
      {"spec",
       json::object{
           {"initContainers",
            json::array{json::object{{"name", "i0"},
                                     {"resources", json::object{{"limits", json::object{{"nvidia.com/gpu", "1"}}}}}},
                        json::object{{"name", "plain"}}}},
           {"containers",
            json::array{
                json::object{{"name", "c0"},
                             {"resources", json::object{{"limits", json::object{{"nvidia.com/gpumem", "100"}}}}}},
                json::object{{"name", "c1"},
                             {"resources", json::object{{"limits", json::object{{"nvidia.com/gpu", 2}}}}}}}}}}};
  auto calls = kubelet_allocate_calls(pod, "nvidia.com/gpu");
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].container == "i0");
  CHECK(calls[0].init);
  CHECK(calls[0].devices == 1);
  CHECK(calls[1].container == "c1");
  CHECK(calls[1].devices == 2);

  // v2.10 drops empty entries when decoding, so the erase result loses the slot structure.
  auto entries = plugin_decode_entries("GPU-a,NVIDIA,2000,20:;;;GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,x,30:;");
  REQUIRE(entries.size() == 2);
  CHECK(entries[1][1].mem_mib == 0);                            // strconv error ignored
  CHECK(plugin_decode_entries("GPU-a,NVIDIA,2000:;").empty());  // fewer than 4 fields: nothing at all

  pod["metadata"].as_object()["annotations"] = json::object{
      {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,2000,20:;;GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,3000,30:;"}};
  auto first = emulate_allocate(pod, 1, "id");
  REQUIRE(first.ok);
  CHECK(first.envs.at("NVIDIA_VISIBLE_DEVICES") == "GPU-a");
  CHECK(first.envs.at("CUDA_DEVICE_MEMORY_LIMIT_0") == "2000m");
  CHECK(first.envs.at("CUDA_DEVICE_SM_LIMIT") == "20");
  CHECK(first.envs.at("CUDA_DEVICE_MEMORY_SHARED_CACHE") == "/usr/local/vgpu/vgpu/id.cache");
  CHECK(first.erased_to_allocate == ";GPU-b,NVIDIA,3000,30:GPU-c,NVIDIA,3000,30:;");
  CHECK(plugin_has_pending_entries(first.erased_to_allocate));
  pod["metadata"].as_object()["annotations"].as_object()["hami.io/vgpu-devices-to-allocate"] = first.erased_to_allocate;
  // A call for the wrong count fails exactly as the plugin does.
  auto wrong = emulate_allocate(pod, 1, "id");
  CHECK_FALSE(wrong.ok);
  CHECK(wrong.error == "device number not matched");
  auto second = emulate_allocate(pod, 2, "id");
  REQUIRE(second.ok);
  CHECK(second.envs.at("NVIDIA_VISIBLE_DEVICES") == "GPU-b,GPU-c");
  CHECK(second.envs.at("CUDA_DEVICE_MEMORY_LIMIT_1") == "3000m");
  // ";GPU-b...:;" decodes (empties dropped) to one entry; emptied and re-encoded it is ";".
  CHECK(second.erased_to_allocate == ";");
  CHECK_FALSE(plugin_has_pending_entries(second.erased_to_allocate));
  pod["metadata"].as_object()["annotations"].as_object()["hami.io/vgpu-devices-to-allocate"] =
      second.erased_to_allocate;
  CHECK(emulate_allocate(pod, 1, "id").error == "device request not found");
  pod["metadata"].as_object()["annotations"].as_object().erase("hami.io/vgpu-devices-to-allocate");
  CHECK(emulate_allocate(pod, 1, "id").error == "device request not found");

  // GetPendingPod's fallback: Pending, bind-time, allocating|success, vgpu-node on this node; first by ns/name.
  auto candidate = [](const std::string& name, const std::string& phase, const std::string& vnode) {
    return json::object{{"metadata", json::object{{"name", name},
                                                  {"namespace", "default"},
                                                  {"annotations", json::object{{"hami.io/bind-time", "1"},
                                                                               {"hami.io/bind-phase", phase},
                                                                               {"hami.io/vgpu-node", vnode}}}}},
                        {"spec", json::object{{"nodeName", "gpu-0"}}},
                        {"status", json::object{{"phase", "Pending"}}}};
  };
  auto b = candidate("b", "allocating", "gpu-0");
  auto a = candidate("a", "failed", "gpu-0");
  auto c = candidate("c", "success", "gpu-0");
  auto d = candidate("0", "allocating", "gpu-1");
  auto found = plugin_fallback_pending_pod({&b, &a, &c, &d}, "gpu-0");
  REQUIRE(found);
  CHECK(kube::name_of(*found) == "b");
  CHECK_FALSE(plugin_fallback_pending_pod({&a, &d}, "gpu-0"));
}

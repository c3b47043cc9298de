// The lab's device agent (scheduler/mock_agent.h) against HAMi v2.10's plugin as we read it: kubelet's
// Allocate calls, the plugin's decoder (empty entries dropped), the erase of one entry per call, the
// environment a container gets, and GetPendingPod's fallback; and kubelet's side of a rejection (the pods/status
// write retried through a restarting API server without holding the node's queue).
#include "scheduler/mock_agent.h"

#include "common/json_access.h"
#include "kube/objects.h"

#include "loop_fake_api.h"

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
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

namespace {

// A pod kubelet calls the plugin for (one container with an nvidia.com/gpu limit) that carries no device entry and
// no lock names: GetPendingPod finds nothing, Allocate fails, kubelet rejects the pod.
json::object orphan_pod(const std::string& name, const std::string& node) {
  return json::object{
      {"metadata", json::object{{"name", name}, {"namespace", "default"}}},
      {"spec", json::object{{"nodeName", node},
                            {"containers",
                             json::array{json::object{
                                 {"name", "c"},
                                 {"resources", json::object{{"limits", json::object{{"nvidia.com/gpu", "1"}}}}}}}}}},
      {"status", json::object{{"phase", "Pending"}}}};
}

struct AgentRig {
  boost::asio::io_context io;
  std::shared_ptr<testing::FakeApi> api = std::make_shared<testing::FakeApi>(io.get_executor());
  std::shared_ptr<MockDeviceAgent> agent;

  explicit AgentRig(MockAgentRetry retry) {
    agent = std::make_shared<MockDeviceAgent>(io.get_executor(), api, "nvidia.com/gpu", retry);
    api->subscribe_nodes([this](const kube::ReflectorEvent& e) { agent->on_node_event(e); });
    api->subscribe_pods([this](const kube::ReflectorEvent& e) { agent->on_pod_event(e); });
    api->put_node(json::object{{"metadata", json::object{{"name", "gpu-0"}}}});
  }
  std::string phase(const std::string& key) { return string_at_pointer(api->pods.at(key), "/status/phase"); }
  /// Every pod whose status writes fail with `error` (none when `error` is empty).
  void refuse_status(std::optional<kube::ApiError> error) {
    api->fault = [error](const std::string& call) -> std::optional<kube::ApiError> {
      return call.rfind("patch_pod_status ", 0) == 0 ? error : std::nullopt;
    };
  }
  /// Lets the node arrive, binds orphan pod `name` to it and runs until the agent has rejected `rejected` pods
  /// and has nothing in flight.
  bool reject(const std::string& name, uint64_t rejected = 1) {
    io.run_for(std::chrono::milliseconds(5));
    io.restart();
    api->put_pod(orphan_pod(name, "gpu-0"));
    return testing::run_until(io, [&] { return agent->stats().rejected == rejected && agent->in_flight() == 0; });
  }
  long status_writes(const std::string& key) {
    return std::count(api->calls.begin(), api->calls.end(), "patch_pod_status " + key);
  }
};

}  // namespace

TEST_CASE("device agent: a rejection reaches pods/status through a restarting API server, beside the node's queue",
          "[mock_agent]") {
  // A restarted kube-apiserver answers 403 until its RBAC cache has synced, then 503 for a moment: kubelet's status
  // manager keeps the write until it lands. The first pod's write fails until the second pod, queued behind it on
  // the same node, has been rejected too: it can only pass if the retries do not hold the node's admission queue.
  AgentRig rig(MockAgentRetry{std::chrono::milliseconds(1), std::chrono::milliseconds(4), std::chrono::seconds(10)});
  int refused = 0;
  rig.api->fault = [&](const std::string& call) -> std::optional<kube::ApiError> {
    if (call != "patch_pod_status default/a") {
      return std::nullopt;
    }
    const bool b_done = rig.api->pods.count("default/b") && rig.phase("default/b") == "Failed";
    if (++refused <= 3 || !b_done) {
      return kube::ApiError{403, "Forbidden", "pods \"a\" is forbidden: RBAC: clusterrole not found"};
    }
    if (refused == 4 || refused == 5) {
      return kube::ApiError{503, "ServiceUnavailable", "the server is currently unable to handle the request"};
    }
    return std::nullopt;
  };
  rig.io.run_for(std::chrono::milliseconds(5));
  rig.io.restart();
  rig.api->put_pod(orphan_pod("a", "gpu-0"));
  rig.api->put_pod(orphan_pod("b", "gpu-0"));
  REQUIRE(testing::run_until(rig.io, [&] { return rig.agent->stats().rejected == 2 && rig.agent->in_flight() == 0; }));
  CHECK(rig.phase("default/a") == "Failed");
  CHECK(string_at_pointer(rig.api->pods.at("default/a"), "/status/reason") == "UnexpectedAdmissionError");
  CHECK(rig.phase("default/b") == "Failed");
  CHECK(refused >= 6);
  CHECK(rig.status_writes("default/a") == refused);
  CHECK(rig.agent->stats().status_retries == static_cast<uint64_t>(refused - 1));
  CHECK(rig.agent->stats().status_abandoned == 0);
}

TEST_CASE("device agent: a rejection's pods/status retries are bounded; a pod gone needs no status", "[mock_agent]") {
  SECTION("an API server that never accepts the write: doubling delays capped, then given up") {
    // Delays 1, 2, 4, 4, 4, 4 ms add up to 19; one more would pass the 20 ms budget: 7 attempts in all.
    AgentRig rig(
        MockAgentRetry{std::chrono::milliseconds(1), std::chrono::milliseconds(4), std::chrono::milliseconds(20)});
    rig.refuse_status(kube::ApiError{500, "InternalError", "etcdserver: request timed out"});
    REQUIRE(rig.reject("a"));
    CHECK(rig.status_writes("default/a") == 7);
    CHECK(rig.agent->stats().status_retries == 6);
    CHECK(rig.agent->stats().status_abandoned == 1);
    CHECK(rig.phase("default/a") == "Pending");
  }
  SECTION("NotFound ends the retries at once") {
    AgentRig rig(MockAgentRetry{std::chrono::milliseconds(1), std::chrono::milliseconds(4), std::chrono::seconds(10)});
    rig.refuse_status(kube::ApiError{404, "NotFound", "pods \"a\" not found"});
    REQUIRE(rig.reject("a"));
    CHECK(rig.status_writes("default/a") == 1);
    CHECK(rig.agent->stats().status_retries == 0);
    CHECK(rig.agent->stats().status_abandoned == 0);
  }
}

namespace {

// A pod the plugin admits without a lock (GetPendingPod's fallback): one container, one device entry. Its Allocate
// makes five plugin requests: GET node, PATCH the erased entry, GET the pod, PATCH bind-phase, GET node (no lock
// to release).
json::object bound_pod(const std::string& name, const std::string& node) {
  json::object pod = orphan_pod(name, node);
  pod["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-devices-to-allocate", "GPU-" + node + ",NVIDIA,1000,10:;"},
                   {"hami.io/bind-time", "1"},
                   {"hami.io/bind-phase", "allocating"},
                   {"hami.io/vgpu-node", node}};
  return pod;
}

}  // namespace

TEST_CASE("device agent: each node's plugin requests wait for that node's own client limit (HAMi: 5 QPS, burst 10)",
          "[mock_agent]") {
  // The bucket's clock is frozen, so a token spent is never given back: a node gets its burst and no more. A burst
  // of 5 holds exactly one pod's five plugin requests: on gpu-0 the second pod's first request waits (for 1000 s at
  // this QPS), while gpu-1, with its own bucket, admits its pod. With one client for every node, or none, all pass.
  AgentRig rig(MockAgentRetry{});
  const auto frozen = std::chrono::steady_clock::now();
  MockAgentPluginRate rate;
  rate.qps = 0.001;
  rate.burst = 5;
  rate.now = [frozen] { return frozen; };
  rig.agent->set_plugin_rate(rate);
  rig.api->put_node(json::object{{"metadata", json::object{{"name", "gpu-1"}}}});
  rig.io.run_for(std::chrono::milliseconds(5));
  rig.io.restart();
  rig.api->put_pod(bound_pod("a", "gpu-0"));
  rig.api->put_pod(bound_pod("b", "gpu-0"));
  rig.api->put_pod(bound_pod("d", "gpu-1"));
  REQUIRE(testing::run_until(rig.io, [&] { return rig.agent->stats().admitted == 2; }));
  rig.io.run_for(std::chrono::milliseconds(50));
  CHECK(rig.agent->stats().admitted == 2);
  CHECK(rig.agent->stats().rejected == 0);
  CHECK(rig.agent->stats().plugin_requests == 11);  // 5 + 5 and the first of b's, which waits
  CHECK(rig.agent->stats().plugin_throttled == 1);
  CHECK(annotation(rig.api->pods.at("default/a"), "hami.io/bind-phase") == "success");
  CHECK(annotation(rig.api->pods.at("default/d"), "hami.io/bind-phase") == "success");
  CHECK(annotation(rig.api->pods.at("default/b"), "hami.io/bind-phase") == "allocating");
  CHECK(rig.agent->in_flight() == 1);  // b is held by its node's limit, not lost
}

TEST_CASE("device agent: kubelet's status sync writes a rejection again when another writer turns the pod back",
          "[mock_agent]") {
  // The lab's kwok applies a pod-ready stage it computed before the rejection landed: the pod is Running again with
  // no device. kubelet's status manager compares its status with the API's every 10 s and writes Failed again;
  // the agent does the same every `status_sync`. Every write carries the pod's UID, so a pod recreated under the
  // same name is never marked Failed by the rejection of the one before.
  MockAgentRetry retry{std::chrono::milliseconds(1), std::chrono::milliseconds(4), std::chrono::seconds(10)};
  retry.status_sync = std::chrono::milliseconds(5);
  AgentRig rig(retry);
  REQUIRE(rig.reject("a"));
  REQUIRE(rig.phase("default/a") == "Failed");
  const std::string uid = kube::uid_of(rig.api->pods.at("default/a"));

  SECTION("turned back to Running: Failed again at the next sync, and again after a second time") {
    for (int round = 1; round <= 2; ++round) {
      json::object back = rig.api->pods.at("default/a");
      back["status"] = json::object{{"phase", "Running"}};
      rig.api->put_pod(back);
      REQUIRE(testing::run_until(rig.io, [&] { return rig.phase("default/a") == "Failed"; }));
      CHECK(rig.agent->stats().status_resyncs == static_cast<uint64_t>(round));
    }
    CHECK(rig.status_writes("default/a") == 3);
    CHECK(string_at_pointer(rig.api->pods.at("default/a"), "/status/reason") == "UnexpectedAdmissionError");
    CHECK(rig.agent->stats().rejected == 1);  // kubelet admits a pod once: no second Allocate
  }
  SECTION("a pod recreated under the same name, seen by the agent: the old rejection is forgotten") {
    rig.api->delete_pod("default/a");
    json::object fresh = orphan_pod("a", "gpu-0");
    fresh["metadata"].as_object()["uid"] = "uid-second";
    fresh["spec"].as_object()["containers"] = json::array{json::object{{"name", "c"}}};  // kubelet makes no call
    fresh["status"] = json::object{{"phase", "Running"}};
    rig.api->put_pod(fresh);
    rig.io.run_for(std::chrono::milliseconds(50));
    rig.io.restart();
    CHECK(rig.phase("default/a") == "Running");
    CHECK(rig.agent->stats().status_resyncs == 0);
  }
  SECTION("replaced behind the agent's back (its cache still has the old UID): the UID refuses the write") {
    // The API holds a new pod under the name; the agent's cache still shows the old one turned Running.
    json::object back = rig.api->pods.at("default/a");
    back["status"] = json::object{{"phase", "Running"}};
    rig.api->put_pod(back);
    rig.api->pods.at("default/a")["metadata"].as_object()["uid"] = "uid-second";
    REQUIRE(testing::run_until(rig.io,
                               [&] { return rig.agent->stats().status_resyncs == 1 && rig.agent->in_flight() == 0; }));
    rig.io.run_for(std::chrono::milliseconds(50));
    rig.io.restart();
    CHECK(rig.phase("default/a") == "Running");
    CHECK(rig.agent->stats().status_resyncs == 1);  // written once, refused (422), then forgotten
    CHECK(rig.agent->stats().status_abandoned == 0);
  }
  (void)uid;
}

// The simulate library (without the CLI): manifests through the webhook policy and the scheduling core.
#include "simulate/simulate.h"
#include "simulate/manifest.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice::simulate;
using Catch::Matchers::Contains;
namespace json = boost::json;

TEST_CASE("simulate(): bad node annotation reported with file, document and field", "[manifest][simulate]") {
  auto nodes = parse_manifests(R"(
kind: Namespace
metadata: {name: x}
---
kind: Node
metadata:
  name: broken
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-a","devcore":"many"}]'
status: {allocatable: {nvidia.com/gpu: "10"}}
)",
                               "nodes.yaml");
  REQUIRE(nodes.ok());
  SimulationInput in;
  in.node_files.emplace_back("nodes.yaml", std::move(nodes.value()));
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.message(), Contains("nodes.yaml: document 1: node \"broken\""));
  CHECK_THAT(r.message(), Contains("devcore: \"many\""));
}

TEST_CASE("simulate(): webhook rejection, bound pods as cluster state, quota", "[manifest][simulate]") {
  auto nodes = parse_manifests(R"(
kind: Node
metadata:
  name: n
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-a","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Pod
metadata:
  name: existing
  namespace: team
  annotations: {hami.io/vgpu-node: n, hami.io/vgpu-devices-allocated: "GPU-a,NVIDIA,10000,10:;"}
spec: {nodeName: n, containers: [{name: c}]}
---
kind: ResourceQuota
metadata: {name: q, namespace: team}
spec: {hard: {limits.nvidia.com/gpumem: "25000"}}
)",
                               "cluster.yaml");
  auto pods = parse_manifests(R"(
kind: Pod
metadata: {name: priv, namespace: team}
spec:
  containers:
    - name: c
      securityContext: {privileged: true}
      resources: {limits: {nvidia.com/gpu: 1}}
---
kind: Pod
metadata: {name: fits, namespace: team}
spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 15000}}}]}
---
kind: Pod
metadata: {name: over, namespace: team}
spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]}
)",
                              "pods.yaml");
  REQUIRE(nodes.ok());
  REQUIRE(pods.ok());
  SimulationInput in;
  in.node_files.emplace_back("cluster.yaml", nodes.value());
  in.pod_files.emplace_back("pods.yaml", pods.value());
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE(r.ok());
  REQUIRE(r->pods.size() == 3);
  CHECK(r->pods[0].status == "Rejected");
  CHECK_THAT(r->pods[0].message, Contains("privileged"));
  CHECK(r->pods[1].status == "Scheduled");
  CHECK(r->pods[1].devices.at(0).type == "NVIDIA L40");
  CHECK(r->pods[2].status == "Pending");
  CHECK(r->pods[2].message == "0/1 nodes are available: 1 ResourceQuotaNotFit.");
  REQUIRE(r->cards.size() == 1);
  CHECK(r->cards[0].mem_used_mib == 25000);
  CHECK(r->cards[0].pods == std::vector<std::string>{"team/existing", "team/fits"});
  json::object out = simulation_to_json(r.value());
  CHECK(out.at("pods").as_array().at(0).at("node").is_null());
  CHECK(out.at("cards").as_array().at(0).at("memTotalMiB") == json::value(40000));
  std::string table = simulation_to_table(r.value());
  CHECK_THAT(table, Contains("team/fits"));
  CHECK_THAT(table, Contains("25000/40000"));
}

// YAML -> JSON conversion of manifests and the simulate library (without the CLI).
#include "scheduler/manifest.h"
#include "scheduler/simulate.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using Catch::Matchers::Contains;
namespace json = boost::json;

TEST_CASE("YAML scalars: quoted stay strings, plain ints stay ints", "[manifest]") {
  auto v = yaml_to_json(R"(
a: 3
b: "3"
c: '10'
d: true
e: "true"
f: 1.5
g: ~
h: 20000Mi
i: -7
j: 0x1F
k: [1, "x", null]
l: 99999999999999999999999
m: !!str 42
)");
  REQUIRE(v.ok());
  const json::object& o = v->as_object();
  CHECK(o.at("a") == json::value(3));
  CHECK(o.at("b") == json::value("3"));
  CHECK(o.at("c") == json::value("10"));
  CHECK(o.at("d") == json::value(true));
  CHECK(o.at("e") == json::value("true"));
  CHECK(o.at("f") == json::value(1.5));
  CHECK(o.at("g").is_null());
  CHECK(o.at("h") == json::value("20000Mi"));
  CHECK(o.at("i") == json::value(-7));
  CHECK(o.at("j") == json::value(31));
  CHECK(o.at("k") == json::parse(R"([1,"x",null])"));
  CHECK(o.at("l") == json::value("99999999999999999999999"));
  CHECK(o.at("m") == json::value("42"));
}

TEST_CASE("YAML errors carry line and column and JSON input is accepted", "[manifest]") {
  auto bad = yaml_to_json("a: [1, 2\nb: 3\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("line "));
  auto j = yaml_to_json(R"({"kind":"Pod","spec":{"n":1}})");
  REQUIRE(j.ok());
  CHECK(j->at_pointer("/spec/n") == json::value(1));
}

TEST_CASE("manifests: multi-document, Lists expanded, document index in errors", "[manifest]") {
  auto m = parse_manifests(R"(
kind: Node
metadata: {name: a}
---
---
apiVersion: v1
kind: List
items:
  - {kind: Pod, metadata: {name: p1}}
  - {kind: Pod, metadata: {name: p2}}
---
kind: ResourceQuota
metadata: {name: q}
)", "f.yaml");
  REQUIRE(m.ok());
  REQUIRE(m->size() == 4);
  CHECK(m->at(0).object.at("kind") == json::value("Node"));
  CHECK(m->at(1).document == 2);
  CHECK(m->at(2).object.at("metadata").at("name") == json::value("p2"));
  CHECK(m->at(3).document == 3);

  auto no_kind = parse_manifests("kind: Node\n---\nmetadata: {name: x}\n", "nodes.yaml");
  REQUIRE_FALSE(no_kind.ok());
  CHECK(no_kind.message() == "nodes.yaml: document 1: kind: missing");
  auto scalar = parse_manifests("just text\n", "x.yaml");
  REQUIRE_FALSE(scalar.ok());
  CHECK_THAT(scalar.message(), Contains("x.yaml: document 0: must be a mapping"));
  auto item = parse_manifests("kind: List\nitems: [{metadata: {}}]\n", "l.yaml");
  REQUIRE_FALSE(item.ok());
  CHECK_THAT(item.message(), Contains("l.yaml: document 0: items[0].kind: missing"));
  auto syntax = parse_manifests("kind: [\n", "s.yaml");
  REQUIRE_FALSE(syntax.ok());
  CHECK_THAT(syntax.message(), Contains("s.yaml: invalid YAML at line"));
}

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
)", "nodes.yaml");
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
)", "cluster.yaml");
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
)", "pods.yaml");
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

TEST_CASE("long plain scalars convert without deep recursion", "[manifest]") {
  std::string digits(200000, '7');
  auto v = yaml_to_json("a: " + digits + "\nb: " + std::string(200000, 'x') + "\nc: 1." + std::string(1000, '5') + "\n");
  REQUIRE(v.ok());
  CHECK(v->at("a").as_string().size() == digits.size());  // too large for an integer: kept as text
  CHECK(v->at("b").as_string().size() == 200000);
  CHECK(v->at("c").is_double());
  auto nested = yaml_to_json(std::string(300, '[') + std::string(300, ']'));
  REQUIRE_FALSE(nested.ok());
  CHECK_THAT(nested.message(), Contains("nesting deeper than"));
}

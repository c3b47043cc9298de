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

TEST_CASE("simulate(): Namespace, PVC, PV, StorageClass and CSINode manifests feed the default plugins",
          "[manifest][simulate]") {
  auto cluster = parse_manifests(R"(
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: a}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-1","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Node
metadata:
  name: n2
  labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: b}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-2","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Namespace
metadata: {name: gold, labels: {tier: gold}}
---
kind: Pod
metadata: {name: db, namespace: gold, labels: {app: db}}
spec: {nodeName: n1, containers: [{name: c}]}
---
kind: PersistentVolume
metadata: {name: pv-b}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  claimRef: {namespace: default, name: data}
  local: {path: /data}
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]}]}}
---
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}, volumeName: pv-b}
---
kind: StorageClass
metadata: {name: fast}
provisioner: example.com/csi
volumeBindingMode: Immediate
---
kind: PersistentVolumeClaim
metadata: {name: pending-claim, namespace: default}
spec: {storageClassName: fast, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
kind: CSINode
metadata: {name: n1}
spec: {drivers: [{name: example.com/csi, nodeID: n1, allocatable: {count: 0}}]}
)",
                                 "cluster.yaml");
  auto pods = parse_manifests(R"(
kind: Pod
metadata: {name: with-data}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
---
kind: Pod
metadata: {name: no-claim}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: nope}}]
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
---
kind: Pod
metadata: {name: unbound}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: pending-claim}}]
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
---
kind: Pod
metadata: {name: away-from-gold-db}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: db}}
        namespaceSelector: {matchLabels: {tier: gold}}
        topologyKey: topology.kubernetes.io/zone
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
)",
                              "pods.yaml");
  REQUIRE(cluster.ok());
  REQUIRE(pods.ok());
  SimulationInput in;
  in.node_files.emplace_back("cluster.yaml", cluster.value());
  in.pod_files.emplace_back("pods.yaml", pods.value());
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE(r.ok());
  REQUIRE(r->pods.size() == 4);
  CHECK(r->pods[0].status == "Scheduled");
  CHECK(r->pods[0].node == std::optional<std::string>("n2"));  // the PV's node affinity
  CHECK(r->pods[1].status == "Pending");
  CHECK(r->pods[1].message == "0/2 nodes are available: persistentvolumeclaim \"nope\" not found.");
  CHECK(r->pods[2].status == "Pending");
  CHECK(r->pods[2].message == "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.");
  CHECK(r->pods[3].status == "Scheduled");
  CHECK(r->pods[3].node == std::optional<std::string>("n2"));  // namespaceSelector matched the gold namespace

  // A malformed object is an error naming the file and document.
  auto bad = parse_manifests("kind: PersistentVolume\nmetadata: {name: pv-x}\nspec: {capacity: {storage: lots}}\n",
                             "bad.yaml");
  REQUIRE(bad.ok());
  SimulationInput in2;
  in2.node_files.emplace_back("bad.yaml", bad.value());
  auto r2 = simulate(in2, gpuslice::Configuration{}, 0);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.message(), Contains("bad.yaml: document 0: "));
  CHECK_THAT(r2.message(), Contains("lots"));
}

TEST_CASE("simulate(): a Pending pod shows what it would preempt (PriorityClass, PodDisruptionBudget)",
          "[manifest][simulate][preemption]") {
  auto cluster = parse_manifests(R"(
kind: PriorityClass
metadata: {name: batch}
value: 10
---
kind: PriorityClass
metadata: {name: inference}
value: 1000
---
kind: Node
metadata:
  name: a
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-a","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Node
metadata:
  name: b
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-b","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: PodDisruptionBudget
metadata: {name: keep, namespace: ml}
spec: {selector: {matchLabels: {app: keep}}}
status: {disruptionsAllowed: 0}
)",
                                 "cluster.yaml");
  REQUIRE(cluster.ok());
  std::string bound;
  for (const char* node : {"a", "b"}) {
    for (int i = 0; i < 4; ++i) {
      const std::string n = std::string(node) + std::to_string(i);
      bound += std::string("---\nkind: Pod\nmetadata: {name: ") + n +
               ", namespace: ml, labels: {app: " + (std::string(node) == "a" ? "keep" : "free") +
               "}, annotations: {hami.io/vgpu-node: " + node + ", hami.io/vgpu-devices-allocated: \"GPU-" + node +
               ",NVIDIA,20000,0:;\"}}\nspec: {nodeName: " + node +
               ", priorityClassName: batch, containers: [{name: c}]}\n";
    }
  }
  auto running = parse_manifests(bound, "running.yaml");
  REQUIRE(running.ok());
  auto pods = parse_manifests(R"(
kind: Pod
metadata: {name: big, namespace: ml}
spec:
  priorityClassName: inference
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 40000}}}]
---
kind: Pod
metadata: {name: same, namespace: ml}
spec:
  priorityClassName: batch
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 40000}}}]
)",
                              "pods.yaml");
  REQUIRE(pods.ok());
  SimulationInput in;
  in.node_files.emplace_back("cluster.yaml", cluster.value());
  in.node_files.emplace_back("running.yaml", running.value());
  in.pod_files.emplace_back("pods.yaml", pods.value());
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE(r.ok());
  REQUIRE(r->pods.size() == 2);
  CHECK(r->pods[0].status == "Pending");
  REQUIRE(r->pods[0].preemption.has_value());
  CHECK(r->pods[0].preemption->node == "b");  // node a's pods are protected by the budget
  CHECK(r->pods[0].preemption->victims == std::vector<std::string>{"ml/b2", "ml/b3"});
  CHECK(r->pods[0].preemption->devices.at(0).uuid == "GPU-b");
  CHECK_THAT(r->pods[0].message, Contains("preemption: would be preempting 2 pods on node b (ml/b2, ml/b3)."));
  // Equal priority: nothing to preempt, the filters' message alone.
  CHECK_FALSE(r->pods[1].preemption.has_value());
  json::object out = simulation_to_json(r.value());
  CHECK(out.at("pods").as_array().at(0).at("preemption").at("victims").as_array().size() == 2);
  CHECK_FALSE(out.at("pods").as_array().at(1).as_object().contains("preemption"));
  // Switched off: no preemption shown.
  gpuslice::Configuration off;
  off.scheduler.preemption.enabled = false;
  auto r2 = simulate(in, off, 0);
  REQUIRE(r2.ok());
  CHECK_FALSE(r2->pods[0].preemption.has_value());
  // A pod naming a PriorityClass that is not among the manifests: an error naming it.
  auto unknown = parse_manifests(R"(
kind: Pod
metadata: {name: x}
spec: {priorityClassName: gold, containers: [{name: c}]}
)",
                                 "x.yaml");
  REQUIRE(unknown.ok());
  SimulationInput bad;
  bad.pod_files.emplace_back("x.yaml", unknown.value());
  auto r3 = simulate(bad, gpuslice::Configuration{}, 0);
  REQUIRE_FALSE(r3.ok());
  CHECK_THAT(r3.message(), Contains("x.yaml: document 0: spec.priorityClassName: \"gold\""));
}

TEST_CASE("simulate(): Service and ReplicaSet manifests give a pod kube-scheduler's default spreading",
          "[manifest][simulate]") {
  // n1 runs a replica of app=web (0.1 cpu), n2 a larger pod of another app (2 cpu); both cards are free, so the
  // GPU node policy ties. The resource scores alone prefer n1; default spreading, fed by the Service's and the
  // ReplicaSet's selectors, prefers n2, which runs no replica.
  auto cluster = parse_manifests(R"(
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: a}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-1","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Node
metadata:
  name: n2
  labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: b}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-2","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web-7c4d, namespace: default}
spec:
  selector: {matchLabels: {app: web, pod-template-hash: 7c4d}}
  template: {metadata: {labels: {app: web, pod-template-hash: 7c4d}}, spec: {containers: [{name: c}]}}
---
kind: Pod
metadata: {name: web-old, namespace: default, labels: {app: web, pod-template-hash: 7c4d}}
spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: 100m, memory: 64Mi}}}]}
---
kind: Pod
metadata: {name: batch, namespace: default, labels: {app: batch}}
spec: {nodeName: n2, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}
)",
                                 "cluster.yaml");
  auto pods = parse_manifests(R"(
kind: Pod
metadata:
  name: web-new
  namespace: default
  labels: {app: web, pod-template-hash: 7c4d}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-7c4d, uid: u-1, controller: true}]
spec:
  containers:
  - name: c
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4000}
)",
                              "pods.yaml");
  REQUIRE(cluster.ok());
  REQUIRE(pods.ok());
  SimulationInput in;
  in.node_files.emplace_back("cluster.yaml", cluster.value());
  in.pod_files.emplace_back("pods.yaml", pods.value());
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE(r.ok());
  REQUIRE(r->pods.size() == 1);
  CHECK(r->pods[0].status == "Scheduled");
  CHECK(r->pods[0].node == std::optional<std::string>("n2"));

  gpuslice::Configuration off;
  off.scheduler.default_spreading = false;
  auto r2 = simulate(in, off, 0);
  REQUIRE(r2.ok());
  CHECK(r2->pods[0].node == std::optional<std::string>("n1"));

  // A Service whose selector is not a map of strings is an error naming the file, document, field and value.
  auto bad = parse_manifests("kind: Service\nmetadata: {name: s, namespace: default}\nspec: {selector: {app: [web]}}\n",
                             "bad.yaml");
  REQUIRE(bad.ok());
  SimulationInput in3;
  in3.node_files.emplace_back("bad.yaml", bad.value());
  auto r3 = simulate(in3, gpuslice::Configuration{}, 0);
  REQUIRE_FALSE(r3.ok());
  CHECK_THAT(r3.message(), Contains("bad.yaml: document 0: "));
  CHECK_THAT(r3.message(), Contains("service default/s: spec.selector.app: [\"web\"] is not a string"));
}

TEST_CASE("simulate(): a WaitForFirstConsumer claim of a class without provisioner shows the PV it would bind",
          "[manifest][simulate]") {
  auto cluster = parse_manifests(R"(
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-1","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: Node
metadata:
  name: n2
  labels: {kubernetes.io/hostname: n2}
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-2","count":10,"devmem":40000,"devcore":100,"type":"NVIDIA L40","health":true}]'
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "10", nvidia.com/gpu: "10"}}
---
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
kind: PersistentVolume
metadata: {name: local-n2}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/disk}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]
status: {phase: Available}
---
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default, uid: u-data}
spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}
---
kind: PersistentVolumeClaim
metadata: {name: more, namespace: default, uid: u-more}
spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}
)",
                                 "cluster.yaml");
  auto pods = parse_manifests(R"(
kind: Pod
metadata: {name: first}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
---
kind: Pod
metadata: {name: second}
spec:
  volumes: [{name: d, persistentVolumeClaim: {claimName: more}}]
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
)",
                              "pods.yaml");
  REQUIRE(cluster.ok());
  REQUIRE(pods.ok());
  SimulationInput in;
  in.node_files.emplace_back("cluster.yaml", cluster.value());
  in.pod_files.emplace_back("pods.yaml", pods.value());
  auto r = simulate(in, gpuslice::Configuration{}, 0);
  REQUIRE(r.ok());
  REQUIRE(r->pods.size() == 2);
  CHECK(r->pods[0].status == "Scheduled");
  CHECK(r->pods[0].node == std::optional<std::string>("n2"));  // the only PV is there
  REQUIRE(r->pods[0].volumes.size() == 1);
  CHECK(r->pods[0].volumes[0].claim == "data");
  CHECK(r->pods[0].volumes[0].volume == "local-n2");
  // The second claim does not get the PV the first decision took (assumed, as in the live loop).
  CHECK(r->pods[1].status == "Pending");
  CHECK(r->pods[1].message == "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.");
  const json::object out = simulation_to_json(*r);
  CHECK(json::serialize(out.at("pods").as_array()[0].as_object().at("volumes")) ==
        R"([{"claim":"data","persistentVolume":"local-n2"}])");
  CHECK_FALSE(out.at("pods").as_array()[1].as_object().contains("volumes"));
  CHECK_THAT(simulation_to_table(*r), Contains("claim data: binds local-n2"));
}

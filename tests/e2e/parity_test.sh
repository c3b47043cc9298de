#!/usr/bin/env bash
# Issue 11: gpuslice honours the hard constraints of ordinary pod YAML as upstream kube-scheduler does, judged by
# the lab's own kube-scheduler. The same pods go to both: GPU pods to gpuslice in tenant-a, their CPU-only twins
# (same labels and constraints, GPU resources replaced by a small CPU request) to kube-scheduler (profile
# default-scheduler, started by this test) in tenant-b, on identical copies of the same test nodes. Every pod
# must end the same way in both (bound to the same node, or Pending with the same reasons in the
# "0/N nodes are available: ..." summary):
#   1. required podAntiAffinity on kubernetes.io/hostname: the second replica stays Pending (the reported bug);
#   2. two pods with hostPort 8080/TCP: the second stays Pending (the reported bug); UDP 8080 fits;
#   3. a second node appears: both Pending pods are bound there; then an existing pod's preferred anti-affinity
#      alone (the incoming pod has no terms) keeps the next app=shy pod off its node in both, although gpuslice's
#      binpack ranks that node first;
#   4. volumes: a pod whose PVC does not exist stays Pending ('persistentvolumeclaim "..." not found'); a pod
#      whose PVC is bound to a local PV with node affinity goes to that PV's node (the PVC/PV watches);
#   5. a WaitForFirstConsumer claim: selected-node written on the allowed node, pod bound once the claim binds.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-parity
NODES=(parity-0 parity-1)

started_sched=0
parity_extra() {  # parity_extra kca|kcb: the volumes and storage class of this test
  $1 delete pv parity-local "parity-wffc-$1" --wait=false >/dev/null 2>&1
  $1 delete storageclass parity-wffc --wait=false >/dev/null 2>&1
}
cleanup() { twin_cleanup "$NS" "$started_sched" parity_extra "${NODES[@]}"; }
trap cleanup EXIT

# test_node NAME: a kwok GPU node (one A100-80GB, lab/nodes.sh), labelled for this test only.
# shellcheck source=lab/nodes.sh
source "$(dirname "$0")/../../lab/nodes.sh"
test_node() {
  kwok_node "$1" "$(a100_register "GPU-$1" 1)" 10 32 256Gi 'gpuslice.io/parity: "yes"'
}

# test_pod KIND NAME LABEL EXTRA_SPEC PORTS_YAML: KIND gpu (1 GPU, 4000 MiB, 10 %) or cpu (the twin: 100m CPU).
# Every pod selects the test nodes (gpuslice.io/parity=yes), so the lab's other node is refused by NodeAffinity
# in both clusters alike.
test_pod() {
  local kind=$1 name=$2 label=$3 extra=$4 ports=${5:-}
  local res
  if [[ $kind == gpu ]]; then
    res='{limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "4000", nvidia.com/gpucores: "10"}}'
  else
    res='{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}'
  fi
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app: $label}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {gpuslice.io/parity: "yes"}
$extra
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources: $res
$ports
EOF
}

ANTI='  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: anti}}
        topologyKey: kubernetes.io/hostname'
port_yaml() { printf '    ports: [{containerPort: 80, hostPort: %s, protocol: %s}]\n' "$1" "$2"; }
CLAIM_VOL() { printf '  volumes: [{name: data, persistentVolumeClaim: {claimName: %s}}]\n' "$1"; }

# outcome K NAME: "node=X" when bound, "pending: <reasons>" when PodScheduled=False (kube-scheduler's
# PostFilter tail dropped), "" while undecided.
outcome() {
  local k=$1 name=$2 node msg
  node=$($k -n "$NS" get pod "$name" -o jsonpath='{.spec.nodeName}' 2>/dev/null)
  if [[ -n $node ]]; then echo "node=$node"; return; fi
  msg=$($k -n "$NS" get pod "$name" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null)
  # kube-scheduler appends its PostFilter's result after the summary ("... rules. preemption: ...", or in 1.34
  # "... rules. no new claims to deallocate,"): compare the summary up to its first ". ".
  [[ -n $msg ]] && echo "pending: ${msg%%. *}$([[ $msg == *". "* ]] && echo .)"
}
decided() { [[ -n $(outcome "$1" "$2") ]]; }
bound_in() { [[ $(outcome "$1" "$2") == node=* ]]; }

# same NAME EXPECT_REGEX [bound]: waits for both decisions (bound when the 3rd argument is "bound") and
# asserts they are equal and match EXPECT_REGEX.
same() {
  local name=$1 want=$2 mode=${3:-} a b
  if [[ $mode == bound ]]; then
    wait_for 40 bound_in kca "$name"; wait_for 40 bound_in kcb "$name"
  else
    wait_for 40 decided kca "$name"; wait_for 40 decided kcb "$name"
  fi
  a=$(outcome kca "$name") b=$(outcome kcb "$name")
  if [[ -n $a && $a == "$b" && $a =~ $want ]]; then
    pass "parity: $name" "gpuslice: $a | kube-scheduler: $b"
  else
    fail "parity: $name" "gpuslice: \"$a\" | kube-scheduler: \"$b\" (expected both to match /$want/)"
  fi
}

section "same pods, gpuslice (tenant-a, GPU) and upstream kube-scheduler (tenant-b, CPU twins)"
if ! "$LAB" start b kube-scheduler >/dev/null 2>&1; then
  fail "parity: upstream kube-scheduler started in tenant-b" "lab/lab.sh start b kube-scheduler failed"; exit 1
fi
started_sched=1
for k in kca kcb; do
  $k delete namespace "$NS" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  $k create namespace "$NS" >/dev/null || { fail "parity: namespace $NS" "$k create namespace failed"; exit 1; }
  test_node parity-0 | $k create -f - >/dev/null || { fail "parity: node parity-0" "$k create node failed"; exit 1; }
done
node_ready() { [[ $($1 get node "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
if wait_for 30 node_ready kca parity-0 && wait_for 30 node_ready kcb parity-0; then
  pass "parity: node parity-0 Ready in both tenants (kwok)"
else
  fail "parity: node parity-0 Ready in both tenants (kwok)"
fi
# Both schedulers must see the node before the first pod (gpuslice: registered cards; kube-scheduler: informer).
sleep 2

apply_both() {  # apply_both NAME LABEL EXTRA PORTS
  test_pod gpu "$1" "$2" "$3" "${4:-}" | kca -n "$NS" apply -f - >/dev/null || fail "parity: create $1 (gpuslice)"
  test_pod cpu "$1" "$2" "$3" "${4:-}" | kcb -n "$NS" apply -f - >/dev/null || fail "parity: create $1 (kube-scheduler)"
}
sched_of() { kca -n "$NS" get pod "$1" -o jsonpath='{.spec.schedulerName}'; }

# 1. anti-affinity on hostname: two replicas, one node.
apply_both anti-1 anti "$ANTI"
same anti-1 '^node=parity-0$' bound
[[ $(sched_of anti-1) == "$SCHEDULER_NAME" ]] && pass "parity: GPU pods are gpuslice's" "schedulerName=$(sched_of anti-1)" ||
  fail "parity: GPU pods are gpuslice's" "schedulerName=$(sched_of anti-1)"
apply_both anti-2 anti "$ANTI"
same anti-2 "^pending: 0/2 nodes are available: 1 node\\(s\\) didn't match Pod's node affinity/selector, 1 node\\(s\\) didn't match pod anti-affinity rules\\.$"

# 2. host ports: 8080/TCP twice on one node; 8080/UDP beside them.
apply_both port-1 web "" "$(port_yaml 8080 TCP)"
same port-1 '^node=parity-0$' bound
apply_both port-2 web "" "$(port_yaml 8080 TCP)"
same port-2 "^pending: 0/2 nodes are available: 1 node\\(s\\) didn't have free ports for the requested pod ports, 1 node\\(s\\) didn't match Pod's node affinity/selector\\.$"
apply_both port-udp web "" "$(port_yaml 8080 UDP)"
same port-udp '^node=parity-0$' bound

# 3. a second node: both Pending pods go there in both clusters.
for k in kca kcb; do test_node parity-1 | $k create -f - >/dev/null; done
same anti-2 '^node=parity-1$' bound
same port-2 '^node=parity-1$' bound

# 3b. shy-1 (pinned to parity-0) prefers no other app=shy pod on its host; shy-2 has no terms of its own.
# kube-scheduler's InterPodAffinity PreScore counts shy-1's term for shy-2, and so does gpuslice's: parity-1 in
# both, although binpack alone would take parity-0 (four GPU pods there, two on parity-1).
SHY1='  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [parity-0]}]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          labelSelector: {matchLabels: {app: shy}}
          topologyKey: kubernetes.io/hostname'
apply_both shy-1 shy "$SHY1"
same shy-1 '^node=parity-0$' bound
apply_both shy-2 shy ""
same shy-2 '^node=parity-1$' bound

# 4. volumes: a missing claim, and a claim bound to a local PV on parity-1.
apply_both vol-missing data "$(CLAIM_VOL nope)"
same vol-missing '^pending: 0/3 nodes are available: persistentvolumeclaim "nope" not found\.$'
for k in kca kcb; do
  $k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: parity-local}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $NS, name: local-data}
  local: {path: /mnt/parity}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [parity-1]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: local-data, namespace: $NS}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: parity-local
  resources: {requests: {storage: 1Gi}}
EOF
done
pvc_bound() { [[ $($1 -n "$NS" get pvc local-data -o jsonpath='{.status.phase}') == Bound ]]; }
if wait_for 30 pvc_bound kca && wait_for 30 pvc_bound kcb; then
  pass "parity: PVC local-data Bound to PV parity-local in both tenants (kube-controller-manager)"
else
  fail "parity: PVC local-data Bound to PV parity-local in both tenants (kube-controller-manager)" \
    "a: $(kca -n "$NS" get pvc local-data -o jsonpath='{.status.phase}') b: $(kcb -n "$NS" get pvc local-data -o jsonpath='{.status.phase}')"
fi
apply_both vol-local data "$(CLAIM_VOL local-data)"
same vol-local '^node=parity-1$' bound

# 5. WaitForFirstConsumer: both schedulers write volume.kubernetes.io/selected-node (the class allows parity-0
#    only) and bind the pod once the claim is bound. This test stands in for the provisioner: it creates the PV on
#    the selected node (the lab has no CSI driver) and kube-controller-manager binds the claim.
for k in kca kcb; do
  $k apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: parity-wffc}
provisioner: example.com/parity
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: kubernetes.io/hostname, values: [parity-0]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch, namespace: $NS}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: parity-wffc
  resources: {requests: {storage: 1Gi}}
EOF2
done
apply_both vol-wffc data "$(CLAIM_VOL scratch)"
selected() { $1 -n "$NS" get pvc scratch -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/selected-node}'; }
has_selected() { [[ -n $(selected "$1") ]]; }
for k in kca kcb; do
  who=gpuslice; [[ $k == kcb ]] && who=kube-scheduler
  if wait_for 40 has_selected $k; then
    node=$(selected $k)
    pass "parity: $who wrote volume.kubernetes.io/selected-node=$node on the WaitForFirstConsumer claim" \
      "pod vol-wffc meanwhile: $(outcome $k vol-wffc || true)"
    # The provisioner's part: a volume on the selected node, pre-bound to the claim.
    $k apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolume
metadata: {name: parity-wffc-$k}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: parity-wffc
  claimRef: {namespace: $NS, name: scratch}
  local: {path: /mnt/wffc}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$node]}]
EOF2
  else
    fail "parity: $who wrote volume.kubernetes.io/selected-node on the WaitForFirstConsumer claim" \
      "none after 40 s; pod vol-wffc: $(outcome $k vol-wffc)"
  fi
done
same vol-wffc '^node=parity-0$' bound

#!/usr/bin/env bash
# Issue 11: a WaitForFirstConsumer claim of a StorageClass without a provisioner (kubernetes.io/no-provisioner:
# pre-provisioned local PVs) is bound by the scheduler to a matching existing PV, as kube-scheduler's VolumeBinding
# does (binder.go FindPodVolumes / bindAPIUpdate, pv_helpers.go FindMatchingVolume). The same YAML goes to both
# schedulers: the GPU pod to gpuslice in tenant-a, its CPU twin to the lab's kube-scheduler in tenant-b (started
# by this test), on identical kwok nodes pvb-0 and pvb-1:
#   1. PVs pvb-small-0 (500Mi, node affinity pvb-0: too small) and pvb-local-1 (2Gi, node affinity pvb-1); a 1Gi
#      claim: the scheduler writes the claimRef (with the claim's UID) and pv.kubernetes.io/bound-by-controller on
#      pvb-local-1, kube-controller-manager's PV controller binds the claim, and the pod is bound to pvb-1;
#   2. a second 1Gi claim: no PV left that holds it and no provisioner, so its pod stays Pending with "node(s)
#      didn't find available persistent volumes to bind", and pvb-small-0 stays unclaimed.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-pvbind
NODES=(pvb-0 pvb-1)

started_sched=0
pvb_extra() {  # pvb_extra kca|kcb: the PVs and the class of this test (the namespace takes the claims)
  $1 delete pv pvb-small-0 pvb-local-1 --wait=false >/dev/null 2>&1
  $1 delete storageclass pvb-local --wait=false >/dev/null 2>&1
}
cleanup() { twin_cleanup "$NS" "$started_sched" pvb_extra "${NODES[@]}"; }
trap cleanup EXIT

# shellcheck source=lab/nodes.sh
source "$(dirname "$0")/../../lab/nodes.sh"
test_node() { kwok_node "$1" "$(a100_register "GPU-$1" 1)" 10 32 256Gi 'gpuslice.io/pvbind: "yes"'; }

# test_pod KIND NAME CLAIM: KIND gpu (1 GPU, 4000 MiB, 10 %) or cpu (its twin, 100m CPU), on the test nodes only.
test_pod() {
  local res
  if [[ $1 == gpu ]]; then
    res='{limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "4000", nvidia.com/gpucores: "10"}}'
  else
    res='{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}'
  fi
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $2}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {gpuslice.io/pvbind: "yes"}
  volumes: [{name: data, persistentVolumeClaim: {claimName: $3}}]
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources: $res
EOF
}

# local_pv NAME SIZE NODE: a pre-provisioned local PV of class pvb-local on NODE.
local_pv() {
  cat <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $1, labels: {e2e: pvbind}}
spec:
  capacity: {storage: $2}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: pvb-local
  local: {path: /mnt/$1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$3]}]
EOF
}
claim_yaml() {
  cat <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $1, namespace: $NS}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: pvb-local
  resources: {requests: {storage: 1Gi}}
EOF
}

# outcome K NAME: "node=X" when bound, "pending: <summary>" when PodScheduled=False (PostFilter tail dropped).
outcome() {
  local k=$1 name=$2 node msg
  node=$($k -n "$NS" get pod "$name" -o jsonpath='{.spec.nodeName}' 2>/dev/null)
  if [[ -n $node ]]; then echo "node=$node"; return; fi
  msg=$($k -n "$NS" get pod "$name" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null)
  [[ -n $msg ]] && echo "pending: ${msg%%. *}$([[ $msg == *". "* ]] && echo .)"
}
bound_in() { [[ $(outcome "$1" "$2") == node=* ]]; }
pending_with() { [[ $(outcome "$1" "$2") == "pending: "*"$3"* ]]; }
who() { [[ $1 == kca ]] && echo gpuslice || echo kube-scheduler; }
pv_field() { $1 get pv "$2" -o jsonpath="$3" 2>/dev/null; }
pvc_field() { $1 -n "$NS" get pvc "$2" -o jsonpath="$3" 2>/dev/null; }
pv_available() { [[ $(pv_field "$1" "$2" '{.status.phase}') == Available ]]; }

section "pre-provisioned PVs for WaitForFirstConsumer claims: gpuslice (tenant-a) and kube-scheduler (tenant-b)"
if ! "$LAB" start b kube-scheduler >/dev/null 2>&1; then
  fail "pvbind: upstream kube-scheduler started in tenant-b" "lab/lab.sh start b kube-scheduler failed"; exit 1
fi
started_sched=1
node_ready() { [[ $($1 get node "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
for k in kca kcb; do
  $k delete namespace "$NS" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  pvb_extra "$k"
  $k create namespace "$NS" >/dev/null || { fail "pvbind: namespace $NS" "$k create namespace failed"; exit 1; }
  for n in "${NODES[@]}"; do
    test_node "$n" | $k create -f - >/dev/null || { fail "pvbind: node $n" "$k create node failed"; exit 1; }
  done
  $k apply -f - >/dev/null <<EOF || { fail "pvbind: objects ($(who $k))" "$k apply failed"; exit 1; }
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: pvb-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
$(local_pv pvb-small-0 500Mi pvb-0)
---
$(local_pv pvb-local-1 2Gi pvb-1)
---
$(claim_yaml data)
EOF
done
ready=1
for k in kca kcb; do
  for n in "${NODES[@]}"; do wait_for 30 node_ready $k "$n" || ready=0; done
  # The PV controller moves a new PV to Available; FindMatchingVolume takes only Available PVs.
  for pv in pvb-small-0 pvb-local-1; do wait_for 30 pv_available $k $pv || ready=0; done
done
if ((ready)); then
  pass "pvbind: nodes Ready (kwok) and PVs Available (kube-controller-manager) in both tenants"
else
  fail "pvbind: nodes Ready (kwok) and PVs Available (kube-controller-manager) in both tenants" \
    "a: $(kca get pv -l e2e=pvbind --no-headers 2>&1 | tr '\n' ';') b: $(kcb get pv -l e2e=pvbind --no-headers 2>&1 | tr '\n' ';')"
fi
# Both schedulers must see the nodes (gpuslice: registered cards; kube-scheduler: informer) before the first pod.
sleep 2

# 1. the claim binds to the PV that holds it, on its node.
t0=$(now_ms)
test_pod gpu vol-static data | kca -n "$NS" apply -f - >/dev/null || fail "pvbind: create vol-static (gpuslice)"
test_pod cpu vol-static data | kcb -n "$NS" apply -f - >/dev/null || fail "pvbind: create vol-static (kube-scheduler)"
for k in kca kcb; do
  wait_for 60 bound_in $k vol-static
  got=$(outcome $k vol-static)
  if [[ $got == node=pvb-1 ]]; then
    # Both pods were created at t0; the first is waited for first, so the second figure is an upper bound.
    pass "pvbind: $(who $k) bound vol-static to pvb-1, the node of the only PV that holds its claim" \
      "$got, seen bound $(($(now_ms) - t0)) ms after creation (claimRef write + PV controller + Binding)"
  else
    fail "pvbind: $(who $k) bound vol-static to pvb-1, the node of the only PV that holds its claim" \
      "outcome: \"$got\"; pvc: $(pvc_field $k data '{.status.phase} {.spec.volumeName}')"
  fi
  uid=$(pvc_field $k data '{.metadata.uid}')
  ref="$(pv_field $k pvb-local-1 '{.spec.claimRef.namespace}/{.spec.claimRef.name} uid={.spec.claimRef.uid}')"
  by=$(pv_field $k pvb-local-1 '{.metadata.annotations.pv\.kubernetes\.io/bound-by-controller}')
  if [[ $ref == "$NS/data uid=$uid" && -n $uid && $by == yes ]]; then
    pass "pvbind: $(who $k) wrote pvb-local-1's claimRef to claim data (its UID) and bound-by-controller" \
      "claimRef $ref, bound-by-controller=$by"
  else
    fail "pvbind: $(who $k) wrote pvb-local-1's claimRef to claim data (its UID) and bound-by-controller" \
      "claimRef \"$ref\" (claim uid $uid), bound-by-controller=\"$by\""
  fi
  state=$(pvc_field $k data '{.status.phase} {.spec.volumeName} {.metadata.annotations.pv\.kubernetes\.io/bind-completed}')
  if [[ $state == "Bound pvb-local-1 yes" ]]; then
    pass "pvbind: kube-controller-manager bound claim data to pvb-local-1 ($(who $k)'s tenant)" "$state"
  else
    fail "pvbind: kube-controller-manager bound claim data to pvb-local-1 ($(who $k)'s tenant)" "\"$state\""
  fi
done
[[ $(kca -n "$NS" get pod vol-static -o jsonpath='{.spec.schedulerName}') == "$SCHEDULER_NAME" ]] &&
  pass "pvbind: the GPU pod is gpuslice's" || fail "pvbind: the GPU pod is gpuslice's" \
  "schedulerName=$(kca -n "$NS" get pod vol-static -o jsonpath='{.spec.schedulerName}')"

# 2. a second claim: the small PV does not hold it and nothing can be provisioned.
for k in kca kcb; do claim_yaml more | $k apply -f - >/dev/null; done
test_pod gpu vol-none more | kca -n "$NS" apply -f - >/dev/null || fail "pvbind: create vol-none (gpuslice)"
test_pod cpu vol-none more | kcb -n "$NS" apply -f - >/dev/null || fail "pvbind: create vol-none (kube-scheduler)"
want="node(s) didn't find available persistent volumes to bind"
wait_for 40 pending_with kca vol-none "$want"
wait_for 40 pending_with kcb vol-none "$want"
a=$(outcome kca vol-none) b=$(outcome kcb vol-none)
if [[ -n $a && $a == "$b" && $a == *"2 $want"* ]]; then
  pass "pvbind: vol-none Pending alike in both (no PV holds 1Gi, no provisioner)" "gpuslice: $a | kube-scheduler: $b"
else
  fail "pvbind: vol-none Pending alike in both (no PV holds 1Gi, no provisioner)" \
    "gpuslice: \"$a\" | kube-scheduler: \"$b\" (expected both to contain \"2 $want\")"
fi
small=$(pv_field kca pvb-small-0 '{.status.phase} claimRef={.spec.claimRef.name}')
[[ $small == "Available claimRef=" ]] && pass "pvbind: pvb-small-0 (too small) left unclaimed by gpuslice" "$small" ||
  fail "pvbind: pvb-small-0 (too small) left unclaimed by gpuslice" "\"$small\""

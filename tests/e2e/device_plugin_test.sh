#!/usr/bin/env bash
# Issue 10: every pod gpuslice binds is allocated correctly by HAMi v2.10's device plugin, as emulated by the
# lab's device agent (scheduler/mock_agent.h: GetPendingPod through the lock, one Allocate per container with
# an nvidia.com/gpu limit in kubelet's order, the v2.10 decode/erase, the environment the plugin injects). The
# agent records that environment on the pod (lab.gpuslice.io/device-plugin); these checks assert on it for
# single-, multi-container, init-container, sidecar, percentage, multi-card and opted-out pods, and that
# forged annotations change nothing.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
trap e2e_cleanup EXIT
NS=e2e-device-plugin

# record NS NAME: the emulated plugin's record (JSON), empty until the agent has admitted the pod.
record() { pod_annotation "$1" "$2" lab.gpuslice.io/device-plugin; }
has_record() { [[ -n $(record "$1" "$2") ]]; }
# env_of NS NAME CONTAINER VAR: one variable of the environment the plugin gave CONTAINER ("" when none).
env_of() { record "$1" "$2" | jq -r --arg c "$3" --arg v "$4" '.containers[] | select(.name == $c) | .env[$v] // ""'; }
allocated_of() { record "$1" "$2" | jq -r --arg c "$3" '.containers[] | select(.name == $c) | .allocated'; }
uuid_of() { pod_uuids "$1" "$2" | awk -v i="${3:-1}" '{print $i}'; }

# expect NS NAME CHECK "CONTAINER VAR WANT"...: waits for the record and compares each variable.
expect() {
  local ns=$1 name=$2 check=$3; shift 3
  if ! wait_bound "$ns" "$name" 30 || ! wait_for 20 has_record "$ns" "$name"; then
    fail "$check" "node=\"$(pod_node "$ns" "$name")\" record=\"$(record "$ns" "$name")\" PodScheduled: $(pod_message "$ns" "$name")"
    return
  fi
  local why=() got result
  result=$(record "$ns" "$name" | jq -r .result)
  [[ $result == admitted ]] || why+=("result=$result error=$(record "$ns" "$name" | jq -r '.error // ""')")
  for spec in "$@"; do
    read -r c v want <<<"$spec"
    if [[ $v == allocated ]]; then
      got=$(allocated_of "$ns" "$name" "$c")
    else
      got=$(env_of "$ns" "$name" "$c" "$v")
    fi
    [[ $got == "$want" ]] || why+=("$c $v=\"$got\" (want \"$want\")")
  done
  [[ $(pod_annotation "$ns" "$name" hami.io/bind-phase) == success ]] ||
    why+=("bind-phase=$(pod_annotation "$ns" "$name" hami.io/bind-phase)")
  if ((${#why[@]} == 0)); then
    pass "$check" "$(record "$ns" "$name" | jq -c '[.containers[] | select(.allocated) | {name, env: (.env | with_entries(select(.key | test("VISIBLE|LIMIT"))))}]')"
  else
    fail "$check" "${why[*]}; record: $(record "$ns" "$name")"
  fi
}

use_tenant a
section "device plugin emulation: pod shapes (tenant-a)"
e2e_ns a "$NS" || { fail "device-plugin: namespace $NS" "kubectl create namespace failed"; exit 1; }

kubectl -n "$NS" apply -f "$(dirname "$0")/manifests/device_plugin_shapes.yaml" >/dev/null 2>&1

expect "$NS" single "device-plugin: single container gets its slice" \
  "cuda CUDA_DEVICE_MEMORY_LIMIT_0 10000m" "cuda CUDA_DEVICE_SM_LIMIT 25"
u=$(uuid_of "$NS" single)
[[ -n $u && $(env_of "$NS" single cuda NVIDIA_VISIBLE_DEVICES) == "$u" ]] &&
  pass "device-plugin: NVIDIA_VISIBLE_DEVICES is the allocated card" "$u" ||
  fail "device-plugin: NVIDIA_VISIBLE_DEVICES is the allocated card" "allocated $u, env $(env_of "$NS" single cuda NVIDIA_VISIBLE_DEVICES)"
expect "$NS" multi "device-plugin: multi-container pod, each container its own entry" \
  "c0 CUDA_DEVICE_MEMORY_LIMIT_0 3000m" "c0 CUDA_DEVICE_SM_LIMIT 10" "plain allocated false" \
  "c1 CUDA_DEVICE_MEMORY_LIMIT_0 4000m" "c1 CUDA_DEVICE_SM_LIMIT 20"
expect "$NS" init-only "device-plugin: init-container-only GPU pod (locked, allocated, released)" \
  "warmup CUDA_DEVICE_MEMORY_LIMIT_0 2000m" "warmup CUDA_DEVICE_SM_LIMIT 15" "app allocated false"
# The webhook adds nvidia.com/gpu: 1 where only memory or cores are asked, so kubelet calls Allocate for both.
expect "$NS" sidecar "device-plugin: sidecar (restartable init) and GPU-less containers keep kubelet's order" \
  "proxy allocated false" "gpu-sidecar CUDA_DEVICE_MEMORY_LIMIT_0 1000m" "gpu-sidecar CUDA_DEVICE_SM_LIMIT 5" \
  "log-shipper allocated false" "cuda CUDA_DEVICE_MEMORY_LIMIT_0 5000m" "cuda CUDA_DEVICE_SM_LIMIT 0"
expect "$NS" percentage "device-plugin: percentage of the A100 (25 % of 81920 MiB)" \
  "cuda CUDA_DEVICE_MEMORY_LIMIT_0 20480m" "cuda CUDA_DEVICE_SM_LIMIT 20"

section "opted-out pods: no webhook, gpuslice named by hand (tenant-a)"
kubectl -n "$NS" apply -f - >/dev/null 2>&1 <<YAML
apiVersion: v1
kind: Pod
metadata: {name: optout-no-count, labels: {hami.io/webhook: ignore}}
spec:
  schedulerName: $SCHEDULER_NAME
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpumem: 3000}}
---
apiVersion: v1
kind: Pod
metadata:
  name: optout-counted
  labels: {hami.io/webhook: ignore}
  annotations:
    # Forged: claims no GPU (it would be bound without the lock) and a card of its choosing.
    gpuslice.io/gpu-request: '{"containers":[{"name":"cuda","init":false,"gpus":0}]}'
    hami.io/vgpu-devices-to-allocate: 'GPU-forged,NVIDIA,81920,100:;'
    hami.io/bind-phase: success
spec:
  schedulerName: $SCHEDULER_NAME
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}}
---
apiVersion: v1
kind: Pod
metadata:
  name: optout-cpu-forged
  labels: {hami.io/webhook: ignore}
  annotations:
    # Forged: a CPU-only pod claiming two GPUs (it would take the node lock).
    gpuslice.io/gpu-request: '{"containers":[{"name":"app","init":false,"gpus":2,"memMiB":5000,"cores":10}]}'
spec:
  schedulerName: $SCHEDULER_NAME
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: busybox:1.36
YAML

if wait_unschedulable "$NS" optout-no-count 30; then
  msg=$(pod_message "$NS" optout-no-count)
  if [[ $msg == *'container "cuda"'* && $msg == *"add resources.limits.nvidia.com/gpu"* ]]; then
    pass "device-plugin: memory without nvidia.com/gpu stays Pending, naming the container and the fix" "$msg"
  else
    fail "device-plugin: memory without nvidia.com/gpu stays Pending, naming the container and the fix" "$msg"
  fi
else
  fail "device-plugin: memory without nvidia.com/gpu stays Pending, naming the container and the fix" \
    "node=\"$(pod_node "$NS" optout-no-count)\" record=\"$(record "$NS" optout-no-count)\""
fi
# Without the webhook there are no exclusive-core defaults: cores stay at defaultCores (0).
expect "$NS" optout-counted "device-plugin: opted-out GPU pod with forged annotations gets its own entry" \
  "cuda CUDA_DEVICE_MEMORY_LIMIT_0 3000m" "cuda CUDA_DEVICE_SM_LIMIT 0"
v=$(env_of "$NS" optout-counted cuda NVIDIA_VISIBLE_DEVICES)
[[ $v == GPU-* && $v != GPU-forged ]] &&
  pass "device-plugin: the forged device entry is not what the plugin hands out" "NVIDIA_VISIBLE_DEVICES=$v" ||
  fail "device-plugin: the forged device entry is not what the plugin hands out" "NVIDIA_VISIBLE_DEVICES=$v"
if wait_bound "$NS" optout-cpu-forged 30; then
  left=$(kubectl -n "$NS" get pod optout-cpu-forged -o json | jq -r '.metadata.annotations // {} | keys
    | map(select(startswith("hami.io/vgpu") or startswith("hami.io/bind"))) | join(",")')
  ev=$(kubectl -n "$NS" get events --field-selector involvedObject.name=optout-cpu-forged,reason=AnnotationIgnored \
    -o jsonpath='{.items[0].message}' 2>/dev/null)
  if [[ -z $left && $ev == *gpu-request* ]]; then
    pass "device-plugin: CPU-only pod with a forged two-GPU request is bound as CPU-only" "AnnotationIgnored: $ev"
  else
    fail "device-plugin: CPU-only pod with a forged two-GPU request is bound as CPU-only" "hami annotations \"$left\", event \"$ev\""
  fi
else
  fail "device-plugin: CPU-only pod with a forged two-GPU request is bound as CPU-only" "$(pod_message "$NS" optout-cpu-forged)"
fi

section "webhook removes forged annotations (tenant-a)"
kubectl -n "$NS" apply -f - >/dev/null 2>&1 <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: webhook-forged
  annotations:
    gpuslice.io/gpu-request: '{"containers":[{"name":"app","init":false,"gpus":2,"memMiB":5000,"cores":10}]}'
    hami.io/vgpu-node: tenant-a-gpu-0
    hami.io/bind-phase: allocating
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: busybox:1.36
YAML
left=$(kubectl -n "$NS" get pod webhook-forged -o json 2>/dev/null | jq -r '.metadata.annotations // {} | keys
  | map(select(startswith("gpuslice.io/") or startswith("hami.io/"))) | join(",")')
sched=$(pod_field "$NS" webhook-forged '{.spec.schedulerName}')
if [[ -z $left && $sched == default-scheduler ]]; then
  pass "device-plugin: the webhook strips forged scheduler-owned annotations from a CPU-only pod" "schedulerName=$sched"
else
  fail "device-plugin: the webhook strips forged scheduler-owned annotations from a CPU-only pod" \
    "left: \"$left\", schedulerName=$sched"
fi

section "kubelet's status sync: a rejection outlives kwok's stale Running (tenant-a)"
# kwok is frozen (SIGSTOP) while the agent rejects a pod bound by hand with no device entry (Allocate fails, kubelet
# moves it to Failed). Thawed, kwok applies the pod-ready stage it still owes the pod: Running over Failed, a pod with
# no device that looks alive. kubelet's status manager compares its status with the API's every 10 s and writes
# Failed again; so must the agent (the chaos_lease run of e70db85 left such a pod Running with its lock held).
KWOK_PID=$(lab_pid a kwok)
sync_pod() {
  cat <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: status-sync
  labels: {gpuslice.io/webhook: ignore}
spec:
  schedulerName: gpuslice-scheduler
  nodeName: tenant-a-gpu-0
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: busybox:1.36
    resources:
      limits: {nvidia.com/gpu: 1}
YAML
}
pod_phase() { pod_field "$NS" status-sync '{.status.phase}'; }
is_phase() { [[ $(pod_phase) == "$1" ]]; }
if [[ -z $KWOK_PID ]]; then
  fail "device-plugin: a rejection outlives kwok's stale Running" "no kwok process for tenant-a"
else
  kill -STOP "$KWOK_PID"
  created=$(sync_pod | kubectl -n "$NS" apply -f - 2>&1)
  rejected=no
  wait_for 30 is_phase Failed && rejected=yes
  kill -CONT "$KWOK_PID"
  turned=no
  wait_for 10 is_phase Running && turned=yes
  # Back to Failed within kubelet's 10 s sync (and a margin for the lab's load), then it stays Failed.
  healed=no
  wait_for 30 is_phase Failed && healed=yes
  sleep 12
  final=$(pod_phase)
  msg="rejected while kwok was frozen: $rejected; kwok turned it Running: $turned; Failed again: $healed; after 12 s: $final"
  if [[ $rejected == yes && $healed == yes && $final == Failed ]]; then
    pass "device-plugin: a rejection outlives kwok's stale Running (kubelet's status sync)" "$msg"
  else
    fail "device-plugin: a rejection outlives kwok's stale Running (kubelet's status sync)" \
      "$msg; reason=$(pod_field "$NS" status-sync '{.status.reason}'); create: $created"
  fi
  kubectl -n "$NS" delete pod status-sync --grace-period=0 --wait=false >/dev/null 2>&1
fi

section "multi-card pod (tenant-b, two L4 per node)"
use_tenant b
e2e_ns b "$NS" || fail "device-plugin: namespace $NS (tenant-b)" "kubectl create namespace failed"
kubectl -n "$NS" apply -f "$(dirname "$0")/manifests/device_plugin_two_cards.yaml" >/dev/null 2>&1
expect "$NS" two-cards "device-plugin: two cards, one limit per card" \
  "cuda CUDA_DEVICE_MEMORY_LIMIT_0 1000m" "cuda CUDA_DEVICE_MEMORY_LIMIT_1 1000m" "cuda CUDA_DEVICE_SM_LIMIT 10"
want="$(uuid_of "$NS" two-cards 1),$(uuid_of "$NS" two-cards 2)"
got=$(env_of "$NS" two-cards cuda NVIDIA_VISIBLE_DEVICES)
[[ $got == "$want" && $want != , ]] && pass "device-plugin: both cards visible, in allocation order" "$got" ||
  fail "device-plugin: both cards visible, in allocation order" "env \"$got\", allocated \"$want\""

for t in a b; do
  use_tenant "$t"
  if wait_for 15 no_node_locks; then
    pass "device-plugin: no hami.io/mutex.lock left (tenant-$t)" "every lock released as the plugin does"
  else
    fail "device-plugin: no hami.io/mutex.lock left (tenant-$t)" "$(node_locks | xargs)"
  fi
done

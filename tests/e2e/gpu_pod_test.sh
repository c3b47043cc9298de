#!/usr/bin/env bash
# Issue 4 item 9: an ordinary GPU pod YAML (kubectl apply, no scheduler named) on tenant-a is mutated by the
# webhook (through the Konnectivity tunnel) and bound by gpuslice with HAMi's allocation annotations; the mock
# device agent drives bind-phase to success and releases the node lock; a plain pod is left untouched.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
trap e2e_cleanup EXIT
NS=e2e-gpu-pod

section "GPU pod mutated and bound with HAMi annotations (tenant-a)"
e2e_ns a "$NS" || { fail "gpu-pod: namespace $NS" "kubectl create namespace failed"; exit 1; }

out=$(apply_pod "$NS" cuda-vector-add 10000 25)
sched=$(pod_field "$NS" cuda-vector-add '{.spec.schedulerName}')
req=$(pod_annotation "$NS" cuda-vector-add gpuslice.io/gpu-request)
if [[ $sched == "$SCHEDULER_NAME" && -n $req ]]; then
  pass "gpu-pod: webhook took the pod over" "pod $NS/cuda-vector-add: schedulerName=$sched, gpuslice.io/gpu-request=$req"
else
  fail "gpu-pod: webhook took the pod over" "apply: $out; schedulerName=\"$sched\" gpuslice.io/gpu-request=\"$req\""
fi

t0=$(now_ms)
if wait_bound "$NS" cuda-vector-add 30; then
  node=$(pod_node "$NS" cuda-vector-add)
  vnode=$(pod_annotation "$NS" cuda-vector-add hami.io/vgpu-node)
  alloc=$(pod_annotation "$NS" cuda-vector-add hami.io/vgpu-devices-allocated)
  uuid=$(pod_uuids "$NS" cuda-vector-add)
  reg=$(kubectl get node "$node" -o jsonpath='{.metadata.annotations.hami\.io/node-nvidia-register}')
  ok=1 why=()
  [[ $vnode == "$node" ]] || { ok=0; why+=("hami.io/vgpu-node=\"$vnode\" but spec.nodeName=\"$node\""); }
  [[ $alloc =~ ^GPU-[^,]+,NVIDIA,10000,25:\;$ ]] || { ok=0; why+=("devices-allocated \"$alloc\" is not UUID,NVIDIA,10000,25:;"); }
  [[ -n $uuid && $reg == *"\"$uuid\""* ]] || { ok=0; why+=("UUID \"$uuid\" not registered on node $node"); }
  [[ -n $(pod_annotation "$NS" cuda-vector-add hami.io/vgpu-time) ]] || { ok=0; why+=("no hami.io/vgpu-time"); }
  [[ -n $(pod_annotation "$NS" cuda-vector-add hami.io/bind-time) ]] || { ok=0; why+=("no hami.io/bind-time"); }
  if ((ok)); then
    pass "gpu-pod: bound with HAMi allocation annotations" \
      "node=$node after $(( $(now_ms) - t0 )) ms; vgpu-node=$vnode; vgpu-devices-allocated=$alloc (UUID registered on $node)"
  else
    fail "gpu-pod: bound with HAMi allocation annotations" "${why[*]}"
  fi
else
  fail "gpu-pod: bound with HAMi allocation annotations" \
    "not bound after 30 s; PodScheduled: $(pod_reason "$NS" cuda-vector-add) $(pod_message "$NS" cuda-vector-add)"
fi

if wait_for 20 bind_phase_success "$NS" cuda-vector-add; then
  pass "gpu-pod: bind-phase reaches success (mock device agent)" \
    "bind-phase=success; vgpu-devices-to-allocate=\"$(pod_annotation "$NS" cuda-vector-add hami.io/vgpu-devices-to-allocate)\" (consumed)"
else
  fail "gpu-pod: bind-phase reaches success (mock device agent)" \
    "bind-phase=\"$(pod_annotation "$NS" cuda-vector-add hami.io/bind-phase)\" after 20 s"
fi

if wait_for 15 no_node_locks; then
  pass "gpu-pod: no hami.io/mutex.lock left on any node" "nodes: $(kubectl get nodes -o name | xargs)"
else
  fail "gpu-pod: no hami.io/mutex.lock left on any node" "$(node_locks | xargs)"
fi

ev=$(kubectl -n "$NS" get events --field-selector involvedObject.name=cuda-vector-add -o json 2>/dev/null |
     jq -r '.items[] | "\(.reason): \(.message)"' | grep -m1 '^Scheduled:')
if [[ -n $ev ]]; then
  pass "gpu-pod: Scheduled event recorded" "$ev"
else
  fail "gpu-pod: Scheduled event recorded" \
    "events: $(kubectl -n "$NS" get events -o json | jq -r '[.items[] | .reason] | join(",")')"
fi

section "plain pod untouched (tenant-a)"
out=$(plain_pod plain-nginx | kubectl -n "$NS" apply -f - 2>&1)
sched=$(pod_field "$NS" plain-nginx '{.spec.schedulerName}')
ann=$(kubectl -n "$NS" get pod plain-nginx -o json 2>/dev/null | jq -r '.metadata.annotations // {} | keys
  | map(select(startswith("gpuslice.io/") or startswith("hami.io/") or startswith("nvidia.com/"))) | join(",")')
if [[ $sched == default-scheduler && -z $ann ]]; then
  pass "plain-pod: untouched by the webhook" "pod $NS/plain-nginx: schedulerName=$sched, no gpuslice.io/, hami.io/ or nvidia.com/ annotation"
else
  fail "plain-pod: untouched by the webhook" "apply: $out; schedulerName=\"$sched\" annotations=\"$ann\""
fi

section "HAMi-style variants (tenant-a)"
# nvidia.com/gpumem-percentage: 25 % of the 81920 MiB A100 = 20480 MiB in the device string.
kubectl -n "$NS" apply -f - >/dev/null 2>&1 <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: percentage}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem-percentage: 25, nvidia.com/gpucores: 20}}
YAML
# A GPU-less sidecar before the GPU container, gpumem alone (nvidia.com/gpu defaulted to 1): every container
# slot is kept, the empty one included (hami-protocol.md section 4).
kubectl -n "$NS" apply -f - >/dev/null 2>&1 <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: sidecar}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: log-shipper
    image: busybox:1.36
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpumem: 5000}}
YAML
# After the emulated plugin (v2.10 decodes dropping empty slots, then re-encodes), one emptied entry is left: ";".
for spec in "percentage|^GPU-[^,]+,NVIDIA,20480,20:;$|;" "sidecar|^;GPU-[^,]+,NVIDIA,5000,0:;$|;"; do
  IFS='|' read -r name want consumed <<<"$spec"
  if wait_bound "$NS" "$name" 30 && wait_for 20 bind_phase_success "$NS" "$name"; then
    alloc=$(pod_annotation "$NS" "$name" hami.io/vgpu-devices-allocated)
    left=$(pod_annotation "$NS" "$name" hami.io/vgpu-devices-to-allocate)
    if [[ $alloc =~ $want && $left == "$consumed" ]]; then
      pass "gpu-pod: $name encoded as HAMi does" "devices-allocated=$alloc, to-allocate after the agent=\"$left\""
    else
      fail "gpu-pod: $name encoded as HAMi does" "devices-allocated=\"$alloc\" (want $want), to-allocate=\"$left\" (want \"$consumed\")"
    fi
  else
    fail "gpu-pod: $name encoded as HAMi does" \
      "node=\"$(pod_node "$NS" "$name")\" bind-phase=\"$(pod_annotation "$NS" "$name" hami.io/bind-phase)\" PodScheduled: $(pod_message "$NS" "$name")"
  fi
done

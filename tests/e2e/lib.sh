# Shared helpers for the end-to-end tests. Source it; every check prints PASS or FAIL with its evidence and
# the runner prints "N passed, N failed" at the end.
# shellcheck shell=bash

E2E_RESULTS=${E2E_RESULTS:-/tmp/gpuslice-e2e-results}
: >>"$E2E_RESULTS"

pass() { printf 'PASS  %s\n' "$1"; [[ -n ${2:-} ]] && printf '      %s\n' "$2"; echo "PASS $1" >>"$E2E_RESULTS"; }
fail() { printf 'FAIL  %s\n' "$1"; [[ -n ${2:-} ]] && printf '      %s\n' "$2"; echo "FAIL $1" >>"$E2E_RESULTS"; }

# use_tenant a|b: points kubectl (and $KUBECONFIG) at one tenant's API server.
use_tenant() { eval "$("$LAB" env "$1")"; }

# wait_for SECONDS CMD...: retries CMD every 0.2 s until it succeeds or the time is up (returns 1).
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}

# pod_field NS NAME JSONPATH
pod_field() { kubectl -n "$1" get pod "$2" -o jsonpath="$3" 2>/dev/null; }
pod_bound() { [[ -n $(pod_field "$1" "$2" '{.spec.nodeName}') ]]; }
pod_unschedulable() {
  [[ $(pod_field "$1" "$2" '{.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]
}
pod_message() { pod_field "$1" "$2" '{.status.conditions[?(@.type=="PodScheduled")].message}'; }

# gpu_pod NAME MEM_MIB CORES [GPUS] [extra annotations yaml]: prints a HAMi-style pod manifest.
gpu_pod() {
  local name=$1 mem=$2 cores=$3 gpus=${4:-1}
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    command: ["sleep", "infinity"]
    resources:
      limits:
        nvidia.com/gpu: "$gpus"
$( [[ $mem != - ]] && printf '        nvidia.com/gpumem: "%s"\n' "$mem")
$( [[ $cores != - ]] && printf '        nvidia.com/gpucores: "%s"\n' "$cores")
YAML
}

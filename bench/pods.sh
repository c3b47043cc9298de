# shellcheck shell=bash
# Benchmark pods, shared by bench/apiserver_bench.sh and bench/scale_bench.sh (the one generator). Source it and
# set NS (namespace), GS_NAME (gpuslice's schedulerName) and KS_NAME (the kube-scheduler profile's) first.
# printf only (no fork per pod): bench/scale_bench.sh renders one pod and stamps names into it.

# gpu_pod NAME BENCH_LABEL: a GPU pod (nvidia.com/gpu 1, gpumem 1000, gpucores 5) that names gpuslice's
# scheduler itself and opts out of the webhook (label gpuslice.io/webhook=ignore): it is created while gpuslice
# (and so its webhook) is stopped, and the scheduler derives the request from the resources as it does for any
# pod without gpuslice.io/gpu-request. The guard admits it (right scheduler).
gpu_pod() {
  printf '%s\n' --- 'apiVersion: v1' 'kind: Pod' \
    "metadata: {name: $1, namespace: $NS, labels: {bench: $2, gpuslice.io/webhook: ignore}}" \
    'spec:' "  schedulerName: $GS_NAME" '  terminationGracePeriodSeconds: 0' '  containers:' '  - name: c' \
    '    image: registry.k8s.io/pause:3.10' \
    '    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000", nvidia.com/gpucores: "5"}}'
}
# plain_pod NAME BENCH_LABEL: a CPU pod (cpu 10m, memory 16Mi) for the kube-scheduler profile KS_NAME.
plain_pod() {
  printf '%s\n' --- 'apiVersion: v1' 'kind: Pod' "metadata: {name: $1, namespace: $NS, labels: {bench: $2}}" \
    'spec:' "  schedulerName: $KS_NAME" '  terminationGracePeriodSeconds: 0' '  containers:' '  - name: c' \
    '    image: registry.k8s.io/pause:3.10' '    resources: {requests: {cpu: 10m, memory: 16Mi}}'
}
gpu_pods() { local i; for ((i = 0; i < $2; i++)); do gpu_pod "$1-$i" "$1"; done; }      # PREFIX COUNT
plain_pods() { local i; for ((i = 0; i < $2; i++)); do plain_pod "$1-$i" "$1"; done; }  # PREFIX COUNT

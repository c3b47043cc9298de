# shellcheck shell=bash
# Simulated GPU workers, shared by lab/lab.sh, the e2e tests and the benchmarks. Source it.

# a100_register PREFIX [CARDS]: the register JSON array of CARDS (default 4) A100-80GB cards with ids PREFIX-0..,
# HAMi's default split count (10), 81920 MiB and 100 cores each.
a100_register() {
  local prefix=$1 cards=${2:-4} j reg=""
  for ((j = 0; j < cards; j++)); do
    reg+="${reg:+,}{\"id\":\"$prefix-$j\",\"index\":$j,\"count\":10,\"devmem\":81920,\"devcore\":100,\"type\":\"NVIDIA A100-SXM4-80GB\",\"mode\":\"hami-core\",\"health\":true}"
  done
  echo "[$reg]"
}

# kwok_node NAME REGISTER SLICES [CPU MEMORY EXTRA_LABELS]: a kwok Node manifest for one GPU worker.
#   REGISTER  the hami.io/node-nvidia-register JSON array (docs/hami-protocol.md §3)
#   SLICES    allocatable nvidia.com/gpu: cards x split count; it must stay above 0 (HAMi's health gate)
#   EXTRA_LABELS  more labels in flow style, e.g. "gpuslice.io/lab: extra"
kwok_node() {
  local name=$1 reg=$2 slices=$3 cpu=${4:-64} mem=${5:-512Gi} extra=${6:-}
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels: {kubernetes.io/hostname: $name, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok${extra:+, $extra}}
  annotations:
    kwok.x-k8s.io/node: fake
    hami.io/node-nvidia-register: '$reg'
status:
  capacity: {cpu: "$cpu", memory: $mem, pods: "110", nvidia.com/gpu: "$slices"}
  allocatable: {cpu: "$cpu", memory: $mem, pods: "110", nvidia.com/gpu: "$slices"}
NODE
}

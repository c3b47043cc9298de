#!/usr/bin/env bash
# Issue 11 item 6: differential test against upstream kube-scheduler (tests/e2e/differential.py does the work).
# Five identical kwok nodes in both tenants (three zones: z1 has two, z2 two, z3 one; 4 x A100-80GB each, far
# more card slots than the run uses, so GPU capacity is never the binding limit); the lab's kube-scheduler
# (profile default-scheduler) is started in tenant-b for the CPU-only twins; gpuslice takes the GPU pods in
# tenant-a. Seeds: E2E_DIFF_SEEDS (default 11,12), pods per seed: E2E_DIFF_PODS (default 20),
# E2E_DIFF_VERBOSE=1 prints every pod's outcome.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-diff
NODES=(diff-0 diff-1 diff-2 diff-3 diff-4)
ZONES=(z1 z1 z2 z2 z3)
started_sched=0
cleanup() { twin_cleanup "$NS" "$started_sched" - "${NODES[@]}"; }
trap cleanup EXIT

# shellcheck source=lab/nodes.sh
source "$(dirname "$0")/../../lab/nodes.sh"
diff_node() {  # diff_node NAME ZONE: 4 x A100-80GB (lab/nodes.sh), in zone ZONE, labelled for this test only
  kwok_node "$1" "$(a100_register "GPU-$1")" 40 64 512Gi "topology.kubernetes.io/zone: $2, gpuslice.io/diff: \"yes\""
}

section "differential: gpuslice (tenant-a) vs upstream kube-scheduler (tenant-b), seeded pods, independent checker"
out=$(python3 "$(dirname "$0")/differential.py" --self-test 2>&1)
printf '%s\n' "$out"
grep -E '^(PASS|FAIL)  ' <<<"$out" | sed -E 's/^(PASS|FAIL)  (.*)$/\1 \2/' >>"$E2E_RESULTS"
if ! "$LAB" start b kube-scheduler >/dev/null 2>&1; then
  fail "differential: upstream kube-scheduler started in tenant-b" "lab/lab.sh start b kube-scheduler failed"; exit 1
fi
started_sched=1
for k in kca kcb; do
  $k delete namespace "$NS" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  $k create namespace "$NS" >/dev/null || { fail "differential: namespace $NS" "$k create namespace failed"; exit 1; }
  for i in "${!NODES[@]}"; do
    diff_node "${NODES[$i]}" "${ZONES[$i]}" | $k create -f - >/dev/null ||
      { fail "differential: node ${NODES[$i]}" "$k create node failed"; exit 1; }
  done
done
node_ready() { [[ $($1 get node "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
for n in "${NODES[@]}"; do
  wait_for 30 node_ready kca "$n" && wait_for 30 node_ready kcb "$n" ||
    { fail "differential: node $n Ready in both tenants"; exit 1; }
done
sleep 2  # both schedulers' informers see the nodes before the first pod

out=$(python3 "$(dirname "$0")/differential.py" \
  --gpuslice-kubeconfig "$(tenant_dir a)/admin.kubeconfig" \
  --kube-scheduler-kubeconfig "$(tenant_dir b)/admin.kubeconfig" \
  --seeds "${E2E_DIFF_SEEDS:-11,12}" --pods "${E2E_DIFF_PODS:-20}" ${E2E_DIFF_VERBOSE:+--verbose} 2>&1)
rc=$?
printf '%s\n' "$out"
grep -E '^(PASS|FAIL)  ' <<<"$out" | sed -E 's/^(PASS|FAIL)  (.*)$/\1 \2/' >>"$E2E_RESULTS"
if ((rc != 0)) && ! grep -q '^FAIL  ' <<<"$out"; then
  fail "differential: differential.py exited $rc" "$(tail -n 5 <<<"$out")"
fi

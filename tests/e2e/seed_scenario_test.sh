#!/usr/bin/env bash
# Issue 4 item 9: the seed's single-card scenario on tenant-a's A100 (81920 MiB, 100 cores), read from the pods'
# PodScheduled conditions, then: deleting one sharing pod gets the Pending fourth bound within seconds.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
trap e2e_cleanup EXIT
NS=e2e-seed

section "seed single-card scenario (tenant-a)"
e2e_ns a "$NS" || { fail "seed: namespace $NS" "kubectl create namespace failed"; exit 1; }
seed_scenario "$NS" "seed: share" "seed: core" "seed: memory"

section "freed slice reused (tenant-a)"
if pod_unschedulable "$NS" share-4 && pod_bound "$NS" share-1; then
  t0=$(now_ms)
  kubectl -n "$NS" delete pod share-1 --wait=false >/dev/null
  if wait_for 30 pod_bound "$NS" share-4; then
    ms=$(( $(now_ms) - t0 ))
    res=ok; ((ms <= 10000)) || res=ko
    check_result "seed: requeue" tenant-a "$res" "deleting share-1 gets the Pending share-4 bound within seconds" \
      "share-4 bound to $(pod_node "$NS" share-4) card $(pod_uuids "$NS" share-4) ${ms} ms after 'kubectl delete pod share-1' (limit 10000 ms)"
  else
    check_result "seed: requeue" tenant-a ko "deleting share-1 gets the Pending share-4 bound within seconds" \
      "share-4 not bound 30 s after deleting share-1; PodScheduled: $(pod_reason "$NS" share-4) $(pod_message "$NS" share-4)"
  fi
  if out=$(allocation_report); then
    pass "seed: no card over-committed after the requeue" "$out"
  else
    fail "seed: no card over-committed after the requeue" "$out"
  fi
else
  fail "seed: requeue" "precondition: share-4 Pending and share-1 bound (see above)"
fi

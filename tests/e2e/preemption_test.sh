#!/usr/bin/env bash
# Issue 13: priority preemption at card level, on tenant-a's one A100-80GB (81920 MiB) node, against the real
# kube-apiserver and controller manager (PriorityClass admission sets spec.priority; the disruption controller
# computes the PodDisruptionBudget's disruptionsAllowed):
#   - a pod of equal priority never preempts (stays Pending, "No preemption victims found");
#   - preemptionPolicy: Never stays Pending ("not eligible due to preemptionPolicy=Never.");
#   - a card full of four 20000 MiB low-priority pods, a 40000 MiB high-priority pod arrives: exactly two victims
#     on that card are evicted (Preempted events, DisruptionTarget by the scheduler), the preemptor is nominated
#     and binds there, and the PDB-protected pod that the order would otherwise pick is spared;
#   - /metrics counts it: gpuslice_scheduler_preemption_attempts_total, one gpuslice_scheduler_preemption_victims
#     observation of 2, gpuslice_scheduler_preemptions_in_flight back to 0 once the preemptor is bound.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-preemption
NODE=tenant-a-gpu-0
cleanup() {
  e2e_cleanup
  use_tenant a
  kubectl delete priorityclass e2e-low e2e-high e2e-high-never --ignore-not-found >/dev/null 2>&1
}
trap cleanup EXIT

section "priority preemption at card level (tenant-a)"
e2e_ns a "$NS" || { fail "preemption: namespace $NS" "kubectl create namespace failed"; exit 1; }
kubectl apply -f - >/dev/null <<'YAML' || { fail "preemption: PriorityClasses" "kubectl apply failed"; exit 1; }
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-high-never}
value: 1000
preemptionPolicy: Never
YAML

# prio_pod NAME MEM CLASS [LABELS]: a GPU pod of MEM MiB with priorityClassName CLASS (and labels, YAML flow).
prio_pod() {
  gpu_pod "$1" "$2" - | sed "s/^spec:/spec:\n  priorityClassName: $3/" |
    sed "s/^metadata:/metadata:\n  labels: {${4:-}}/" | kubectl -n "$NS" apply -f - >/dev/null 2>&1
}
deleting_or_gone() { ! kubectl -n "$NS" get pod "$1" >/dev/null 2>&1 ||
  [[ -n $(pod_field "$NS" "$1" '{.metadata.deletionTimestamp}') ]]; }
low_left() { kubectl -n "$NS" get pods -l tier=low -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }

# The card full: four 20000 MiB pods of priority 10 (80000 of 81920 MiB); low-3, the last one, is protected.
ok=1
for i in 0 1 2 3; do
  labels="tier: low"; [[ $i == 3 ]] && labels="tier: low, app: protected"
  prio_pod "low-$i" 20000 e2e-low "$labels" || ok=0
  wait_bound "$NS" "low-$i" 30 || ok=0
  sleep 1  # distinct start times (seconds): the victims' order is then by start, not by name
done
kubectl -n "$NS" apply -f - >/dev/null <<'YAML' || ok=0
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guard}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: protected}}
YAML
pdb_observed() { [[ $(kubectl -n "$NS" get pdb guard -o jsonpath='{.status.currentHealthy}') == 1 ]]; }
wait_for 30 pdb_observed || note "PodDisruptionBudget status not computed after 30 s (disruptionsAllowed reads as 0)"
prio=$(pod_field "$NS" low-0 '{.spec.priority}')
if ((ok)) && [[ $prio == 10 ]]; then
  pass "preemption: a card full of low-priority pods" \
    "4 x 20000 MiB of priority $prio bound on $(pod_node "$NS" low-0); PDB guard (minAvailable 1) protects low-3: disruptionsAllowed=$(kubectl -n "$NS" get pdb guard -o jsonpath='{.status.disruptionsAllowed}')"
else
  fail "preemption: a card full of low-priority pods" "bound: $(kubectl -n "$NS" get pods -o wide --no-headers | xargs); spec.priority=$prio"
  exit 1
fi

# Equal priority: never preempts.
prio_pod same 40000 e2e-low
if wait_for 30 pod_unschedulable "$NS" same && wait_for 10 eval '[[ $(pod_message "$NS" same) == *"preemption:"* ]]'; then
  msg=$(pod_message "$NS" same)
  if [[ $msg == *"No preemption victims found for incoming pod"* && $(low_left) == 4 ]]; then
    pass "preemption: equal priority never preempts" "same: $msg; low pods left: 4"
  else
    fail "preemption: equal priority never preempts" "same: $msg; low pods left: $(low_left)"
  fi
else
  fail "preemption: equal priority never preempts" "same: $(pod_reason "$NS" same) $(pod_message "$NS" same); node=$(pod_node "$NS" same)"
fi
kubectl -n "$NS" delete pod same --wait=true --timeout=30s >/dev/null 2>&1

# preemptionPolicy: Never (from its PriorityClass): stays Pending.
prio_pod never 40000 e2e-high-never
if wait_for 30 eval '[[ $(pod_message "$NS" never) == *"preemption:"* ]]'; then
  msg=$(pod_message "$NS" never)
  policy=$(pod_field "$NS" never '{.spec.preemptionPolicy}')
  if [[ $msg == *"not eligible due to preemptionPolicy=Never."* && -z $(pod_node "$NS" never) && $(low_left) == 4 &&
        -z $(pod_field "$NS" never '{.status.nominatedNodeName}') ]]; then
    pass "preemption: preemptionPolicy Never stays Pending" "never (priority $(pod_field "$NS" never '{.spec.priority}'), preemptionPolicy=$policy): $msg"
  else
    fail "preemption: preemptionPolicy Never stays Pending" "never: node=$(pod_node "$NS" never) message=$msg; low left: $(low_left)"
  fi
else
  fail "preemption: preemptionPolicy Never stays Pending" "never: $(pod_reason "$NS" never) $(pod_message "$NS" never)"
fi
kubectl -n "$NS" delete pod never --wait=true --timeout=30s >/dev/null 2>&1

# The high-priority 40000 MiB pod: exactly two victims on the card, the PDB-protected one spared.
# metric TEXT NAME: a sample of gpuslice's /metrics text (0 when absent).
metric() { awk -v m="$2" 'index($0, m " ") == 1 {print $NF; f = 1} END {if (!f) print 0}' <<<"$1"; }
m0=$(e2e_gpuslice_metrics a)
t0=$(now_ms)
prio_pod hi 40000 e2e-high
if wait_bound "$NS" hi 60; then
  took=$(( $(now_ms) - t0 ))
  sleep 2  # anything more would be deleted by now
  node=$(pod_node "$NS" hi)
  left=$(kubectl -n "$NS" get pods -l tier=low -o jsonpath='{range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name} {end}')
  survivors=$(kubectl -n "$NS" get pods -l tier=low -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name] | sort | join(",")')
  preempted=$(kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.reason == "Preempted") | .involvedObject.name] | unique | sort | join(",")')
  notes=$(kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.reason == "Preempted") | .message] | unique | join("; ")')
  nominated=$(kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.involvedObject.name == "hi" and (.message | test("preempting 2 pods"))) | .message] | first // ""')
  rounds=$(kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.involvedObject.name == "hi" and .reason == "Nominated")] | length')
  n_preempted=$(tr ',' '\n' <<<"$preempted" | grep -c .)
  if [[ $node == "$NODE" && $n_preempted == 2 && $(low_left) == 2 && $survivors == *low-3* && $preempted != *low-3* ]]; then
    pass "preemption: exactly two victims evicted on one card, the preemptor binds there" \
      "hi bound on $node after $took ms; preempted: $preempted ($notes); survivors: $survivors${left:+; still terminating: $left}"
  else
    fail "preemption: exactly two victims evicted on one card, the preemptor binds there" \
      "hi on \"$node\"; Preempted events for: \"$preempted\"; survivors: $survivors"
  fi
  if [[ $survivors == *low-3* && $preempted != *low-3* ]]; then
    pass "preemption: the PDB-protected pod is spared when another choice exists" \
      "low-3 (app=protected, PDB guard minAvailable 1) kept; victims: $preempted"
  else
    fail "preemption: the PDB-protected pod is spared when another choice exists" "victims: $preempted; survivors: $survivors"
  fi
  if [[ $nominated == *"preempting 2 pods on node $NODE"* && $rounds == 1 ]]; then
    pass "preemption: the preemptor's message names how many pods on which node" "$nominated (nominated once)"
  else
    fail "preemption: the preemptor's message names how many pods on which node" \
      "nominations: $rounds; hi's events: $(kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.involvedObject.name == "hi") | "\(.reason): \(.message)"] | join(" | ")')"
  fi
  # kube-scheduler's series under gpuslice_scheduler_: one preemption of two victims, its attempts, and the
  # nomination no longer in flight once the preemptor is bound.
  m1=$(e2e_gpuslice_metrics a)
  d_n=$(( $(metric "$m1" gpuslice_scheduler_preemption_victims_count) - $(metric "$m0" gpuslice_scheduler_preemption_victims_count) ))
  d_sum=$(( $(metric "$m1" gpuslice_scheduler_preemption_victims_sum) - $(metric "$m0" gpuslice_scheduler_preemption_victims_sum) ))
  d_att=$(( $(metric "$m1" gpuslice_scheduler_preemption_attempts_total) - $(metric "$m0" gpuslice_scheduler_preemption_attempts_total) ))
  in_flight=$(metric "$m1" gpuslice_scheduler_preemptions_in_flight)
  if [[ $d_n == 1 && $d_sum == 2 && $d_att -ge 1 && $in_flight == 0 ]]; then
    pass "preemption: /metrics counts the preemption (attempts, victims, nominations in flight)" \
      "+$d_att gpuslice_scheduler_preemption_attempts_total, gpuslice_scheduler_preemption_victims +$d_n observation of $d_sum victims, gpuslice_scheduler_preemptions_in_flight $in_flight"
  else
    fail "preemption: /metrics counts the preemption (attempts, victims, nominations in flight)" \
      "attempts +$d_att, victims count +$d_n sum +$d_sum, in flight $in_flight"
  fi
  used=0
  for p in $(kubectl -n "$NS" get pods -o jsonpath='{.items[*].metadata.name}'); do
    a=$(pod_annotation "$NS" "$p" hami.io/vgpu-devices-allocated)
    [[ -n $a && -z $(pod_field "$NS" "$p" '{.metadata.deletionTimestamp}') ]] &&
      used=$((used + $(awk -F, 'NF >= 4 {print $3}' <<<"${a%%:*}")))
  done
  if ((used <= 81920)); then
    pass "preemption: the card is not over-committed after preemption" "$used of 81920 MiB allocated on $NODE"
  else
    fail "preemption: the card is not over-committed after preemption" "$used MiB allocated on an 81920 MiB card"
  fi
else
  fail "preemption: exactly two victims evicted on one card, the preemptor binds there" \
    "hi not bound after 60 s: $(pod_reason "$NS" hi) $(pod_message "$NS" hi); nominatedNodeName=$(pod_field "$NS" hi '{.status.nominatedNodeName}'); low left: $(low_left)"
fi

#!/usr/bin/env bash
# Issue 13 item 3 on the real lab: kill -9 of gpuslice mid-preemption, restart, and nothing more is evicted.
# On tenant-a's one A100-80GB (81920 MiB), four 20000 MiB pods of priority 10 fill the card. Each carries a
# finalizer the test holds (e2e.gpuslice.io/hold), so a preempted victim stays Terminating: the lab's kwok deletes
# a terminating pod at once whatever its terminationGracePeriodSeconds (its pod/fast pod-delete Stage, lab/lab.sh,
# selects deletionTimestamp set and no finalizers), the way preemption_test.sh's victims vanish. A 40000 MiB pod
# of priority 1000 arrives; once gpuslice has nominated it and given two victims DisruptionTarget and a graceful
# delete, gpuslice is SIGKILLed and restarted (the lab's own start command, as restart_test.sh). Checked from the
# API and from /metrics of both incarnations:
#   - the first incarnation counted one preemption of two victims (gpuslice_scheduler_preemption_victims), a
#     nomination in flight, attempts;
#   - the restarted one reads the nomination back and holds it (gpuslice_scheduler_preemptions_in_flight 1),
#     preempts nothing (its victims histogram stays empty): still exactly two pods with DisruptionTarget and a
#     deletionTimestamp, two Preempted events, the preemptor unbound with status.nominatedNodeName kept;
#   - when the test releases the two victims, the preemptor binds on that node; the two survivors are untouched;
#   - no card over-committed (sums of allocations, and the independent accountant).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-preemption-restart
HOLD=e2e.gpuslice.io/hold
release_all() {
  local p
  for p in $(kubectl -n "$NS" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
    kubectl -n "$NS" patch pod "$p" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  done
}
cleanup() {
  use_tenant a
  # gpuslice must be running again whatever happened above (its webhook guards pod updates).
  lab_pid a gpuslice >/dev/null || "$LAB" start a gpuslice >/dev/null 2>&1
  release_all
  e2e_cleanup
  use_tenant a
  kubectl delete priorityclass e2e-restart-low e2e-restart-high --ignore-not-found >/dev/null 2>&1
}
trap cleanup EXIT

section "kill -9 of gpuslice mid-preemption, restart (tenant-a)"
e2e_ns a "$NS" || { fail "preemption restart: namespace $NS" "kubectl create namespace failed"; exit 1; }
kubectl apply -f - >/dev/null <<'YAML' || { fail "preemption restart: PriorityClasses" "kubectl apply failed"; exit 1; }
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-restart-low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: e2e-restart-high}
value: 1000
YAML

# prio_pod NAME MEM CLASS [hold]: a GPU pod of MEM MiB with priorityClassName CLASS (and the test's finalizer).
prio_pod() {
  local fin=""
  [[ ${4:-} == hold ]] && fin="\n  finalizers: [${HOLD//\//\\/}]"
  gpu_pod "$1" "$2" - | sed "s/^spec:/spec:\n  priorityClassName: $3/" | sed "s/^metadata:/metadata:$fin/" |
    kubectl -n "$NS" apply -f - >/dev/null 2>&1
}
pods_json() { kubectl -n "$NS" get pods -o json; }
# disrupted: "name,name" of the pods with DisruptionTarget=True (PreemptionByScheduler) and a deletionTimestamp.
disrupted() {
  pods_json | jq -r '[.items[] | select(.metadata.deletionTimestamp != null and ([.status.conditions[]? |
    select(.type == "DisruptionTarget" and .status == "True" and .reason == "PreemptionByScheduler")] | length > 0))
    | .metadata.name] | sort | join(",")'
}
# touched: "name,name" of the pods with a deletionTimestamp or any DisruptionTarget condition.
touched() {
  pods_json | jq -r '[.items[] | select(.metadata.deletionTimestamp != null or
    ([.status.conditions[]? | select(.type == "DisruptionTarget")] | length > 0)) | .metadata.name] | sort | join(",")'
}
preempted_events() {
  kubectl -n "$NS" get events -o json | jq -r '[.items[] | select(.reason == "Preempted") | .involvedObject.name] | sort | join(",")'
}
# metric TEXT NAME: a sample of a /metrics text ("absent" when not there).
metric() { awk -v m="$2" 'index($0, m " ") == 1 {print $NF; f = 1} END {if (!f) print "absent"}' <<<"$1"; }
VICTIMS_N=gpuslice_scheduler_preemption_victims_count
VICTIMS_SUM=gpuslice_scheduler_preemption_victims_sum
ATTEMPTS=gpuslice_scheduler_preemption_attempts_total
IN_FLIGHT=gpuslice_scheduler_preemptions_in_flight
series() { local t=$1; printf 'attempts %s, victims count %s sum %s, in flight %s' "$(metric "$t" $ATTEMPTS)" \
  "$(metric "$t" $VICTIMS_N)" "$(metric "$t" $VICTIMS_SUM)" "$(metric "$t" $IN_FLIGHT)"; }

# The card full: four 20000 MiB pods of priority 10, each held by the finalizer once deleted.
ok=1
for i in 0 1 2 3; do
  prio_pod "low-$i" 20000 e2e-restart-low hold || ok=0
  wait_bound "$NS" "low-$i" 30 || ok=0
  sleep 1  # distinct start times: the victims are the two latest (low-2, low-3)
done
NODE=$(pod_node "$NS" low-0)
nodes=$(pods_json | jq -r '[.items[].spec.nodeName] | unique | join(",")')
if ((ok)) && [[ -n $NODE && $nodes == "$NODE" && $(pod_field "$NS" low-0 '{.metadata.finalizers[0]}') == "$HOLD" ]]; then
  pass "preemption restart: a card full of low-priority pods, each held by a finalizer" \
    "4 x 20000 MiB of priority $(pod_field "$NS" low-0 '{.spec.priority}') on $NODE, finalizer $HOLD"
else
  fail "preemption restart: a card full of low-priority pods, each held by a finalizer" \
    "bound: $(kubectl -n "$NS" get pods -o wide --no-headers | xargs); nodes: $nodes"
  exit 1
fi

pid=$(lab_pid a gpuslice) || { fail "preemption restart: gpuslice running" "no PID in $LAB_STATE/pids/a-gpuslice.pid"; exit 1; }
m0=$(e2e_gpuslice_metrics a)
prio_pod hi 40000 e2e-restart-high
preempting() { [[ $(pod_field "$NS" hi '{.status.nominatedNodeName}') == "$NODE" && $(disrupted) == *,* ]]; }
if wait_for 60 preempting; then
  victims=$(disrupted)
  pass "preemption restart: the preemptor is nominated, two victims are terminating with DisruptionTarget" \
    "hi nominatedNodeName=$NODE; terminating with DisruptionTarget=True (PreemptionByScheduler): $victims; message: $(pod_message "$NS" hi)"
else
  fail "preemption restart: the preemptor is nominated, two victims are terminating with DisruptionTarget" \
    "hi nominatedNodeName=$(pod_field "$NS" hi '{.status.nominatedNodeName}'); disrupted: $(disrupted); touched: $(touched); $(pod_message "$NS" hi)"
  exit 1
fi
sleep 1  # anything more the first incarnation would evict is evicted by now
m1=$(e2e_gpuslice_metrics a)
d_n=$(( $(metric "$m1" $VICTIMS_N) - $(metric "$m0" $VICTIMS_N) ))
d_sum=$(( $(metric "$m1" $VICTIMS_SUM) - $(metric "$m0" $VICTIMS_SUM) ))
d_att=$(( $(metric "$m1" $ATTEMPTS) - $(metric "$m0" $ATTEMPTS) ))
if [[ $d_n == 1 && $d_sum == 2 && $(metric "$m1" $IN_FLIGHT) == 1 && $d_att -ge 1 ]]; then
  pass "preemption restart: /metrics counts one preemption of two victims, one nomination in flight" \
    "PID $pid: $(series "$m1") (during the test: +$d_att attempts, +$d_n preemption, +$d_sum victims)"
else
  fail "preemption restart: /metrics counts one preemption of two victims, one nomination in flight" \
    "before: $(series "$m0"); after: $(series "$m1")"
fi

# The crash, while the victims terminate and the preemptor waits for them.
kill -KILL "$pid" 2>/dev/null && killed=1 || killed=0
gone() { ! lab_pid a gpuslice >/dev/null; }
wait_for 10 gone
"$LAB" start a gpuslice >/dev/null 2>&1
newpid=$(lab_pid a gpuslice)
t0=$(now_ms)
# The new incarnation leads once the old Lease expires, reads hi's nominatedNodeName and holds it.
holding() { m2=$(e2e_gpuslice_metrics a) && [[ $(metric "$m2" $IN_FLIGHT) == 1 ]]; }
if ((killed)) && [[ -n $newpid && $newpid != "$pid" ]] && wait_for 90 holding; then
  pass "preemption restart: gpuslice SIGKILLed mid-preemption, restarted, holds the nomination it reads back" \
    "SIGKILL PID $pid with $victims terminating; new PID $newpid holds 1 nomination after $(( $(now_ms) - t0 )) ms; lease holder $(lease_holder)"
else
  fail "preemption restart: gpuslice SIGKILLed mid-preemption, restarted, holds the nomination it reads back" \
    "killed=$killed new PID=${newpid:-none}; new /metrics: $(series "$(e2e_gpuslice_metrics a)")"
fi
sleep 10  # several attempts of the restarted scheduler on hi (backoff at most scheduler.maxBackoff)
m3=$(e2e_gpuslice_metrics a)
node_now=$(pod_node "$NS" hi)
if [[ $(touched) == "$victims" && $(disrupted) == "$victims" && $(preempted_events) == "$victims" && -z $node_now &&
      $(pod_field "$NS" hi '{.status.nominatedNodeName}') == "$NODE" && $(metric "$m3" $VICTIMS_N) == 0 &&
      $(metric "$m3" $ATTEMPTS) -ge 1 ]]; then
  pass "preemption restart: the restarted scheduler evicts nothing more and keeps the preemptor nominated" \
    "touched: $victims only; Preempted events for: $(preempted_events); hi unbound, nominatedNodeName=$NODE, message: $(pod_message "$NS" hi); new /metrics: $(series "$m3")"
else
  fail "preemption restart: the restarted scheduler evicts nothing more and keeps the preemptor nominated" \
    "touched: $(touched) (want $victims); Preempted events: $(preempted_events); hi node=\"$node_now\" nominated=$(pod_field "$NS" hi '{.status.nominatedNodeName}'); new /metrics: $(series "$m3")"
fi

# The victims' "kubelet" finishes: the finalizer goes, the pods go, the preemptor binds on the nominated node.
t1=$(now_ms)
for v in ${victims//,/ }; do
  kubectl -n "$NS" patch pod "$v" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
done
if wait_bound "$NS" hi 60; then
  took=$(( $(now_ms) - t1 ))
  sleep 2
  survivors=$(pods_json | jq -r '[.items[] | select(.metadata.name != "hi" and .metadata.deletionTimestamp == null)
    | .metadata.name] | sort | join(",")')
  left=$(pods_json | jq -r '[.items[] | .metadata.name] | sort | join(",")')
  if [[ $(pod_node "$NS" hi) == "$NODE" && $(touched) == "" && $(preempted_events) == "$victims" &&
        $(tr ',' '\n' <<<"$survivors" | grep -c .) == 2 && $left == "hi,$survivors" ]]; then
    pass "preemption restart: once the victims are gone the preemptor binds on its node; nothing else evicted" \
      "hi bound on $NODE $took ms after the release; survivors $survivors untouched; Preempted events for: $(preempted_events)"
  else
    fail "preemption restart: once the victims are gone the preemptor binds on its node; nothing else evicted" \
      "hi on $(pod_node "$NS" hi); pods: $left; touched: $(touched); Preempted events: $(preempted_events)"
  fi
else
  fail "preemption restart: once the victims are gone the preemptor binds on its node; nothing else evicted" \
    "hi not bound 60 s after the release: $(pod_reason "$NS" hi) $(pod_message "$NS" hi); pods: $(kubectl -n "$NS" get pods --no-headers | xargs)"
fi
settled() { m4=$(e2e_gpuslice_metrics a) && [[ $(metric "$m4" $IN_FLIGHT) == 0 ]]; }
if wait_for 15 settled && [[ $(metric "$m4" $VICTIMS_N) == 0 ]]; then
  pass "preemption restart: /metrics of the restarted scheduler: no preemption, no nomination left" "$(series "$m4")"
else
  fail "preemption restart: /metrics of the restarted scheduler: no preemption, no nomination left" \
    "$(series "$(e2e_gpuslice_metrics a)")"
fi
if out=$(allocation_report); then
  pass "preemption restart: no card over-committed" "$(grep -F "$NODE" <<<"$out" | tr '\n' ';')"
else
  fail "preemption restart: no card over-committed" "$out"
fi
accountant_check "preemption restart" --namespace "$NS" --settle 20

#!/usr/bin/env bash
# Issue 4 item 6: crash safety. On tenant-a, two extra simulated nodes (4 x A100-80GB each, label
# gpuslice.io/e2e=restart) take a burst of 30 GPU pods (20000 MiB / 30 %, nodeSelector on that label: 8 cards x 3
# = 24 fit, 6 cannot). gpuslice is killed with SIGKILL in the middle of the burst, the rest of the burst is created
# while it is down, then it is restarted (lab/lab.sh start a gpuslice). From the API alone: every pod is bound or
# explained (PodScheduled=False Unschedulable with a message), exactly the 24 that fit are bound, no card is
# over-committed, every bound pod reaches bind-phase=success and no node lock is left.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
# shellcheck source=lab/nodes.sh
source "$(dirname "$0")/../../lab/nodes.sh"
NS=e2e-restart
PODS=${E2E_RESTART_PODS:-30}
NODES=(e2e-restart-0 e2e-restart-1)
CAPACITY=24   # 2 nodes x 4 cards x 3 pods of 30 %
cleanup() {
  e2e_cleanup
  use_tenant a
  kubectl delete node "${NODES[@]}" --ignore-not-found --wait=false >/dev/null 2>&1
  # gpuslice must be running again whatever happened above.
  lab_pid a gpuslice >/dev/null || "$LAB" start a gpuslice >/dev/null 2>&1
}
trap cleanup EXIT

section "kill -9 of gpuslice mid-burst, restart, check from the API (tenant-a)"
e2e_ns a "$NS" || { fail "restart: namespace $NS" "kubectl create namespace failed"; exit 1; }
for n in "${NODES[@]}"; do
  kubectl delete node "$n" --ignore-not-found >/dev/null 2>&1
  kwok_node "$n" "$(a100_register "GPU-$n")" 40 64 512Gi "gpuslice.io/e2e: restart" |
    kubectl create -f - >/dev/null || { fail "restart: node $n" "kubectl create node failed"; exit 1; }
done
node_ready() { [[ $(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
for n in "${NODES[@]}"; do
  wait_for 30 node_ready "$n" || { fail "restart: node $n Ready" "kwok did not make it Ready in 30 s"; exit 1; }
done

pid=$(lab_pid a gpuslice) || { fail "restart: gpuslice running before the test" "no PID in $LAB_STATE/pids/a-gpuslice.pid"; exit 1; }
holder_before=$(lease_holder)

# The burst: 4 concurrent creators, one create per pod (explicit schedulerName, so creation succeeds while the
# webhook is down too: the test is about the scheduler's state, not admission).
burst_pod() {
  gpu_pod "$1" 20000 30 | sed 's/^spec:/spec:\n  schedulerName: gpuslice-scheduler\n  nodeSelector: {gpuslice.io\/e2e: restart}/'
}
export -f burst_pod gpu_pod
bound_count() { kubectl -n "$NS" get pods -o json | jq '[.items[] | select(.spec.nodeName != null)] | length'; }
created_count() { kubectl -n "$NS" get pods -o name | grep -c .; }
errs=$(mktemp) watchlog=$(mktemp)
# Watches on the burst's pods and on the two nodes: the kill is aimed at a moment a bind is in progress, i.e. a
# node carries hami.io/mutex.lock (taken before the Binding, released by the device agent after Allocate), so
# the new incarnation finds either a lock whose owner was never bound (abandoned: taken over after the grace) or
# a bound pod still allocating. A pod never carries gpuslice's allocation unbound (it travels in the Binding); if
# one is seen anyway, that is the moment too. If neither is seen by the time a third of the burst exists, the
# kill happens then.
nodewatch=$(mktemp)
kubectl -n "$NS" get pods -w --request-timeout=120s \
  -o jsonpath='{.metadata.name} [{.spec.nodeName}] [{.metadata.annotations.hami\.io/vgpu-node}]{"\n"}' >"$watchlog" 2>/dev/null &
watcher=$!
kubectl get nodes -w --request-timeout=120s -l gpuslice.io/e2e=restart \
  -o jsonpath='{.metadata.name} [{.metadata.annotations.hami\.io/mutex\.lock}]{"\n"}' >"$nodewatch" 2>/dev/null &
nodewatcher=$!
( seq 1 "$PODS" | xargs -P 4 -I{} bash -c 'burst_pod burst-{} | kubectl -n "$0" create -f - >/dev/null 2>>"$1" || echo "burst-{}" >>"$1"' "$NS" "$errs" ) &
creator=$!
in_flight() { grep -m1 -E '^[^ ]+ \[\] \[[^]]+\]$' "$watchlog"; }
locked() { grep -m1 -E '^[^ ]+ \[[^]]+\]$' "$nodewatch"; }
enough_created() { (($(awk '{print $1}' "$watchlog" | sort -u | grep -c .) >= PODS / 3)); }
moment=""
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  if hit=$(in_flight); then n=${hit##*[}; moment="while ${hit%% *} was annotated for ${n%]} but not yet bound"; break; fi
  if hit=$(locked); then l=${hit##*[}; moment="while ${hit%% *} was locked (${l%]})"; break; fi
  if enough_created; then moment="with no pod caught between annotate and bind"; break; fi
  sleep 0.02
done
kill -KILL "$pid" 2>/dev/null && killed=1 || killed=0
kill "$watcher" "$nodewatcher" 2>/dev/null; wait "$watcher" "$nodewatcher" 2>/dev/null
killed_created=$(created_count)
((killed)) && killed_bound=$(bound_count) || killed_bound=-1
note "kill -9 gpuslice (PID $pid) $moment; then: $killed_created/$PODS pods created, $killed_bound bound"
rm -f "$watchlog" "$nodewatch"
wait "$creator"
created=$(created_count)
create_errors=("$(cat "$errs")"); rm -f "$errs"
# Restart (the lab's own start command, same flags) once the whole burst exists.
sleep 1
"$LAB" start a gpuslice >/dev/null 2>&1
newpid=$(lab_pid a gpuslice)
note "restarted gpuslice: PID ${newpid:-none} (lease holder before the kill: ${holder_before:-none})"
if ((killed_bound >= 0 && killed_bound < PODS)) && [[ -n $newpid && $newpid != "$pid" ]]; then
  pass "restart: gpuslice killed mid-burst and restarted" \
    "SIGKILL PID $pid $moment ($killed_bound bound of $killed_created created), $((created - killed_created)) more created while down; new PID $newpid"
else
  fail "restart: gpuslice killed mid-burst and restarted" "killed_bound=$killed_bound new PID=${newpid:-none}"
fi
((created == PODS)) || fail "restart: all $PODS pods created" "$created created; ${create_errors[*]}"

# Settled: every pod either bound or explained.
settled() {
  kubectl -n "$NS" get pods -o json | jq -e --argjson n "$PODS" '
    [.items[] | select(.spec.nodeName != null or
      ([.status.conditions[]? | select(.type == "PodScheduled" and .status == "False" and .reason == "Unschedulable"
        and (.message // "") != "")] | length > 0))] | length == $n' >/dev/null
}
t0=$(now_ms)
if wait_for 90 settled; then
  note "settled $(( $(now_ms) - t0 )) ms after the restart command"
fi
# A slice freed by a rejected pod goes to a pending one at its next attempt: give that a moment.
live_bound() { kubectl -n "$NS" get pods -o json | jq '[.items[] | select(.spec.nodeName != null and .status.phase != "Failed")] | length'; }
at_capacity() { (($(live_bound) >= CAPACITY)); }
wait_for 30 at_capacity
json=$(kubectl -n "$NS" get pods -o json)
# A pod the device agent's Allocate refused is rejected as kubelet does (Failed, UnexpectedAdmissionError): it
# holds nothing, and its slice goes to another pod. It is explained, not bound.
bound=$(jq '[.items[] | select(.spec.nodeName != null and .status.phase != "Failed")] | length' <<<"$json")
rejected=$(jq -r '[.items[] | select(.status.phase == "Failed") | "\(.metadata.name): \(.status.message // "")"] | join("; ")' <<<"$json")
[[ -n $rejected ]] && note "rejected at admission by the device agent (kubelet's rule): $rejected"
nrejected=$(jq '[.items[] | select(.status.phase == "Failed" and .status.reason == "UnexpectedAdmissionError")] | length' <<<"$json")
explained=$(jq '[.items[] | select(.spec.nodeName == null) | select([.status.conditions[]? | select(.type == "PodScheduled"
  and .reason == "Unschedulable" and (.message // "") != "")] | length > 0)] | length' <<<"$json")
lost=$(jq -r '[.items[] | select(.spec.nodeName == null) | select([.status.conditions[]? | select(.type == "PodScheduled"
  and .reason == "Unschedulable")] | length == 0) | .metadata.name] | join(",")' <<<"$json")
msg=$(jq -r '[.items[] | select(.spec.nodeName == null) | .status.conditions[]? | select(.type == "PodScheduled") | .message][0] // ""' <<<"$json")
if ((bound + explained + nrejected == PODS)) && [[ -z $lost ]]; then
  pass "restart: every pod bound or explained (none lost)" "$bound bound, $explained Pending with a reason, e.g. \"$msg\""
else
  fail "restart: every pod bound or explained (none lost)" "$bound bound, $explained explained, neither: ${lost:-?}"
fi
if ((bound == CAPACITY)); then
  pass "restart: exactly the capacity is bound" "$bound bound = 2 nodes x 4 cards x 3 slices of 30%"
else
  fail "restart: exactly the capacity is bound" "$bound bound, want $CAPACITY"
fi
if out=$(allocation_report); then
  pass "restart: no card double-booked (sums of hami.io/vgpu-devices-allocated per UUID)" "$(grep -F e2e-restart <<<"$out" | tr '\n' ';')"
else
  fail "restart: no card double-booked (sums of hami.io/vgpu-devices-allocated per UUID)" "$out"
fi
# Every bound pod's annotations agree with its binding.
mismatch=$(jq -r '[.items[] | select(.spec.nodeName != null and .status.phase != "Failed") | select(.metadata.annotations["hami.io/vgpu-node"] != .spec.nodeName
  or ((.metadata.annotations["hami.io/vgpu-devices-allocated"] // "") | test("^GPU-[^,]+,NVIDIA,20000,30:;$") | not))
  | .metadata.name] | join(",")' <<<"$json")
[[ -z $mismatch ]] && pass "restart: bound pods carry matching vgpu-node and devices-allocated" "all $bound" ||
  fail "restart: bound pods carry matching vgpu-node and devices-allocated" "mismatch: $mismatch"
all_success() {
  kubectl -n "$NS" get pods -o json | jq -e '[.items[] | select(.spec.nodeName != null and .status.phase != "Failed")
    | select(.metadata.annotations["hami.io/bind-phase"] != "success")] | length == 0' >/dev/null
}
# A lock the killed incarnation took for a pod it never bound is taken over once 60 s old (kAbandonedLockGrace,
# scheduler/node_lock.h) if that pod went elsewhere; HAMi's rule alone would keep it for 5 minutes.
if wait_for 30 all_success && wait_for 75 no_node_locks; then
  pass "restart: all bound pods reach bind-phase=success, no node lock left" "locks: none"
else
  fail "restart: all bound pods reach bind-phase=success, no node lock left" \
    "not success: $(kubectl -n "$NS" get pods -o json | jq -r '[.items[] | select(.spec.nodeName != null)
      | select(.metadata.annotations["hami.io/bind-phase"] != "success") | "\(.metadata.name)=\(.metadata.annotations["hami.io/bind-phase"])"] | join(",")'); locks: $(node_locks | xargs)"
fi
# The independent accountant's verdict (tests/e2e/accountant.py, HAMi's counting, from the API alone).
accountant_check restart --namespace "$NS" --settle 30

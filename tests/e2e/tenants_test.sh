#!/usr/bin/env bash
# Issue 5 item 5: the ten checks of the two-tenant lab (tenant-a: one A100-80GB; tenant-b: two L4), each through
# the tenant's real kube-apiserver and its Konnectivity tunnel. Each prints PASS/FAIL with evidence; with
# E2E_TABLE=FILE each also appends "check<TAB>tenant<TAB>result<TAB>evidence" (lab/demo.sh's summary table).
#   E2E_CHECKS="1 2 9"   run only these checks (default: all ten, in order; 10 runs inside 9)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
# Whatever happens, leave tenant-a's Konnectivity agent running (check 9 stops it).
AGENT_STOPPED=0
on_exit() { ((AGENT_STOPPED)) && "$LAB" start a agent >/dev/null 2>&1; e2e_cleanup; }
trap on_exit EXIT
CHECKS=" ${E2E_CHECKS:-1 2 3 4 5 6 7 8 9 10} "
want() { [[ $CHECKS == *" $1 "* ]]; }
NSA=e2e-tenants-a NSB=e2e-tenants-b
BIN=$(gpuslice_bin)

e2e_ns a "$NSA" || { fail "tenants: namespace $NSA" "kubectl create namespace failed"; exit 1; }
e2e_ns b "$NSB" || { fail "tenants: namespace $NSB" "kubectl create namespace failed"; exit 1; }
ns_of() { [[ $1 == a ]] && echo "$NSA" || echo "$NSB"; }

# ---- (1) through the tunnel, a GPU pod in each tenant comes back mutated and is bound with HAMi annotations ---
if want 1; then
  section "check 1: GPU pod through each tenant's tunnel"
  for t in a b; do
    use_tenant "$t"; ns=$(ns_of "$t")
    before=$(tunnel_packets "$t")
    out=$(apply_pod "$ns" tunnel-probe 2000 10)
    after=$(tunnel_packets "$t")
    sched=$(pod_field "$ns" tunnel-probe '{.spec.schedulerName}')
    req=$(pod_annotation "$ns" tunnel-probe gpuslice.io/gpu-request)
    agent=$(agent_connected "$t" && echo connected || echo "NOT connected")
    if [[ $sched == "$SCHEDULER_NAME" && -n $req && -n $before && -n $after ]] && ((after > before)) &&
       wait_bound "$ns" tunnel-probe 30 &&
       [[ -n $(pod_annotation "$ns" tunnel-probe hami.io/vgpu-devices-allocated) ]]; then
      check_result "check 1" "tenant-$t" ok "GPU pod mutated through the tunnel and bound" \
        "$ns/tunnel-probe: tunnel packets $before -> $after, schedulerName=$sched, bound to $(pod_node "$ns" tunnel-probe) as $(pod_annotation "$ns" tunnel-probe hami.io/vgpu-devices-allocated) gpu-request=$req"
    else
      check_result "check 1" "tenant-$t" ko "GPU pod mutated through the tunnel and bound" \
        "$out; schedulerName=\"$sched\" gpu-request=\"$req\" node=\"$(pod_node "$ns" tunnel-probe)\" PodScheduled: $(pod_message "$ns" tunnel-probe); proxy-server packets from the API server ${before:-?} -> ${after:-?} (agent $agent)"
    fi
    kubectl -n "$ns" delete pod tunnel-probe --wait=true --timeout=30s >/dev/null 2>&1
  done
fi

# ---- (2)(3)(4) the seed's single-card scenario on tenant-a -------------------------------------------------
if want 2 || want 3 || want 4; then
  section "checks 2-4: seed scenario on tenant-a's A100"
  use_tenant a
  seed_scenario "$NSA" "check 2" "check 3" "check 4"
  kubectl -n "$NSA" delete pods --all --wait=true --timeout=30s >/dev/null 2>&1
fi

# ---- (5) tenant-b: spread over the two L4, then a 2-GPU pod gets both cards once free ----------------------
if want 5; then
  section "check 5: tenant-b spread over two L4, then nvidia.com/gpu: 2"
  use_tenant b
  why=() ev=""
  apply_pod "$NSB" l4-a 20000 - >/dev/null; apply_pod "$NSB" l4-b 20000 - >/dev/null
  if wait_bound "$NSB" l4-a 30 && wait_bound "$NSB" l4-b 30; then
    ua=$(pod_uuids "$NSB" l4-a) ub=$(pod_uuids "$NSB" l4-b)
    [[ -n $ua && -n $ub && $ua != "$ub" ]] || why+=("l4-a on \"$ua\", l4-b on \"$ub\": not two different cards")
    ev="l4-a -> $ua, l4-b -> $ub (spread);"
  else
    why+=("l4-a/l4-b not both bound: $(pod_message "$NSB" l4-a) / $(pod_message "$NSB" l4-b)")
  fi
  # Two whole cards (no gpumem: 100 % of each, HAMi's default): cannot fit while l4-a/l4-b hold 20000 MiB each.
  apply_pod "$NSB" dual 23034 - 2 >/dev/null
  if wait_unschedulable "$NSB" dual 20; then
    ev+=" dual Pending while they run: $(pod_message "$NSB" dual);"
  else
    why+=("dual not reported Unschedulable while both L4 are busy (node=\"$(pod_node "$NSB" dual)\")")
  fi
  t0=$(now_ms)
  kubectl -n "$NSB" delete pod l4-a l4-b --wait=false >/dev/null 2>&1
  if wait_bound "$NSB" dual 30; then
    ud=$(pod_uuids "$NSB" dual)
    read -r -a uds <<<"$ud"
    ((${#uds[@]} == 2)) && [[ ${uds[0]} != "${uds[1]}" ]] || why+=("dual holds \"$ud\": want two different UUIDs")
    ev+=" after deleting them dual bound in $(( $(now_ms) - t0 )) ms to $ud"
  else
    why+=("dual not bound 30 s after l4-a/l4-b were deleted: $(pod_message "$NSB" dual)")
  fi
  if ((${#why[@]} == 0)); then
    check_result "check 5" tenant-b ok "two 20000 MiB pods on different L4s; gpu: 2 gets both once free" "$ev"
  else
    check_result "check 5" tenant-b ko "two 20000 MiB pods on different L4s; gpu: 2 gets both once free" "${why[*]}"
  fi
  kubectl -n "$NSB" delete pods --all --wait=true --timeout=30s >/dev/null 2>&1
fi

# ---- (6) nodes / (7) pods: each tenant sees only its own --------------------------------------------------
if want 6 || want 7; then
  section "checks 6-7: isolation of nodes and pods"
  use_tenant a; nodes_a=$(kubectl get nodes -o jsonpath='{.items[*].metadata.name}')
  use_tenant b; nodes_b=$(kubectl get nodes -o jsonpath='{.items[*].metadata.name}')
  common=$(comm -12 <(tr ' ' '\n' <<<"$nodes_a" | sort) <(tr ' ' '\n' <<<"$nodes_b" | sort) | xargs)
  if want 6; then
    for t in a b; do
      mine=$([[ $t == a ]] && echo "$nodes_a" || echo "$nodes_b")
      other=$([[ $t == a ]] && echo "$nodes_b" || echo "$nodes_a")
      expect=$([[ $t == a ]] && echo tenant-a-gpu-0 || echo tenant-b-gpu-0)
      foreign=$([[ $t == a ]] && echo tenant-b-gpu-0 || echo tenant-a-gpu-0)
      if [[ -z $common && -n $other && " $mine " == *" $expect "* && " $mine " != *" $foreign "* ]]; then
        check_result "check 6" "tenant-$t" ok "lists only its own nodes" "kubectl get nodes: $mine"
      else
        check_result "check 6" "tenant-$t" ko "lists only its own nodes" "own: $mine; other tenant's: $other; in both: ${common:-none}"
      fi
    done
  fi
  if want 7; then
    use_tenant a; apply_pod "$NSA" marker-a 1000 5 >/dev/null
    use_tenant b; apply_pod "$NSB" marker-b 1000 5 >/dev/null
    for t in a b; do
      use_tenant "$t"
      mine=$(kubectl get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {end}')
      own=$([[ $t == a ]] && echo "$NSA/marker-a" || echo "$NSB/marker-b")
      other=$([[ $t == a ]] && echo "$NSB/marker-b" || echo "$NSA/marker-a")
      other_ns=$([[ $t == a ]] && echo "$NSB" || echo "$NSA")
      if [[ " $mine " == *" $own "* && " $mine " != *" $other "* ]] && ! kubectl get namespace "$other_ns" >/dev/null 2>&1; then
        check_result "check 7" "tenant-$t" ok "lists only its own pods" "kubectl get pods -A: ${mine% } (no $other, no namespace $other_ns)"
      else
        check_result "check 7" "tenant-$t" ko "lists only its own pods" "kubectl get pods -A: $mine; own marker $own, other's $other"
      fi
    done
    use_tenant a; kubectl -n "$NSA" delete pod marker-a --wait=false >/dev/null 2>&1
    use_tenant b; kubectl -n "$NSB" delete pod marker-b --wait=false >/dev/null 2>&1
  fi
fi

# ---- (8) each gpuslice sees only its own GPU capacity; no node lock left (none is ever released by hand) ----
if want 8; then
  section "check 8: per-tenant GPU capacity and node locks"
  use_tenant a; uuids_a=$(kubectl get nodes -o json | jq -r '.items[].metadata.annotations["hami.io/node-nvidia-register"] // "[]" | fromjson | .[].id' | xargs)
  use_tenant b; uuids_b=$(kubectl get nodes -o json | jq -r '.items[].metadata.annotations["hami.io/node-nvidia-register"] // "[]" | fromjson | .[].id' | xargs)
  for t in a b; do
    mine=$([[ $t == a ]] && echo "$uuids_a" || echo "$uuids_b")
    other=$([[ $t == a ]] && echo "$uuids_b" || echo "$uuids_a")
    src="/metrics"
    text=$(e2e_gpuslice_metrics "$t")
    if [[ -z $text ]]; then src="log $LAB_STATE/logs/$t-gpuslice.log"; text=$(cat "$LAB_STATE/logs/$t-gpuslice.log" 2>/dev/null); fi
    seen=() leaked=()
    for u in $mine; do grep -qF "$u" <<<"$text" && seen+=("$u"); done
    for u in $other; do grep -qF "$u" <<<"$text" && leaked+=("$u"); done
    # Capacity gauges (device_uuid label) and the scheduler's node-lock counters, as evidence.
    gauges=$(grep -E '^gpuslice_scheduler_card_memory_bytes\{' <<<"$text" |
      sed -E 's/.*device_uuid="([^"]*)".*device_type="([^"]*)".*\} ([0-9.e+]+)$/\1 (\2) \3 B/' | xargs)
    lockops=$(grep -E '^gpuslice_scheduler_node_lock_operations_total\{' <<<"$text" |
      sed -E 's/.*operation="([^"]*)"\} ([0-9]+)/\1=\2/' | xargs)
    use_tenant "$t"
    locks=$(node_locks | xargs)
    agent_log=$LAB_STATE/logs/$t-mock-device-agent.log
    if [[ -n $mine && ${#seen[@]} -eq $(wc -w <<<"$mine") && ${#leaked[@]} -eq 0 && -z $locks ]]; then
      check_result "check 8" "tenant-$t" ok "gpuslice sees only its own GPU capacity; no node lock left" \
        "$src: card_memory_bytes ${gauges:-?}; none of $other; node locks: none left (gpuslice lock ops: ${lockops:-?})"
    else
      check_result "check 8" "tenant-$t" ko "gpuslice sees only its own GPU capacity; no node lock left" \
        "$src: own cards seen: ${seen[*]:-none} of $mine; other tenant's cards seen: ${leaked[*]:-none}; locks: ${locks:-none}"
    fi
  done
fi

# ---- (9) tenant-a's agent stopped: GPU pods refused by the guard, plain pods fine, tenant-b unaffected;
#      (10) doctor reports the broken tunnel, then a healthy path once the agent is back ----------------------
doctor() {  # tenant -> prints doctor output, returns its exit status
  "$BIN" doctor --kubeconfig "$(tenant_dir "$1")/admin.kubeconfig" 2>&1
}
if want 9 || want 10; then
  section "checks 9-10: tenant-a's Konnectivity agent stopped, then started again"
  pids_before=$(for c in apiserver proxy-server gpuslice mock-device-agent kwok; do echo "$c=$(lab_pid a "$c")"; done | xargs)
  AGENT_STOPPED=1
  "$LAB" stop a agent >/dev/null 2>&1
  agent_down() { ! agent_connected a; }
  wait_for 15 agent_down || note "proxy-server of tenant-a still reports an agent after 15 s"
  use_tenant a
  t0=$(now_ms)
  gpu_out=$(apply_pod "$NSA" gpu-while-down 2000 10); gpu_rc=$?
  gpu_ms=$(( $(now_ms) - t0 ))
  plain_out=$(plain_pod plain-while-down | kubectl -n "$NSA" apply -f - 2>&1); plain_rc=$?
  gpu_exists=$(kubectl -n "$NSA" get pod gpu-while-down -o name 2>/dev/null)
  use_tenant b
  apply_pod "$NSB" b-while-a-down 2000 10 >/dev/null
  b_ok=0
  [[ $(pod_field "$NSB" b-while-a-down '{.spec.schedulerName}') == "$SCHEDULER_NAME" ]] && wait_bound "$NSB" b-while-a-down 30 && b_ok=1
  b_ev="tenant-b b-while-a-down: schedulerName=$(pod_field "$NSB" b-while-a-down '{.spec.schedulerName}') node=$(pod_node "$NSB" b-while-a-down)"
  # (10) during the outage
  if want 10; then
    d_out=$(doctor a); d_rc=$?
    d_fail=$(grep -E '^FAIL ' <<<"$d_out" | awk '{print $2}' | xargs)
    d_cause=$(grep -m1 -E '^ +cause:' <<<"$d_out" | sed 's/^ *//')
  fi
  "$LAB" start a agent >/dev/null 2>&1 && AGENT_STOPPED=0
  use_tenant a
  wait_for 30 agent_connected a
  # The API server may need a moment to use the new agent: retry the create (bounded) until admitted.
  t0=$(now_ms)
  try_gpu_after() {
    kubectl -n "$NSA" delete pod gpu-after --ignore-not-found --wait=true --timeout=10s >/dev/null 2>&1
    apply_pod "$NSA" gpu-after 2000 10 >/dev/null && [[ $(pod_field "$NSA" gpu-after '{.spec.schedulerName}') == "$SCHEDULER_NAME" ]]
  }
  after_ok=0
  wait_for 30 try_gpu_after && wait_bound "$NSA" gpu-after 30 && after_ok=1
  after_ms=$(( $(now_ms) - t0 ))
  pids_after=$(for c in apiserver proxy-server gpuslice mock-device-agent kwok; do echo "$c=$(lab_pid a "$c")"; done | xargs)
  if want 9; then
    why=()
    ((gpu_rc != 0)) && [[ $gpu_out == *"gpuslice-scheduler-guard: refused GPU pod"* && -z $gpu_exists ]] ||
      why+=("GPU pod while agent down: rc=$gpu_rc exists=\"$gpu_exists\": $gpu_out")
    ((plain_rc == 0)) || why+=("plain pod while agent down: $plain_out")
    ((b_ok)) || why+=("tenant-b affected: $b_ev")
    ((after_ok)) || why+=("after agent start: gpu-after not mutated+bound ($(pod_message "$NSA" gpu-after))")
    [[ $pids_before == "$pids_after" ]] || why+=("something else restarted: before $pids_before, after $pids_after")
    if ((${#why[@]} == 0)); then
      check_result "check 9" tenant-a ok "agent stopped: guard refuses GPU pods, plain pods and tenant-b fine; agent back restores" \
        "refused in ${gpu_ms} ms: $(grep -oE 'gpuslice-scheduler-guard: refused GPU pod [^ ]*: spec.schedulerName is "[^"]*", want "[^"]*"' <<<"$gpu_out" | head -1); plain-while-down created; $b_ev; after start: gpu-after mutated+bound to $(pod_node "$NSA" gpu-after) in ${after_ms} ms; unchanged PIDs: $pids_after"
    else
      check_result "check 9" tenant-a ko "agent stopped: guard refuses GPU pods, plain pods and tenant-b fine; agent back restores" "${why[*]}"
    fi
  fi
  want 9 && accountant_check "check 9 (tunnel cut and restored)" --namespace "$NSA" --settle 30
  if want 10; then
    h_out=$(doctor a); h_rc=$?
    h_fail=$(grep -E '^FAIL ' <<<"$h_out" | awk '{print $2}' | xargs)
    if ((d_rc != 0)) && [[ " $d_fail " == *" tunnel "* ]] && ((h_rc == 0)); then
      check_result "check 10" tenant-a ok "gpuslice doctor reports the broken tunnel, then a healthy path" \
        "during: exit $d_rc, FAIL $d_fail; $d_cause | after: exit 0, $(grep -E '^doctor:' <<<"$h_out")"
    else
      check_result "check 10" tenant-a ko "gpuslice doctor reports the broken tunnel, then a healthy path" \
        "during: exit ${d_rc:-?} FAIL [${d_fail:-}] $(tail -1 <<<"${d_out:-}") | after: exit $h_rc FAIL [${h_fail}] $(tail -1 <<<"$h_out")"
      printf '%s\n' "--- doctor during the outage:" "${d_out:-}" "--- doctor after:" "$h_out" | sed 's/^/      /'
    fi
  fi
fi

#!/usr/bin/env bash
# Issue 4 item 7: two replicas with Lease leader election on tenant-a. The lab's gpuslice leads; a second
# replica (same configuration, its webhook and health endpoints on other ports, inside the same worker
# namespace) follows. SIGKILL of the leader: the follower takes the Lease over once it expires and binds a new
# GPU pod. Afterwards the lab's gpuslice is restarted and the second replica stopped.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
NS=e2e-failover
D=$(tenant_dir a)
R2_CONFIG=$D/gpuslice-replica2.yaml
R2_LOG=$LAB_STATE/logs/a-gpuslice-replica2.log
R2_PIDFILE=$LAB_STATE/pids/e2e-a-gpuslice-replica2.pid
R2_HEALTH=8081
r2_pid() { local p; p=$(cat "$R2_PIDFILE" 2>/dev/null) && [[ -n $p && -d /proc/$p ]] && echo "$p"; }
cleanup() {
  e2e_cleanup
  local p
  if p=$(r2_pid); then kill -TERM "$p" 2>/dev/null; sleep 2; kill -KILL "$p" 2>/dev/null; fi
  rm -f "$R2_PIDFILE"
  lab_pid a gpuslice >/dev/null || "$LAB" start a gpuslice >/dev/null 2>&1
}
trap cleanup EXIT

section "leader election: kill the leader, the follower takes over and binds (tenant-a)"
e2e_ns a "$NS" || { fail "failover: namespace $NS" "kubectl create namespace failed"; exit 1; }
leader_pid=$(lab_pid a gpuslice) || { fail "failover: lab gpuslice running" "no PID in $LAB_STATE/pids/a-gpuslice.pid"; exit 1; }
have_holder() { [[ -n $(lease_holder) ]]; }
wait_for 30 have_holder || { fail "failover: Lease gpuslice-system/gpuslice-scheduler held" "no holder after 30 s"; exit 1; }
h1=$(lease_holder)

# Replica 2: the lab's configuration with other listen ports (same namespace, same ServiceAccount identity).
python3 - "$D/gpuslice-config.yaml" "$R2_CONFIG" "$R2_HEALTH" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c.setdefault("webhook", {})["bindAddress"] = "127.0.0.1:9444"
c.setdefault("server", {})["healthBindAddress"] = "127.0.0.1:" + sys.argv[3]
open(sys.argv[2], "w").write(yaml.safe_dump(c, sort_keys=False))
PY
bin=$(gpuslice_bin)
setsid ip netns exec "$(netns_of a)" bash -c 'echo $$ >"$0"; exec "$@"' "$R2_PIDFILE" \
  "$bin" serve --config="$R2_CONFIG" --kubeconfig="$D/gpuslice.kubeconfig" >>"$R2_LOG" 2>&1 </dev/null &
r2_alive() { r2_pid >/dev/null; }
# metric PORT NAME_WITH_LABELS: a sample of a replica's /metrics (0 when absent).
metric() {
  in_ns a curl -sf --max-time 3 "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk -v m="$2" 'index($0, m " ") == 1 {print $NF; found = 1} END {if (!found) print 0}'
}
SCHEDULED='gpuslice_scheduler_schedule_attempts_total{result="scheduled"}'
LEADER_GAUGE='gpuslice_scheduler_leader'

r2_healthy() { in_ns a curl -sf --max-time 2 "http://127.0.0.1:$R2_HEALTH/healthz" || in_ns a curl -skf --max-time 2 "https://127.0.0.1:$R2_HEALTH/healthz"; }
wait_for 5 r2_alive || { fail "failover: second replica started" "see $R2_LOG: $(tail -3 "$R2_LOG")"; exit 1; }
wait_for 20 r2_healthy || note "second replica: /healthz on :$R2_HEALTH not answering after 20 s (continuing)"
sleep 3
h_now=$(lease_holder)
r2_ready=$(in_ns a curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$R2_HEALTH/readyz")
# With both running, a new pod is bound by the leader only: the follower's scheduled counter stays 0.
apply_pod "$NS" before-failover 4000 10 >/dev/null
wait_bound "$NS" before-failover 30
l_sched=$(metric 8080 "$SCHEDULED") l_gauge=$(metric 8080 "$LEADER_GAUGE")
r2_sched=$(metric "$R2_HEALTH" "$SCHEDULED") r2_gauge=$(metric "$R2_HEALTH" "$LEADER_GAUGE")
if [[ $h_now == "$h1" && $r2_sched == 0 && $r2_gauge == 0 && $l_gauge == 1 && $l_sched -ge 1 ]] && r2_alive &&
   pod_bound "$NS" before-failover; then
  pass "failover: two replicas, only the leader schedules" \
    "holder $h1 (lab gpuslice PID $leader_pid: leader=1, scheduled=$l_sched incl. before-failover); replica 2 PID $(r2_pid): leader=0, scheduled=0, /readyz HTTP $r2_ready"
else
  fail "failover: two replicas, only the leader schedules" \
    "holder before $h1, now $h_now; lab: leader=$l_gauge scheduled=$l_sched; replica 2: leader=$r2_gauge scheduled=$r2_sched alive=$(r2_alive && echo yes || echo no); before-failover node=\"$(pod_node "$NS" before-failover)\""
fi

# Kill the leader the hard way: it cannot release the Lease, the follower must wait for it to expire.
t0=$(now_ms)
kill -KILL "$leader_pid"
# The webhook of the killed replica is gone (the tunnel dials port 9443): name the scheduler explicitly.
out=$(apply_pod "$NS" after-failover 4000 10 1 "$SCHEDULER_NAME")
holder_changed() { local h; h=$(lease_holder); [[ -n $h && $h != "$h1" ]]; }
if wait_for 60 holder_changed; then
  h2=$(lease_holder)
  note "Lease taken over by $h2 $(( $(now_ms) - t0 )) ms after the SIGKILL"
  # The old leader is dead (SIGKILL): replica 2 binds, and its own counter says so.
  if wait_bound "$NS" after-failover 30; then
    r2_sched=$(metric "$R2_HEALTH" "$SCHEDULED") r2_gauge=$(metric "$R2_HEALTH" "$LEADER_GAUGE")
    if [[ $r2_sched -ge 1 && $r2_gauge == 1 ]]; then
      pass "failover: the follower takes over and binds" \
        "after-failover bound to $(pod_node "$NS" after-failover) ($(pod_annotation "$NS" after-failover hami.io/vgpu-devices-allocated)) $(( $(now_ms) - t0 )) ms after SIGKILL of the leader; holder $h1 -> $h2; replica 2: leader=1, scheduled=$r2_sched"
    else
      fail "failover: the follower takes over and binds" \
        "after-failover bound, but replica 2 reports leader=$r2_gauge scheduled=$r2_sched"
    fi
  else
    fail "failover: the follower takes over and binds" \
      "holder $h2 but after-failover not bound: $out; PodScheduled: $(pod_reason "$NS" after-failover) $(pod_message "$NS" after-failover)"
  fi
else
  fail "failover: the follower takes over and binds" "Lease holder still \"$(lease_holder)\" 60 s after SIGKILL; replica 2 log: $(tail -3 "$R2_LOG" | tr '\n' ' ')"
fi
if wait_for 20 bind_phase_success "$NS" after-failover; then
  pass "failover: bind-phase success after the takeover" "after-failover: bind-phase=success"
else
  fail "failover: bind-phase success after the takeover" "bind-phase=\"$(pod_annotation "$NS" after-failover hami.io/bind-phase)\""
fi

# The independent accountant's verdict after the failover (HAMi's counting, from the API alone).
accountant_check failover --namespace "$NS" --settle 30

# Back to the lab's normal state: lab gpuslice restarted, replica 2 stopped (it releases the Lease).
"$LAB" start a gpuslice >/dev/null 2>&1
p=$(r2_pid) && kill -TERM "$p"
r2_gone() { ! r2_pid >/dev/null; }
wait_for 15 r2_gone || { kill -KILL "$(r2_pid)" 2>/dev/null; }
rm -f "$R2_PIDFILE"
lab_holds() { local h; h=$(lease_holder); [[ -n $h && $h != "$h1" && $h != "${h2:-}" ]]; }
webhook_ok() {
  kubectl -n "$NS" delete pod probe --ignore-not-found --wait=true --timeout=10s >/dev/null 2>&1
  gpu_pod probe 1000 5 | kubectl -n "$NS" create --dry-run=server -o jsonpath='{.spec.schedulerName}' -f - | grep -qx "$SCHEDULER_NAME"
}
if wait_for 40 lab_holds && wait_for 20 webhook_ok; then
  pass "failover: lab gpuslice restarted and leading again" "holder $(lease_holder); webhook mutates through the tunnel"
else
  fail "failover: lab gpuslice restarted and leading again" "holder \"$(lease_holder)\"; lab gpuslice PID $(lab_pid a gpuslice || echo none)"
fi

#!/usr/bin/env bash
# Issue 14 chaos: two replicas (the lab's gpuslice and a second one in the same worker namespace) both partitioned
# from the API server (packets dropped) for longer than the Lease duration, under a burst; both come back. Exactly
# one leads afterwards, no pod is bound twice (one Scheduled event, one replica, each), and the accountant finds
# no card over-committed, nothing lost, no lock left.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
D=$(tenant_dir a)
R2_CONFIG=$D/gpuslice-chaos-replica2.yaml
R2_LOG=$LAB_STATE/logs/a-gpuslice-chaos-replica2.log
R2_PIDFILE=$LAB_STATE/pids/e2e-a-gpuslice-chaos-replica2.pid
R2_HEALTH=8082
CUT=${E2E_LEASE_CUT_SECONDS:-25}
r2_pid() { local p; p=$(cat "$R2_PIDFILE" 2>/dev/null) && [[ -n $p && -d /proc/$p ]] && echo "$p"; }
cleanup() {
  cut_restore
  local p
  if p=$(r2_pid); then kill -TERM "$p" 2>/dev/null; sleep 2; kill -KILL "$p" 2>/dev/null; fi
  rm -f "$R2_PIDFILE"
  chaos_cleanup
}
trap cleanup EXIT
metric() {
  in_ns a curl -sf --max-time 3 "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk -v m="$2" 'index($0, m " ") == 1 {print $NF; found = 1} END {if (!found) print 0}'
}

section "chaos: both replicas partitioned past the Lease, then back (tenant-a)"
chaos_setup lease || exit 1
python3 - "$D/gpuslice-config.yaml" "$R2_CONFIG" "$R2_HEALTH" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c.setdefault("webhook", {})["bindAddress"] = "127.0.0.1:9445"
c.setdefault("server", {})["healthBindAddress"] = "127.0.0.1:" + sys.argv[3]
open(sys.argv[2], "w").write(yaml.safe_dump(c, sort_keys=False))
PY
setsid ip netns exec "$(netns_of a)" bash -c 'echo $$ >"$0"; exec "$@"' "$R2_PIDFILE" \
  "$(gpuslice_bin)" serve --config="$R2_CONFIG" --kubeconfig="$D/gpuslice.kubeconfig" >>"$R2_LOG" 2>&1 </dev/null &
r2_up() { in_ns a curl -sf --max-time 2 "http://127.0.0.1:$R2_HEALTH/healthz" >/dev/null; }
wait_for 30 r2_up || { fail "lease: second replica up" "$(tail -3 "$R2_LOG")"; exit 1; }
h1=$(lease_holder)
chaos_burst_start
chaos_wait_created 10 30 || { fail "lease: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
cut_on || { fail "lease: cut (iptables in $(netns_of a))" "iptables failed"; exit 1; }
t0=$(now_ms)
sleep "$CUT"
# While cut, neither replica may still believe it leads once its Lease has run out (renew deadline < duration).
g1=$(metric 8080 gpuslice_scheduler_leader) g2=$(metric "$R2_HEALTH" gpuslice_scheduler_leader)
cut_restore
t_restore=$(now_ms)
note "both replicas cut from the API for $(( ($(now_ms) - t0) / 1000 )) s (Lease holder before: $h1); leader gauges at the end of the cut: lab $g1, replica-2 $g2"
if [[ $g1 == 0 && $g2 == 0 ]]; then
  pass "lease: neither replica leads after its Lease ran out while partitioned" "leader gauges 0 and 0 after ${CUT} s"
else
  fail "lease: neither replica leads after its Lease ran out while partitioned" "leader gauges: lab $g1, replica-2 $g2"
fi
one_leader() { (($(metric 8080 gpuslice_scheduler_leader) + $(metric "$R2_HEALTH" gpuslice_scheduler_leader) == 1)); }
if wait_for 60 one_leader; then
  pass "lease: exactly one replica leads after the partition" "holder $(lease_holder); gauges lab $(metric 8080 gpuslice_scheduler_leader), replica-2 $(metric "$R2_HEALTH" gpuslice_scheduler_leader)"
else
  fail "lease: exactly one replica leads after the partition" "gauges lab $(metric 8080 gpuslice_scheduler_leader), replica-2 $(metric "$R2_HEALTH" gpuslice_scheduler_leader)"
fi
chaos_probe "$t_restore"
wait "$CHAOS_BURST_PID" 2>/dev/null; CHAOS_BURST_PID=""
# No double binding: a pod has at most one Scheduled event, and binds are counted by one replica each.
doubles=$(kubectl -n "$CHAOS_NS" get events.events.k8s.io -o json | jq -r '[.items[] | select(.reason == "Scheduled")]
  | group_by(.regarding.name) | map(select(([.[].reportingInstance] | unique | length) > 1 or length > 1) | .[0].regarding.name) | join(",")')
s1=$(metric 8080 'gpuslice_scheduler_schedule_attempts_total{result="scheduled"}')
s2=$(metric "$R2_HEALTH" 'gpuslice_scheduler_schedule_attempts_total{result="scheduled"}')
if [[ -z $doubles ]]; then
  pass "lease: no pod bound twice" "one Scheduled event per pod; binds: lab $s1, replica-2 $s2"
else
  fail "lease: no pod bound twice" "pods with several Scheduled events or reporters: $doubles"
fi
CHAOS_EVIDENCE="both replicas cut ${CUT} s (Lease 15 s); binds after: lab $s1, replica-2 $s2"
chaos_verdict 90

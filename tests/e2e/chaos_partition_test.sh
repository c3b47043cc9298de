#!/usr/bin/env bash
# Issue 14 chaos: the path from gpuslice (and everything else in tenant-a's worker namespace: kwok, the device agent)
# to the API server cut for E2E_PARTITION_SECONDS (default 60 s, the issue's minute: four times the 15 s Lease and
# longer than every client deadline) by dropping its packets (iptables in the network namespace: connections hang,
# nothing is refused), then restored, under a burst. The webhook path (API server -> Konnectivity -> gpuslice) stays
# up, so pods keep being admitted while nobody can schedule them. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap 'cut_restore; chaos_cleanup' EXIT
CUT=${E2E_PARTITION_SECONDS:-60}

section "chaos: gpuslice-to-API path cut for ${CUT} s, restored (tenant-a)"
chaos_setup partition || exit 1
CHAOS_SECONDS=$((CUT + 10)) CHAOS_RATE=3 chaos_burst_start
chaos_wait_created 10 30 || { fail "partition: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
cut_on || { fail "partition: cut (iptables in $(netns_of a))" "iptables failed"; exit 1; }
t0=$(now_ms)
in_ns a curl -s --max-time 3 -o /dev/null "https://127.0.0.1:$(chaos_api_port)/readyz" -k && cut_ok=no || cut_ok=yes
sleep "$CUT"
cut_restore
t_restore=$(now_ms)
pending_then=$(kubectl -n "$CHAOS_NS" get pods -o json | jq '[.items[] | select(.spec.nodeName == null)] | length')
note "path cut for $(( ($(now_ms) - t0) / 1000 )) s (API unreachable from the namespace: $cut_ok); $pending_then pods unbound at restore"
# After the restore, gpuslice binds again: a probe pod created now is bound.
apply_pod "$CHAOS_NS" after-restore 1000 1 >/dev/null
if wait_bound "$CHAOS_NS" after-restore 90; then
  CHAOS_RECOVERY_MS=$(( $(now_ms) - t_restore ))
  pass "partition: scheduling resumes after the restore" "a pod created at the restore bound $CHAOS_RECOVERY_MS ms after the restore"
else
  fail "partition: scheduling resumes after the restore" "after-restore not bound 90 s after the restore: $(pod_reason "$CHAOS_NS" after-restore) $(pod_message "$CHAOS_NS" after-restore)"
fi
CHAOS_EVIDENCE="${CUT} s packet-drop cut; $pending_then pods waiting at restore"
chaos_verdict 90

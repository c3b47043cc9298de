#!/usr/bin/env bash
# Issue 14 chaos: the node lock holder deleted mid-bind. The device agent is frozen (SIGSTOP) so binds stay in
# flight; the pods holding node locks are deleted by their owner (grace 0); the agent resumes 3 s later. No lock may
# outlive its holder, nothing may be lost or double-booked. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap 'p=$(lab_pid a mock-device-agent) && kill -CONT "$p" 2>/dev/null; chaos_cleanup' EXIT
section "chaos: node lock holder deleted mid-bind (tenant-a)"
chaos_setup lock-holder || exit 1
pid=$(lab_pid a mock-device-agent) || { fail "lock-holder: agent running" "no PID"; exit 1; }
chaos_burst_start --delete-fraction 0.1
chaos_wait_created 10 30 || { fail "lock-holder: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
kill -STOP "$pid"
deleted=()
for round in 1 2; do
  locked() { [[ $(node_locks | grep -c "^e2e-lock-holder-.*,$CHAOS_NS,") -ge 1 ]]; }
  wait_for 20 locked || break
  for hit in $(node_locks | grep "^e2e-lock-holder-" | sed -n "s/^[^=]*=[^,]*,$CHAOS_NS,//p"); do
    echo "deleted $CHAOS_NS/$hit" >>"$CHAOS_LEDGER"
    kubectl -n "$CHAOS_NS" delete pod "$hit" --grace-period=0 --force --wait=false >/dev/null 2>&1 && deleted+=("$hit")
  done
  sleep 1
done
sleep 3
kill -CONT "$pid"
if ((${#deleted[@]} > 0)); then
  pass "lock-holder: holders deleted while holding the node lock" "${deleted[*]}"
else
  fail "lock-holder: holders deleted while holding the node lock" "no burst pod was seen holding a lock in 20 s"
fi
CHAOS_EVIDENCE="${#deleted[@]} lock holders deleted mid-bind (device agent frozen)"
chaos_verdict

#!/usr/bin/env bash
# Issue 14 chaos: the device agent (the lab's stand-in for HAMi's device plugin, which completes Allocate and
# releases the node lock) killed with SIGKILL while a bind is in flight, down 5 s while the burst goes on (bound
# pods wait in bind-phase=allocating, the node's lock stays held), restarted. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap chaos_cleanup EXIT
section "chaos: device agent SIGKILL mid-allocation, restarted 5 s later (tenant-a)"
chaos_setup device-agent || exit 1
pid=$(lab_pid a mock-device-agent) || { fail "device-agent: agent running" "no PID"; exit 1; }
chaos_burst_start
chaos_wait_created 15 30 || { fail "device-agent: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
hit=$(chaos_wait_in_flight 15) && moment="while $hit held the node lock" || moment="with no allocation caught in flight"
kill -KILL "$pid"
sleep 5
waiting=$(kubectl -n "$CHAOS_NS" get pods -o json | jq '[.items[] | select(.metadata.annotations["hami.io/bind-phase"] == "allocating")] | length')
locks=$(node_locks | grep -c "^e2e-device-agent" || true)
"$LAB" start a mock-device-agent >/dev/null 2>&1
newpid=$(lab_pid a mock-device-agent)
if [[ -n $newpid && $newpid != "$pid" ]]; then
  pass "device-agent: killed $moment and restarted" "$waiting pods in bind-phase=allocating and $locks node locks held while it was down; new PID $newpid"
else
  fail "device-agent: killed $moment and restarted" "restart failed"
fi
CHAOS_EVIDENCE="SIGKILL $moment; $waiting pods waiting for Allocate, $locks locks held during the 5 s outage"
chaos_verdict

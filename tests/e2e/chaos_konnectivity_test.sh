#!/usr/bin/env bash
# Issue 14 chaos: the Konnectivity agent flapping (stopped 2 s, restarted, four times) under a burst: while it is down
# the API server cannot reach the webhook (failurePolicy Ignore) and the guard refuses GPU pods with a clear message;
# nothing admitted may be lost, nothing double-booked. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap chaos_cleanup EXIT
section "chaos: Konnectivity agent flapping 4 x (2 s down) under a burst (tenant-a)"
chaos_setup konnectivity || exit 1
chaos_burst_start
chaos_wait_created 10 30 || { fail "konnectivity: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
flaps=0 ok=0
for i in 1 2 3 4; do
  "$LAB" stop a agent >/dev/null 2>&1 && flaps=$((flaps + 1))
  sleep 2
  "$LAB" start a agent >/dev/null 2>&1 && ok=$((ok + 1))
  sleep 1
done
if ((flaps == 4 && ok == 4)) && wait_for 30 agent_connected a; then
  pass "konnectivity: agent stopped and restarted 4 times" "reconnected after each flap"
else
  fail "konnectivity: agent stopped and restarted 4 times" "stopped $flaps, restarted $ok, connected now: $(agent_connected a && echo yes || echo no)"
fi
wait "$CHAOS_BURST_PID" 2>/dev/null; CHAOS_BURST_PID=""
refused=$(sed -n 's/.* \([0-9]*\) refused,.*/\1/p' "$CHAOS_BURST_OUT")
CHAOS_EVIDENCE="4 flaps of 2 s; ${refused:-?} creates refused while the webhook was unreachable"
chaos_verdict

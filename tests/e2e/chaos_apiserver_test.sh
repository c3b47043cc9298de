#!/usr/bin/env bash
# Issue 14 chaos: kube-apiserver killed (SIGKILL) while a bind is in flight (a burst pod holds a node lock), down
# 3 s, restarted with the same flags, under a burst of GPU pod creates and deletes. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap chaos_cleanup EXIT
section "chaos: kube-apiserver SIGKILL mid-bind, restarted 3 s later (tenant-a)"
chaos_setup apiserver || exit 1
chaos_burst_start
chaos_wait_created 15 30 || { fail "apiserver: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
hit=$(chaos_wait_in_flight 15) && moment="while $hit held the node lock (bind in flight)" || moment="with no bind caught in flight"
t0=$(now_ms)
newpid=$(restart_host_proc a-apiserver KILL 3)
if wait_for 90 api_ready; then
  up=$(( $(now_ms) - t0 ))
  pass "apiserver: killed $moment and restarted" "new PID $newpid, /readyz after $up ms"
else
  fail "apiserver: killed $moment and restarted" "not ready 90 s later: $(tail -3 "$LAB_STATE/logs/a-apiserver.log")"
  exit 1
fi
chaos_probe "$(now_ms)"
CHAOS_EVIDENCE="SIGKILL $moment; API ready again after $up ms"
chaos_verdict

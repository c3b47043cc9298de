#!/usr/bin/env bash
# Runs every end-to-end test (tests/e2e/*_test.sh) against a real two-tenant lab:
#   1. `lab/lab.sh up --tenants a,b --helm b` (etcd, two kube-apiservers, Konnectivity, kwok, gpuslice, mock
#      agent; tenant a gets gpuslice's objects by `kubectl apply -k`, tenant b by `helm install` of the chart, so
#      every test on tenant b runs against a helm-installed tenant);
#   2. each *_test.sh in name order, bounded by E2E_TEST_TIMEOUT seconds (default 300) each;
#   3. `lab/lab.sh down`, also on failure or interrupt.
# Every check prints PASS or FAIL with its evidence; the last line is "N passed, N failed". Exits non-zero when
# any check failed or none ran.
#   E2E_KEEP_LAB=1    leave the lab up afterwards (and reuse a running one instead of restarting it)
#   E2E_ONLY=REGEX    run only the test files whose name matches REGEX
#   GPUSLICE_BIN      the gpuslice binary (default build/release/cmd/gpuslice, as lab.sh)
# Needs root (network namespaces).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB=${LAB:-$ROOT/lab/lab.sh}   # LAB: another lab.sh (development only)
export LAB
export E2E_RESULTS
E2E_RESULTS=$(mktemp "${TMPDIR:-/tmp}/gpuslice-e2e-results.XXXXXX")
TEST_TIMEOUT=${E2E_TEST_TIMEOUT:-300}
t0=$SECONDS

summary() {
  local passed failed
  passed=$(grep -c '^PASS ' "$E2E_RESULTS" 2>/dev/null) || passed=0
  failed=$(grep -c '^FAIL ' "$E2E_RESULTS" 2>/dev/null) || failed=0
  if ((failed)); then
    echo
    echo "failed checks:"
    sed -n 's/^FAIL /  /p' "$E2E_RESULTS"
  fi
  echo
  echo "e2e wall time: $((SECONDS - t0)) s"
  echo "$passed passed, $failed failed"
  rm -f "$E2E_RESULTS"
  ((failed == 0 && passed > 0))
}

teardown() {
  if [[ ${E2E_KEEP_LAB:-0} == 1 ]]; then
    echo "lab left up (E2E_KEEP_LAB=1): lab/lab.sh status / lab/lab.sh down"
  else
    "$LAB" down >/dev/null 2>&1 || echo "lab/lab.sh down failed"
  fi
}
child=""
on_signal() {
  echo "interrupted"
  # The running test gets SIGTERM (through timeout) and runs its own cleanup before the lab goes down.
  [[ -n $child ]] && { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; }
  echo "FAIL run.sh interrupted" >>"$E2E_RESULTS"; teardown; summary; exit 130
}
trap on_signal INT TERM

if [[ ${E2E_KEEP_LAB:-0} == 1 ]] && "$LAB" status >/dev/null 2>&1; then
  echo "reusing the running lab (E2E_KEEP_LAB=1)"
else
  echo "==== lab/lab.sh up --tenants a,b --helm b ($(date -u +%H:%M:%S) UTC)"
  if ! "$LAB" up --tenants a,b --helm b; then
    echo "FAIL lab up" >>"$E2E_RESULTS"
    printf 'FAIL  lab up\n      lab/lab.sh up --tenants a,b --helm b failed (logs: lab/lab.sh logs)\n'
    teardown
    summary
    exit 1
  fi
fi

for test in "$ROOT"/tests/e2e/*_test.sh; do
  name=$(basename "$test" .sh)
  [[ -n ${E2E_ONLY:-} && ! $name =~ $E2E_ONLY ]] && continue
  echo
  echo "==== $name ($(date -u +%H:%M:%S) UTC)"
  before=$(wc -l <"$E2E_RESULTS")
  start=$SECONDS
  # In the background and waited for, so that a signal to this runner is handled at once.
  # A test may ask for a longer bound with a line `# e2e-timeout: SECONDS` (a fault whose aftermath takes minutes).
  limit=$(sed -n 's/^# e2e-timeout: \([0-9][0-9]*\)$/\1/p' "$test" | head -1)
  limit=${limit:-$TEST_TIMEOUT}
  timeout --kill-after=10 "$limit" bash "$test" &
  child=$!
  wait "$child"
  rc=$?
  child=""
  after=$(wc -l <"$E2E_RESULTS")
  if ((rc == 124 || rc == 137)); then
    printf 'FAIL  %s\n      timed out after %s s\n' "$name" "$limit"
    echo "FAIL $name: timed out after $limit s" >>"$E2E_RESULTS"
  elif ((rc != 0)) && ! tail -n +$((before + 1)) "$E2E_RESULTS" | grep -q '^FAIL '; then
    # A script that failed without saying why still counts as a failure.
    printf 'FAIL  %s\n      exited %s without a FAIL line\n' "$name" "$rc"
    echo "FAIL $name: exited $rc" >>"$E2E_RESULTS"
  elif ((after == before)); then
    printf 'FAIL  %s\n      ran no check\n' "$name"
    echo "FAIL $name: ran no check" >>"$E2E_RESULTS"
  fi
  echo "---- $name: $((SECONDS - start)) s"
done

teardown
summary

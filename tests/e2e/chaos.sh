# Shared by the chaos tests (tests/e2e/chaos_*_test.sh): each injects one fault on tenant-a while a burst of GPU
# pod creates and deletes runs (tests/e2e/burst.py), then ends with the accountant's verdict
# (tests/e2e/accountant.py: from the API alone, no card over-committed as HAMi counts it, no GPU pod of ours lost,
# no node lock left past its allocation). Source it after lib.sh.
# shellcheck shell=bash

CHAOS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lab/nodes.sh
source "$CHAOS_DIR/../../lab/nodes.sh"
CHAOS_RATE=${CHAOS_RATE:-6}          # pod creates per second during the burst
CHAOS_SECONDS=${CHAOS_SECONDS:-20}   # burst length
CHAOS_SETTLE=${CHAOS_SETTLE:-60}     # how long the aftermath may take to be clean
# One JSON line per fault (name, verdict, the accountant's figures, seconds to clean, burst summary, evidence),
# rendered into bench/RESULTS.md by bench/reliability_table.py.
CHAOS_RESULTS=${CHAOS_RESULTS:-${E2E_REPORT_DIR:-$E2E_ROOT/build/e2e-report}/chaos.jsonl}
declare -g CHAOS_NAME="" CHAOS_NS="" CHAOS_LEDGER="" CHAOS_BURST_PID="" CHAOS_BURST_OUT=""
declare -ga CHAOS_NODES=()

# chaos_setup NAME: namespace e2e-NAME and two simulated 4 x A100-80GB nodes labelled gpuslice.io/e2e=NAME (80
# slices of 8000 MiB / 10 %), so every test has its own cards and the burst can overflow them (Pending with a
# reason) while deletes free slices again.
chaos_setup() {
  mkdir -p "$(dirname "$CHAOS_RESULTS")"
  CHAOS_NAME=$1 CHAOS_NS=e2e-$1
  CHAOS_NODES=("e2e-$1-0" "e2e-$1-1")
  CHAOS_LEDGER=$(mktemp "${TMPDIR:-/tmp}/gpuslice-chaos-ledger.XXXXXX")
  CHAOS_BURST_OUT=$(mktemp "${TMPDIR:-/tmp}/gpuslice-chaos-burst.XXXXXX")
  e2e_ns a "$CHAOS_NS" || { fail "$CHAOS_NAME: namespace $CHAOS_NS" "kubectl create namespace failed"; return 1; }
  local n
  for n in "${CHAOS_NODES[@]}"; do
    kubectl delete node "$n" --ignore-not-found >/dev/null 2>&1
    kwok_node "$n" "$(a100_register "GPU-$n")" 40 64 512Gi "gpuslice.io/e2e: $1" | kubectl create -f - >/dev/null ||
      { fail "$CHAOS_NAME: node $n" "kubectl create node failed"; return 1; }
  done
  _chaos_ready() { [[ $(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
  for n in "${CHAOS_NODES[@]}"; do
    wait_for 30 _chaos_ready "$n" || { fail "$CHAOS_NAME: node $n Ready" "kwok did not make it Ready in 30 s"; return 1; }
  done
}

# chaos_cleanup: the namespace, the nodes, and any lab process a test stopped comes back.
chaos_cleanup() {
  [[ -n $CHAOS_BURST_PID ]] && { kill "$CHAOS_BURST_PID" 2>/dev/null; wait "$CHAOS_BURST_PID" 2>/dev/null; }
  e2e_cleanup
  use_tenant a
  ((${#CHAOS_NODES[@]})) && kubectl delete node "${CHAOS_NODES[@]}" --ignore-not-found --wait=false >/dev/null 2>&1
  lab_pid a gpuslice >/dev/null || "$LAB" start a gpuslice >/dev/null 2>&1
  lab_pid a mock-device-agent >/dev/null || "$LAB" start a mock-device-agent >/dev/null 2>&1
  lab_pid a agent >/dev/null || "$LAB" start a agent >/dev/null 2>&1
  rm -f "$CHAOS_LEDGER" "$CHAOS_BURST_OUT"
}

# chaos_burst_start [burst.py args]: the burst in the background (CHAOS_RATE pods/s for CHAOS_SECONDS, 30 % deleted
# by their owner 1-5 s after creation), through the webhook unless --scheduler-name is passed.
chaos_burst_start() {
  python3 "$CHAOS_DIR/burst.py" --kubeconfig "$(tenant_dir a)/admin.kubeconfig" --namespace "$CHAOS_NS" \
    --rate "$CHAOS_RATE" --seconds "$CHAOS_SECONDS" --ledger "$CHAOS_LEDGER" --prefix "$CHAOS_NAME" \
    --node-selector "gpuslice.io/e2e=$CHAOS_NAME" "$@" >"$CHAOS_BURST_OUT" 2>&1 &
  CHAOS_BURST_PID=$!
}
# chaos_created: pods the burst has created so far (from its ledger).
chaos_created() { grep -c '^created ' "$CHAOS_LEDGER" 2>/dev/null || echo 0; }
# chaos_wait_created N SECONDS: until the burst has created N pods.
chaos_wait_created() { local n=$1; _enough() { (($(chaos_created) >= n)); }; wait_for "$2" _enough; }
# chaos_in_flight: "pod node" of one burst pod that holds a node lock right now (the bind is in progress), empty
# when none does.
chaos_in_flight() {
  kubectl get nodes -l "gpuslice.io/e2e=$CHAOS_NAME" -o json 2>/dev/null |
    jq -r --arg ns "$CHAOS_NS" '.items[] | .metadata as $m | ($m.annotations["hami.io/mutex.lock"] // "") | split(",")
      | select(length == 3 and .[1] == $ns) | "\(.[2]) \($m.name)"' | head -1
}
# chaos_wait_in_flight SECONDS: waits until a bind is in progress (a burst pod holds a lock); prints it.
chaos_wait_in_flight() {
  local deadline=$((SECONDS + $1)) hit
  while ((SECONDS < deadline)); do
    hit=$(chaos_in_flight)
    [[ -n $hit ]] && { echo "$hit"; return 0; }
    sleep 0.05
  done
  return 1
}

# chaos_probe T0_MS [TIMEOUT]: the time to recover. A one-slice probe pod (1000 MiB, 1 %, no node selector: any GPU
# node of tenant-a) created now; once it is bound, CHAOS_RECOVERY_MS is the time from T0_MS (the moment the fault
# ended) to that bind. PASS/FAIL "NAME: scheduling resumes after the fault".
chaos_probe() {
  local t0=$1 timeout=${2:-90} name=probe-after
  apply_pod "$CHAOS_NS" "$name" 1000 1 >/dev/null
  if wait_bound "$CHAOS_NS" "$name" "$timeout"; then
    CHAOS_RECOVERY_MS=$(( $(now_ms) - t0 ))
    pass "$CHAOS_NAME: scheduling resumes after the fault" \
      "a pod created after it is bound to $(pod_field "$CHAOS_NS" "$name" '{.spec.nodeName}') ${CHAOS_RECOVERY_MS} ms after the fault ended"
  else
    fail "$CHAOS_NAME: scheduling resumes after the fault" \
      "$name not bound $timeout s later: $(pod_reason "$CHAOS_NS" "$name") $(pod_message "$CHAOS_NS" "$name")"
    return 1
  fi
}

# chaos_verdict [SETTLE]: waits for the burst to finish, then runs the accountant (re-auditing until clean, up to
# SETTLE s) and reports PASS/FAIL "NAME: accountant"; appends a row to CHAOS_RESULTS. $1 of the caller's evidence
# can be passed in CHAOS_EVIDENCE.
chaos_verdict() {
  local settle=${1:-$CHAOS_SETTLE} out rc t0
  [[ -n $CHAOS_BURST_PID ]] && { wait "$CHAOS_BURST_PID" 2>/dev/null; CHAOS_BURST_PID=""; }
  note "$(cat "$CHAOS_BURST_OUT")"
  local json; json=$(mktemp)
  out=$(python3 "$CHAOS_DIR/accountant.py" --kubeconfig "$(tenant_dir a)/admin.kubeconfig" --namespace "$CHAOS_NS" \
    --ledger "$CHAOS_LEDGER" --settle "$settle" --json "$json" 2>&1)
  rc=$?
  local verdict; verdict=$(tail -1 <<<"$out")
  if ((rc == 0)); then
    pass "$CHAOS_NAME: accountant's verdict after the fault" "$verdict"
  else
    fail "$CHAOS_NAME: accountant's verdict after the fault" "$out"
  fi
  python3 - "$json" "$CHAOS_NAME" "$(cat "$CHAOS_BURST_OUT")" "${CHAOS_EVIDENCE:-}" "${CHAOS_RECOVERY_MS:-}" >>"$CHAOS_RESULTS" <<'PY'
import json, sys
try:
    fig = json.load(open(sys.argv[1]))
except ValueError:
    fig = {"verdict": "DIRTY"}
fig.update(fault=sys.argv[2], burst=sys.argv[3].strip(), evidence=sys.argv[4],
           recovery_ms=int(sys.argv[5]) if sys.argv[5] else None)
print(json.dumps(fig))
PY
  rm -f "$json"
  return $rc
}

# gpuslice_log_since LINE: gpuslice's log after line LINE (count lines first with gpuslice_log_lines).
gpuslice_log_lines() { wc -l <"$LAB_STATE/logs/a-gpuslice.log" 2>/dev/null || echo 0; }
gpuslice_log_since() { tail -n +$(($1 + 1)) "$LAB_STATE/logs/a-gpuslice.log" 2>/dev/null; }

# restart_host_proc NAME [SIGNAL] [DOWN_SECONDS]: kills a lab process of the host (e.g. a-apiserver) with SIGNAL
# (default KILL), waits DOWN_SECONDS, and starts it again with exactly the same command line and log (read from
# /proc before the kill). Prints the new PID.
restart_host_proc() {
  local name=$1 sig=${2:-KILL} down=${3:-0} pid pidf=$LAB_STATE/pids/$1.pid logf=$LAB_STATE/logs/$1.log
  pid=$(cat "$pidf" 2>/dev/null) || return 1
  local -a cmd
  mapfile -d '' -t cmd <"/proc/$pid/cmdline" || return 1
  kill "-$sig" "$pid" 2>/dev/null
  local i
  for i in $(seq 100); do [[ -d /proc/$pid ]] || break; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null
  sleep "$down"
  rm -f "$pidf"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" "${cmd[@]}" >>"$logf" 2>&1 </dev/null &
  for i in $(seq 50); do [[ -s $pidf ]] && break; sleep 0.05; done
  cat "$pidf"
}

# api_ready: tenant-a's API server answers /readyz.
api_ready() { kubectl get --raw /readyz >/dev/null 2>&1; }

# The path from tenant-a's worker namespace (gpuslice, kwok, the device agent) to its API server, cut by dropping
# packets (iptables in the namespace: connections hang, nothing is refused, as a real network cut), and restored.
chaos_api_port() { sed -n 's|.*server: "https://127.0.0.1:\([0-9]*\)".*|\1|p' "$(tenant_dir a)/admin.kubeconfig"; }
cut_on() { in_ns a iptables -w -I OUTPUT -p tcp --dport "$(chaos_api_port)" -j DROP; }
cut_restore() {
  local port; port=$(chaos_api_port)
  [[ -n $port ]] || return 0
  while in_ns a iptables -w -D OUTPUT -p tcp --dport "$port" -j DROP 2>/dev/null; do :; done
}

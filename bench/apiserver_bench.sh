#!/usr/bin/env bash
# Scheduling through a real kube-apiserver (issue 4 item 11), on the hermetic lab (lab/lab.sh), tenant a:
#
#   1. gpuslice: N GPU pods (nvidia.com/gpu 1, gpumem 1000, gpucores 5) created while gpuslice is stopped, then
#      gpuslice is started; time from start to all bound, and first-to-last bound (steady pods/s).
#   2. upstream kube-scheduler ($(lab/build-tools.sh --print-bin)/kube-scheduler, its own schedulerName
#      bench-kube-scheduler, default client QPS 50 / burst 100 like gpuslice's kubeQPS/kubeBurst): N plain pods
#      (cpu 10m, memory 16Mi) created before it starts; same two figures. The ratio gpuslice / kube-scheduler is
#      from this one run (absolute figures move with the shared machine's load).
#   3. freed slice -> pending pod bound: a dedicated one-card node; a holder pod takes all 100 cores, a second pod
#      stays Pending (CardInsufficientCore); deleting the holder (grace 0) frees the card; latency = the API
#      server's DELETED event of the holder -> the first event showing the pending pod bound, both seen by one
#      watch. Repeated SAMPLES times; p50 and max.
#
# Binding is observed from a watch on the API server (bench/apiserver_watch.py), never from scheduler logs.
#
#   bench/apiserver_bench.sh [--pods 2000] [--nodes 200] [--samples 7] [--runs 1] [--node-lock hami|off] [--qps N]
#                            [--lock-lookahead N] [--device-agent on|off] [--reuse | --fresh] [--keep]
#     --runs N  repeat steps 1 and 2 N times, interleaved (gpuslice, kube-scheduler, gpuslice, ...), each on fresh
#              pods (the previous run's deleted first); the report gives every run, the medians and the spread.
#              Each scheduler runs alone: gpuslice is stopped while kube-scheduler places its pods.
#     --node-lock  gpuslice's scheduler.nodeLock for this run (default: the lab's configuration, hami): written into
#              the lab's generated $STATE/tenant-a/gpuslice-config.yaml, restored at the end
#     --lock-lookahead N  gpuslice's scheduler.nodeLockLookahead for this run (default: the lab's configuration)
#     --device-agent off  stop the lab's device agent (HAMi's plugin stand-in) for the runs, started again at the
#              end: each GPU pod then costs the API server only what the scheduler sends, as a plain pod does in
#              kube-scheduler's run; only with --node-lock off (with the lock nothing would release it). Default
#              on: the agent admits every bound GPU pod with HAMi's plugin's ~7 requests, on the same cores.
#     --qps N  client QPS (burst 2N) for BOTH schedulers (default: their defaults, 50 / burst 100 for both)
#     --reuse  use the lab already running (it must have tenant a with gpuslice and >= --nodes extra nodes)
#     --fresh  (re)start the lab: lab/lab.sh up --tenants a --extra-nodes NODES (stops a running lab!)
#     --keep   leave the lab up at the end (default: down if this script brought it up)
#     --kube-scheduler-user kube-scheduler|admin  the identity upstream kube-scheduler runs as (default
#              kube-scheduler: user system:kube-scheduler, as a control plane runs it; API Priority and Fairness
#              classifies it at workload-high, where manifests/base/flowschema.yaml puts gpuslice). admin: the lab's
#              system:masters user, exempt from APF (how this bench ran it until 2026-12-06): isolates the schedulers'
#              own CPU from APF's queueing.
#     --pprof S  a CPU profile of kube-apiserver over the first S seconds of every scheduler's run (its
#              /debug/pprof/profile), kept as $WORK/apiserver-{gpuslice,kube-scheduler}-RUN.pprof with a `go tool
#              pprof -top` summary beside it: where the API server's CPU goes for each scheduler. Needs the lab's
#              API server started with profiling (--fresh turns it on: GPUSLICE_LAB_APISERVER_PROFILING=true).
# Needs root (the lab does). Runs its own lab instance (GPUSLICE_LAB_STATE=/tmp/gsbench/state, API server
# 127.0.0.1:19443, namespaces gsb-*), beside any other lab. Prints a Markdown table for bench/RESULTS.md.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
# shellcheck source=lab/nodes.sh
source "$REPO/lab/nodes.sh"
LAB=$REPO/lab/lab.sh
# A private lab instance (own state, ports and namespaces) so the benchmark never touches another lab on this
# machine; override the GPUSLICE_LAB_* variables to point it elsewhere (--reuse then uses that lab).
export GPUSLICE_LAB_STATE=${GPUSLICE_LAB_STATE:-/tmp/gsbench/state}
export GPUSLICE_LAB_ETCD_PORT=${GPUSLICE_LAB_ETCD_PORT:-15379}
export GPUSLICE_LAB_API_PORT=${GPUSLICE_LAB_API_PORT:-19443}
export GPUSLICE_LAB_KONN_PORT=${GPUSLICE_LAB_KONN_PORT:-9532}
export GPUSLICE_LAB_SCHED_PORT=${GPUSLICE_LAB_SCHED_PORT:-11559}
export GPUSLICE_LAB_NETNS_PREFIX=${GPUSLICE_LAB_NETNS_PREFIX:-gsb}
# An optimised binary: bench/ builds its own (cmake --preset release -B build/bench), else lab.sh's choice.
if [[ -z ${GPUSLICE_BIN:-} && -x $REPO/build/bench/cmd/gpuslice ]]; then export GPUSLICE_BIN=$REPO/build/bench/cmd/gpuslice; fi
STATE=$GPUSLICE_LAB_STATE
BIN=$("$REPO/lab/build-tools.sh" --print-bin)
WATCH=$BENCH_DIR/apiserver_watch.py
PODS=2000 NODES=200 SAMPLES=7 RUNS=1 MODE=ask KEEP=false NODE_LOCK="" QPS="" LOOKAHEAD="" AGENT=on PPROF=0 KS_USER=kube-scheduler
NS=gpuslice-bench
KS_NAME=bench-kube-scheduler
GS_NAME=gpuslice-scheduler
LAT_NODE=a-bench-latency
BIND_TIMEOUT=${BIND_TIMEOUT:-900}

while (($#)); do
  case $1 in
    --pods) PODS=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --reuse) MODE=reuse; shift ;;
    --fresh) MODE=fresh; shift ;;
    --keep) KEEP=true; shift ;;
    --node-lock) NODE_LOCK=$2; shift 2 ;;
    --lock-lookahead) LOOKAHEAD=$2; shift 2 ;;
    --qps) QPS=$2; shift 2 ;;
    --device-agent) AGENT=$2; shift 2 ;;
    --pprof) PPROF=$2; shift 2 ;;
    --kube-scheduler-user) KS_USER=$2; shift 2 ;;
    *) echo "usage: $0 [--pods N] [--nodes N] [--samples N] [--runs N] [--node-lock hami|off] [--qps N] [--lock-lookahead N] [--device-agent on|off] [--pprof SECONDS] [--kube-scheduler-user kube-scheduler|admin] [--reuse|--fresh] [--keep]" >&2; exit 2 ;;
  esac
done
[[ $PODS =~ ^[0-9]+$ && $NODES =~ ^[0-9]+$ && $SAMPLES =~ ^[0-9]+$ && $RUNS =~ ^[1-9][0-9]*$ ]] ||
  { echo "--pods/--nodes/--samples: numbers; --runs: a number >= 1" >&2; exit 2; }
[[ -z $NODE_LOCK || $NODE_LOCK == hami || $NODE_LOCK == off ]] || { echo "--node-lock: hami or off" >&2; exit 2; }
[[ -z $LOOKAHEAD || $LOOKAHEAD =~ ^[1-9][0-9]*$ ]] || { echo "--lock-lookahead: a positive integer, got \"$LOOKAHEAD\"" >&2; exit 2; }
[[ -z $QPS || $QPS =~ ^[0-9]+$ ]] || { echo "--qps: a number" >&2; exit 2; }
[[ $KS_USER == kube-scheduler || $KS_USER == admin ]] || { echo "--kube-scheduler-user: kube-scheduler or admin, got \"$KS_USER\"" >&2; exit 2; }
[[ $PPROF =~ ^[0-9]+$ ]] || { echo "--pprof: a number of seconds, got \"$PPROF\"" >&2; exit 2; }
[[ $AGENT == on || $AGENT == off ]] || { echo "--device-agent: on or off, got \"$AGENT\"" >&2; exit 2; }
[[ $AGENT == on || $NODE_LOCK == off ]] || { echo "--device-agent off needs --node-lock off (nothing would release HAMi's lock)" >&2; exit 2; }

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
now() { date +%s.%N; }

WORK=$(mktemp -d /tmp/gpuslice-apiserver-bench.XXXXXX)
KS_PID="" WATCH_PID="" BROUGHT_UP=false
cleanup() {
  set +eu
  [[ -n $WATCH_PID ]] && kill "$WATCH_PID" 2>/dev/null
  [[ -n ${PPROF_PID:-} ]] && kill "$PPROF_PID" 2>/dev/null
  [[ -n $KS_PID ]] && kill "$KS_PID" 2>/dev/null && wait "$KS_PID" 2>/dev/null
  if [[ -f $STATE/tenant-a/admin.kubeconfig ]] && kc get ns "$NS" >/dev/null 2>&1; then
    kc delete namespace "$NS" --wait=false >/dev/null 2>&1
    kc delete node "$LAT_NODE" --ignore-not-found >/dev/null 2>&1
  fi
  [[ -f $GS_CONFIG.bench-orig ]] && mv "$GS_CONFIG.bench-orig" "$GS_CONFIG"
  if [[ -f $GS_CONFIG ]]; then   # stopped for kube-scheduler's runs, or its configuration restored
    "$LAB" stop a gpuslice >/dev/null 2>&1; "$LAB" start a gpuslice >/dev/null 2>&1
  fi
  [[ $AGENT == off ]] && "$LAB" start a mock-device-agent >/dev/null 2>&1
  if $BROUGHT_UP && ! $KEEP; then "$LAB" down >/dev/null 2>&1; fi
  log "work files kept in $WORK"
}
trap cleanup EXIT

KCFG=$STATE/tenant-a/admin.kubeconfig
GS_CONFIG=$STATE/tenant-a/gpuslice-config.yaml
kc() { "$BIN/kubectl" --kubeconfig "$KCFG" "$@"; }
# Upstream kube-scheduler's identity as a control plane gives it (system:kube-scheduler: its RBAC, and APF's
# "kube-scheduler" FlowSchema at workload-high, where manifests/base/flowschema.yaml puts gpuslice); admin
# (system:masters) would be exempt from API Priority and Fairness. Until 2026-12-06 it ran as admin.
KS_KCFG=$STATE/tenant-a/$KS_USER.kubeconfig

# ---- the lab ----------------------------------------------------------------------------------------------
lab_running() { "$LAB" status >/dev/null 2>&1 && grep -qx a "$STATE/tenants" 2>/dev/null; }
case $MODE in
  ask) lab_running && die "a lab is running in $STATE: pass --reuse to use it or --fresh to restart it"
       MODE=fresh ;;
  reuse) lab_running || die "--reuse: no lab with tenant a is running" ;;
esac
if [[ $MODE == fresh ]]; then
  log "lab/lab.sh up --tenants a --extra-nodes $NODES"
  ((PPROF > 0)) && export GPUSLICE_LAB_APISERVER_PROFILING=true
  "$LAB" up --tenants a --extra-nodes "$NODES" >"$WORK/lab-up.log" 2>&1 || { tail -20 "$WORK/lab-up.log"; die "lab up"; }
  BROUGHT_UP=true
fi
[[ -f $STATE/pids/a-gpuslice.pid ]] || die "gpuslice is not running in tenant a (lab.sh logs a gpuslice): is 'gpuslice serve' built?"
[[ -f $KS_KCFG ]] || die "no $KS_KCFG (kube-scheduler's identity): the lab predates it; restart it (--fresh)"
have_nodes=$(kc get nodes -l gpuslice.io/lab=extra --no-headers 2>/dev/null | wc -l)
((have_nodes >= NODES)) || die "tenant a has $have_nodes extra nodes, want $NODES (lab/lab.sh up --extra-nodes $NODES)"
all_nodes=$(kc get nodes --no-headers | wc -l)
if [[ -n $NODE_LOCK || -n $QPS || -n $LOOKAHEAD ]]; then
  cp "$GS_CONFIG" "$GS_CONFIG.bench-orig"
  python3 - "$GS_CONFIG" "$NODE_LOCK" "$QPS" "$LOOKAHEAD" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c.setdefault("scheduler", {})
if sys.argv[2]:
    s["nodeLock"] = sys.argv[2]
if sys.argv[3]:
    s["kubeQPS"] = int(sys.argv[3])
    s["kubeBurst"] = 2 * int(sys.argv[3])
if sys.argv[4]:
    s["nodeLockLookahead"] = int(sys.argv[4])
open(sys.argv[1], "w").write(yaml.safe_dump(c, sort_keys=False))
PY
fi
LOCK_MODE=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1])).get("scheduler", {}).get("nodeLock", "hami"))' "$GS_CONFIG")
GS_QPS=$(python3 -c 'import sys, yaml; s = yaml.safe_load(open(sys.argv[1])).get("scheduler", {}); print(s.get("kubeQPS", 50), s.get("kubeBurst", 100), s.get("nodeLockLookahead", "default"))' "$GS_CONFIG")
log "gpuslice scheduler.nodeLock: $LOCK_MODE, kubeQPS/kubeBurst/nodeLockLookahead: $GS_QPS, device agent: $AGENT, kube-scheduler's user: $KS_USER"
[[ $AGENT == off ]] && "$LAB" stop a mock-device-agent
if ((PPROF > 0)) && ! kc get --raw /debug/pprof/ >/dev/null 2>&1; then
  die "--pprof: the lab's kube-apiserver serves no /debug/pprof (restart it with --fresh --pprof, or GPUSLICE_LAB_APISERVER_PROFILING=true lab/lab.sh up)"
fi
if kc get namespace "$NS" >/dev/null 2>&1; then   # left by an interrupted run: let it finish terminating
  log "waiting for namespace $NS of an earlier run to go"
  kc delete namespace "$NS" --wait=true --timeout=300s >/dev/null 2>&1 || die "namespace $NS is stuck"
fi
kc delete node "$LAT_NODE" --ignore-not-found >/dev/null
kc create namespace "$NS" >/dev/null

# ---- manifests --------------------------------------------------------------------------------------------
# GPU pods (gpu_pods) and plain pods (plain_pods): bench/pods.sh, shared with bench/scale_bench.sh.
# shellcheck source=bench/pods.sh
source "$BENCH_DIR/pods.sh"
latency_pod() {  # name: all 100 cores of the latency node's single card
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS, labels: {bench: latency, gpuslice.io/webhook: ignore}}
spec:
  schedulerName: $GS_NAME
  terminationGracePeriodSeconds: 0
  nodeSelector: {kubernetes.io/hostname: $LAT_NODE}
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000", nvidia.com/gpucores: "100"}}
EOF
}

# start_pprof NAME: kube-apiserver's CPU profile over the next PPROF seconds into $WORK/apiserver-NAME.pprof
# (background; finish_pprof waits for it and writes the top functions beside it). Nothing with --pprof 0.
PPROF_PID=""
start_pprof() {
  ((PPROF > 0)) || return 0
  kc get --raw "/debug/pprof/profile?seconds=$PPROF" >"$WORK/apiserver-$1.pprof" 2>"$WORK/apiserver-$1.pprof.err" &
  PPROF_PID=$!
}
finish_pprof() {
  [[ -n $PPROF_PID ]] || return 0
  wait "$PPROF_PID" || die "kube-apiserver's profile $1: $(cat "$WORK/apiserver-$1.pprof.err")"
  PPROF_PID=""
  if command -v go >/dev/null; then
    go tool pprof -top -nodecount=40 "$WORK/apiserver-$1.pprof" >"$WORK/apiserver-$1.top" 2>&1 || true
  fi
  log "  kube-apiserver profile: $WORK/apiserver-$1.pprof"
}

create_many() {  # file: creates in chunks of 200 (kubectl create of one big file is sequential anyway)
  local t0; t0=$(now)
  kc create -f "$1" >/dev/null
  log "  created $(grep -c '^kind: Pod' "$1") pods in $(awk -v a="$(now)" -v b="$t0" 'BEGIN {printf "%.1f", a - b}') s"
}

# start_watch SELECTOR N OUTFILE: background watcher that exits once N pods are bound (0: never).
start_watch() {
  python3 "$WATCH" watch --kubeconfig "$KCFG" --namespace "$NS" --selector "$1" --expect-bound "$2" \
    --timeout "$BIND_TIMEOUT" >"$3" 2>"$3.err" &
  WATCH_PID=$!
  # The watcher has listed (and so is watching) once its first LISTED line or the watch is open; give it a moment.
  sleep 1
}
wait_watch() {
  local rc=0
  wait "$WATCH_PID" || rc=$?
  WATCH_PID=""
  return $rc
}

# CPU time of every process the run involves, from /proc (utime + stime in clock ticks), so a run says where the
# machine's cores went: the lab's processes by their pid files (kube-apiserver, etcd, kwok, the device agent,
# gpuslice, Konnectivity), the upstream kube-scheduler and the watcher by pid, and the whole machine from
# /proc/stat. `cpu_snapshot FILE [name=pid ...]` writes "name ticks" lines; cpu_delta turns two into JSON.
cpu_snapshot() {
  local out=$1 f pid name; shift
  {
    for f in "$STATE"/pids/*.pid; do
      pid=$(cat "$f" 2>/dev/null) || continue; name=$(basename "$f" .pid)
      [[ -r /proc/$pid/stat ]] && printf '%s %s\n' "$name" "$(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')"
    done
    for f in "$@"; do
      pid=${f#*=}; name=${f%%=*}
      [[ -n $pid && -r /proc/$pid/stat ]] && printf '%s %s\n' "$name" "$(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')"
    done
    awk '$1 == "cpu" {print "machine", $2 + $3 + $4 + $7 + $8}' /proc/stat
  } >"$out"
}
cpu_delta() {  # BEFORE AFTER -> {"name": cpu seconds} (processes present in both)
  python3 - "$1" "$2" "$(getconf CLK_TCK)" <<'PY'
import json, sys
def read(p): return dict((l.split()[0], int(float(l.split()[1]))) for l in open(p) if l.strip())
a, b, hz = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
print(json.dumps({k: (b[k] - a[k]) / hz for k in b if k in a}))
PY
}

# API Priority and Fairness: how long each run's requests waited in the API server's queues, per FlowSchema and
# priority level (apiserver_flowcontrol_request_wait_duration_seconds; exempt levels do not queue and are left out).
apf_snapshot() {
  kc get --raw /metrics |
    grep -E '^apiserver_flowcontrol_(request_wait_duration_seconds_(sum|count)|rejected_requests_total)\{' >"$1" || true
}
apf_delta() {  # BEFORE AFTER -> {"flow_schema/priority_level": {"requests": N, "wait_ms": average, "rejected": N}}
  python3 - "$1" "$2" <<'PY'
import json, re, sys
def read(p):
    out = {}
    for l in open(p):
        m = re.match(r'apiserver_flowcontrol_(request_wait_duration_seconds_sum|request_wait_duration_seconds_count|rejected_requests_total)\{(.*)\} (\S+)', l)
        if not m: continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("priority_level") == "exempt": continue
        k = labels.get("flow_schema", "?") + "/" + labels.get("priority_level", "?")
        i = {"request_wait_duration_seconds_sum": 0, "request_wait_duration_seconds_count": 1, "rejected_requests_total": 2}[m.group(1)]
        out.setdefault(k, [0.0, 0.0, 0.0])[i] += float(m.group(3))
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
res = {}
for k, (s, n, r) in b.items():
    s0, n0, r0 = a.get(k, [0.0, 0.0, 0.0])
    if n - n0 > 0 or r - r0 > 0:
        res[k] = {"requests": int(n - n0), "wait_ms": round((s - s0) / max(n - n0, 1) * 1000, 2), "rejected": int(r - r0)}
print(json.dumps(res))
PY
}

# ---- 1. and 2., RUNS times ----------------------------------------------------------------------------------
scheduled_events() {  # PREFIX: Scheduled events about the pods of one run (written by the end of the run)
  kc get events -n "$NS" --field-selector reason=Scheduled -o name 2>/dev/null | grep -c "/$1-" || true
}
delete_run_pods() {  # PREFIX: the pods of one run, grace 0, until none is left
  python3 "$WATCH" delete-pods --kubeconfig "$KCFG" --namespace "$NS" --selector "bench=$1" --prefix "$1-" \
    --count "$PODS" >/dev/null 2>"$WORK/delete-$1.log" || die "deleting the pods of $1: $(cat "$WORK/delete-$1.log")"
}
cat >"$WORK/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $KS_KCFG${QPS:+, qps: $QPS, burst: $((2 * ${QPS:-0}))}}
leaderElection: {leaderElect: false}
profiles: [{schedulerName: $KS_NAME}]
EOF
GS_RUNS=() KS_RUNS=() GS_CPU=() KS_CPU=() GS_APF=() KS_APF=()
for ((run = 1; run <= RUNS; run++)); do
  # 1. gpuslice
  log "1/3 run $run/$RUNS gpuslice: $PODS GPU pods on $all_nodes nodes"
  "$LAB" stop a gpuslice
  gpu_pods "gpu$run" "$PODS" >"$WORK/gpu-pods.yaml"
  create_many "$WORK/gpu-pods.yaml"
  start_watch "bench=gpu$run" "$PODS" "$WORK/gpu$run.events"
  apf_snapshot "$WORK/apf-gs$run.0"
  GS_START=$(now)
  "$LAB" start a gpuslice
  start_pprof "gpuslice-$run"
  cpu_snapshot "$WORK/cpu-gs$run.0" "watcher=$WATCH_PID"
  wait_watch || die "gpuslice bound $(cut -f3 "$WORK/gpu$run.events" | sort -u | wc -l) / $PODS pods within ${BIND_TIMEOUT}s (lab.sh logs a gpuslice)"
  cpu_snapshot "$WORK/cpu-gs$run.1"
  apf_snapshot "$WORK/apf-gs$run.1"
  GS_APF+=("$(apf_delta "$WORK/apf-gs$run.0" "$WORK/apf-gs$run.1")")
  GS_CPU+=("$(cpu_delta "$WORK/cpu-gs$run.0" "$WORK/cpu-gs$run.1")")
  finish_pprof "gpuslice-$run"
  GS=$(python3 "$WATCH" throughput --events "$WORK/gpu$run.events" --start "$GS_START" --pods "$PODS")
  GS_RUNS+=("$GS")
  log "  gpuslice: $GS; Scheduled events: $(scheduled_events "gpu$run") / $PODS"
  # Each scheduler alone: gpuslice stopped for kube-scheduler's run (it would decode every plain pod's events on
  # the same cores; until 2026-12-06 it kept running through kube-scheduler's runs).
  "$LAB" stop a gpuslice
  delete_run_pods "gpu$run"

  # 2. kube-scheduler
  log "2/3 run $run/$RUNS kube-scheduler ($KS_NAME): $PODS plain pods"
  plain_pods "plain$run" "$PODS" >"$WORK/plain-pods.yaml"
  create_many "$WORK/plain-pods.yaml"
  start_watch "bench=plain$run" "$PODS" "$WORK/plain$run.events"
  apf_snapshot "$WORK/apf-ks$run.0"
  KS_START=$(now)
  "$BIN/kube-scheduler" --config="$WORK/kube-scheduler.yaml" --bind-address=127.0.0.1 --secure-port=0 \
    >"$WORK/kube-scheduler-$run.log" 2>&1 &
  KS_PID=$!
  start_pprof "kube-scheduler-$run"
  cpu_snapshot "$WORK/cpu-ks$run.0" "watcher=$WATCH_PID" "kube-scheduler=$KS_PID"
  wait_watch || die "kube-scheduler bound too few pods within ${BIND_TIMEOUT}s ($WORK/kube-scheduler-$run.log)"
  cpu_snapshot "$WORK/cpu-ks$run.1" "kube-scheduler=$KS_PID"
  apf_snapshot "$WORK/apf-ks$run.1"
  KS_APF+=("$(apf_delta "$WORK/apf-ks$run.0" "$WORK/apf-ks$run.1")")
  KS_CPU+=("$(cpu_delta "$WORK/cpu-ks$run.0" "$WORK/cpu-ks$run.1")")
  finish_pprof "kube-scheduler-$run"
  kill "$KS_PID" 2>/dev/null; wait "$KS_PID" 2>/dev/null || true; KS_PID=""
  KS=$(python3 "$WATCH" throughput --events "$WORK/plain$run.events" --start "$KS_START" --pods "$PODS")
  KS_RUNS+=("$KS")
  log "  kube-scheduler: $KS; Scheduled events: $(scheduled_events "plain$run") / $PODS"
  delete_run_pods "plain$run"
done
GS=$(printf '%s\n' "${GS_RUNS[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
KS=$(printf '%s\n' "${KS_RUNS[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
GS_CPU=$(printf '%s\n' "${GS_CPU[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
KS_CPU=$(printf '%s\n' "${KS_CPU[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
GS_APF=$(printf '%s\n' "${GS_APF[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
KS_APF=$(printf '%s\n' "${KS_APF[@]}" | python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')

# Scheduled events once everything settled (Events are written off the bind path, some after the last bind).
EVENTS_LINE=""
for ((run = 1; run <= RUNS; run++)); do
  EVENTS_LINE+="${EVENTS_LINE:+; }run $run: gpuslice $(scheduled_events "gpu$run"), kube-scheduler $(scheduled_events "plain$run")"
done

# ---- 3. freed slice -> pending bound (skipped with --samples 0) ----------------------------------------------
LAT='[]'
if ((SAMPLES > 0)); then
"$LAB" start a gpuslice
log "3/3 freed slice -> pending pod bound: $SAMPLES samples on node $LAT_NODE (one A100, 100 cores)"
kwok_node "$LAT_NODE" '[{"id":"GPU-bench-latency-0","index":0,"count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true}]' 10 |
  kc create -f - >/dev/null
start_watch bench=latency 0 "$WORK/latency.events"
bound_seen() { awk -F'\t' -v p="$1" '$3 == p && $4 != "-" && $2 != "DELETED" {f=1} END {exit !f}' "$WORK/latency.events"; }
unsched_seen() { awk -F'\t' -v p="$1" '$3 == p && $5 == "Unschedulable" {f=1} END {exit !f}' "$WORK/latency.events"; }
wait_for() { local d=$((SECONDS + $1)); shift; until "$@"; do ((SECONDS < d)) || return 1; sleep 0.1; done; }

latency_pod lat-0 | kc create -f - >/dev/null
wait_for 60 bound_seen lat-0 || die "latency holder lat-0 not bound within 60 s"
pairs=""
for ((i = 1; i <= SAMPLES; i++)); do
  holder=lat-$((i - 1)) pending=lat-$i
  latency_pod "$pending" | kc create -f - >/dev/null
  wait_for 60 unsched_seen "$pending" || die "$pending never reported Unschedulable (the node should be full)"
  sleep 2   # the pending pod now sits in the scheduler's backoff/unschedulable queue, as in HAMi #1368
  kc delete pod -n "$NS" "$holder" --grace-period=0 --force >/dev/null 2>&1
  wait_for 120 bound_seen "$pending" || die "$pending not bound within 120 s after $holder was deleted"
  pairs+="${pairs:+,}$holder:$pending"
done
sleep 0.5
kill "$WATCH_PID" 2>/dev/null; WATCH_PID=""
LAT=$(python3 "$WATCH" latency --events "$WORK/latency.events" --pairs "$pairs")
fi

# ---- report -----------------------------------------------------------------------------------------------
python3 - "$GS" "$KS" "$LAT" "$PODS" "$all_nodes" "$LOCK_MODE" "${QPS:-50 (defaults)}" "$GS_CPU" "$KS_CPU" "$AGENT" "$EVENTS_LINE" "$GS_APF" "$KS_APF" "$(if [[ $KS_USER == admin ]]; then echo "admin (system:masters, exempt from APF)"; else echo "system:kube-scheduler (APF workload-high)"; fi)" <<'PY'
import json, sys, statistics
gs_runs, ks_runs, lat = (json.loads(x) for x in sys.argv[1:4])
pods, nodes, lock, qps = sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
gs_cpu, ks_cpu = json.loads(sys.argv[8]), json.loads(sys.argv[9])
print(f"\nclient QPS (both schedulers): {qps}; {len(gs_runs)} run(s), interleaved; kube-scheduler's user: {sys.argv[14]}")
def f(x, d=1): return "-" if x is None else f"{x:.{d}f}"
def ratio(g, k, key): return g[key] / k[key] if g.get(key) and k.get(key) else None
def cell(xs, d=1):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    m = statistics.median(xs)
    return f"**{m:.{d}f}**" + (f" ({min(xs):.{d}f}-{max(xs):.{d}f})" if len(xs) > 1 else "")
agent = "" if sys.argv[10] == "on" else ", no device agent"
print(f"\n| {pods} pods, {nodes} nodes | gpuslice (GPU pods, nodeLock {lock}{agent}) | kube-scheduler (plain pods) | ratio |")
print("|---|---|---|---|")
print(f"| bound | {' / '.join(str(g['bound']) for g in gs_runs)} | {' / '.join(str(k['bound']) for k in ks_runs)} | |")
rows = [("scheduler start -> all bound (s)", "start_to_all_s", False),
        ("first -> last bind (s)", "first_to_last_s", False),
        ("pods/s incl. start-up and sync", "pods_per_s_start", True),
        ("pods/s first -> last bind", "pods_per_s_steady", True)]
for label, key, with_ratio in rows:
    r = cell([ratio(g, k, key) for g, k in zip(gs_runs, ks_runs)], 2) if with_ratio else ""
    print(f"| {label} | {cell([g.get(key) for g in gs_runs])} | {cell([k.get(key) for k in ks_runs])} | {r} |")
if len(gs_runs) > 1:
    print("\nmedian in bold, (min-max) over the runs; a ratio is taken per run (gpuslice's run i against"
          " kube-scheduler's run i, which followed it), then its median.")
    for i, (g, k) in enumerate(zip(gs_runs, ks_runs), 1):
        print(f"- run {i}: gpuslice {f(g.get('pods_per_s_steady'))} pods/s, kube-scheduler "
              f"{f(k.get('pods_per_s_steady'))} pods/s (first -> last bind), ratio "
              f"{f(ratio(g, k, 'pods_per_s_steady'), 2)}")
print(f"\nScheduled events per run, counted after the last run (of {pods} pods each): {sys.argv[11]}")
gs_apf, ks_apf = json.loads(sys.argv[12]), json.loads(sys.argv[13])
def apf(d):
    return "; ".join(f"{k} {v['requests']} requests, {v['wait_ms']:.2f} ms" +
                     (f", {v['rejected']} rejected (429)" if v.get('rejected') else "") for k, v in sorted(d.items())) or "none"
print("\nAPI Priority and Fairness, requests queued (non-exempt) per run, their average wait in the queue"
      " (apiserver_flowcontrol_request_wait_duration_seconds) and those rejected (apiserver_flowcontrol_rejected_requests_total):")
for i, (g, k) in enumerate(zip(gs_apf, ks_apf), 1):
    print(f"- run {i}: gpuslice's run: {apf(g)}; kube-scheduler's run: {apf(k)}")
ls = [s['latency_s'] for s in lat if s['latency_s'] is not None]
if ls:
    print(f"\nfreed slice -> pending pod bound (gpuslice, nodeLock {lock}, {len(ls)} samples): "
          f"p50 {statistics.median(ls) * 1000:.0f} ms, max {max(ls) * 1000:.0f} ms; "
          f"samples (ms): {', '.join(f'{x * 1000:.0f}' for x in ls)}")
# Where the cores went: CPU ms per bound pod of each process, from the scheduler's start to its last bind
# (median over the runs); "machine" is every process on the machine (/proc/stat: user, nice, system, irq, softirq).
def per_pod(runs, name):
    return [r[name] * 1000 / int(pods) for r in runs if name in r]
names = sorted({n for r in gs_cpu + ks_cpu for n in r}, key=lambda n: (n == "machine", n))
print(f"\nCPU ms per pod, scheduler start -> all bound (median over the runs; (min-max)):\n")
print("| process | during gpuslice's run | during kube-scheduler's run |")
print("|---|---|---|")
for n in names:
    print(f"| {n} | {cell(per_pod(gs_cpu, n), 2)} | {cell(per_pod(ks_cpu, n), 2)} |")

PY

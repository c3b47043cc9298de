#!/usr/bin/env bash
# Scale through a real kube-apiserver (issue 12 item 4): N kwok nodes x C A100 cards and P pods, gpuslice beside
# the upstream kube-scheduler in the same run, on its own hermetic lab instance (lab/lab.sh, tenant a only).
#
#   1. lab/lab.sh up --tenants a --no-gpuslice; N kwok Nodes (lab/nodes.sh kwok_node + a100_register, C cards,
#      C x 10 slices) created in parallel; wait until kwok reports them all Ready.
#   2. gpuslice: P GPU pods (bench/pods.sh gpu_pod: nvidia.com/gpu 1, gpumem 1000, gpucores 5, webhook-ignored,
#      schedulerName gpuslice-scheduler) created while gpuslice is stopped; then `lab.sh start a gpuslice`.
#      From that instant: /readyz on its health port (informers listed and synced, Lease held), first bind and
#      all bound as seen by a watch on the API server (bench/apiserver_watch.py), steady pods/s; VmRSS and VmHWM
#      from /proc/<pid>/status every 0.5 s during the run and for SETTLE seconds after the last bind.
#      Then gpuslice is stopped and its pods deleted (DeleteCollection, grace 0), so the second scheduler
#      starts against the same nodes and no leftover pods.
#   3. kube-scheduler (the lab's binary, lab/build-tools.sh --print-bin; profile bench-kube-scheduler, leader
#      election off, same client QPS/burst): P plain pods (bench/pods.sh plain_pod) created first; same figures
#      (/readyz on its secure port, first bind, all bound, steady pods/s, RSS).
#
# Pod and node creation (parallel, through `apiserver_watch.py create`) is timed and logged but is not part of
# any figure. The mock device agent is not started (nodeLock off by default: the figure is the list/sync, bind
# rate and memory of the scheduler, not HAMi's lock cycle); kwok keeps nodes Ready (Lease heartbeats) and marks
# bound pods Running for both schedulers alike.
#
#   bench/scale_bench.sh [--nodes 5000] [--cards 8] [--pods 40000] [--qps 5000] [--node-lock off|hami]
#                        [--threads 16] [--settle 20] [--only gpuslice|kube-scheduler] [--keep]
#     --qps N    client QPS, burst 2N, for BOTH schedulers (gpuslice kubeQPS/kubeBurst, kube-scheduler
#                clientConnection.qps/burst); default 5000, high so that neither is held by its client limiter
# Needs root (the lab does). Its own lab instance: GPUSLICE_LAB_STATE (default /tmp/gsscale/state) and the
# GPUSLICE_LAB_* ports from the environment (defaults below, beside apiserver_bench.sh's), brought up and down by
# this script (a lab already running in that state is refused). Prints a Markdown table for bench/RESULTS.md.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
# shellcheck source=lab/nodes.sh
source "$REPO/lab/nodes.sh"
# shellcheck source=bench/pods.sh
source "$BENCH_DIR/pods.sh"
LAB=$REPO/lab/lab.sh
export GPUSLICE_LAB_STATE=${GPUSLICE_LAB_STATE:-/tmp/gsscale/state}
export GPUSLICE_LAB_ETCD_PORT=${GPUSLICE_LAB_ETCD_PORT:-15479}
export GPUSLICE_LAB_API_PORT=${GPUSLICE_LAB_API_PORT:-19543}
export GPUSLICE_LAB_KONN_PORT=${GPUSLICE_LAB_KONN_PORT:-9632}
export GPUSLICE_LAB_SCHED_PORT=${GPUSLICE_LAB_SCHED_PORT:-11659}
export GPUSLICE_LAB_NETNS_PREFIX=${GPUSLICE_LAB_NETNS_PREFIX:-gss}
if [[ -z ${GPUSLICE_BIN:-} && -x $REPO/build/bench/cmd/gpuslice ]]; then export GPUSLICE_BIN=$REPO/build/bench/cmd/gpuslice; fi
STATE=$GPUSLICE_LAB_STATE
BIN=$("$REPO/lab/build-tools.sh" --print-bin)
WATCH=$BENCH_DIR/apiserver_watch.py
NODES=5000 CARDS=8 PODS=40000 QPS=5000 NODE_LOCK=off THREADS=16 SETTLE=20 ONLY="" KEEP=false
NS=gpuslice-scale
GS_NAME=gpuslice-scheduler
KS_NAME=bench-kube-scheduler
BIND_TIMEOUT=${BIND_TIMEOUT:-1800}

usage() { sed -n '23,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --cards) CARDS=$2; shift 2 ;;
    --pods) PODS=$2; shift 2 ;;
    --qps) QPS=$2; shift 2 ;;
    --node-lock) NODE_LOCK=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --settle) SETTLE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --keep) KEEP=true; shift ;;
    *) usage ;;
  esac
done
for v in "$NODES" "$CARDS" "$PODS" "$QPS" "$THREADS" "$SETTLE"; do [[ $v =~ ^[0-9]+$ ]] || usage; done
[[ $NODE_LOCK == off || $NODE_LOCK == hami ]] || usage
[[ -z $ONLY || $ONLY == gpuslice || $ONLY == kube-scheduler ]] || usage

log() { printf '[scale %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN {printf "%.1f", a - b}'; }

WORK=$(mktemp -d /tmp/gpuslice-scale-bench.XXXXXX)
KS_PID="" WATCH_PID="" SAMPLER_PID="" BROUGHT_UP=false
cleanup() {
  set +eu
  [[ -n $SAMPLER_PID ]] && kill "$SAMPLER_PID" 2>/dev/null
  [[ -n $WATCH_PID ]] && kill "$WATCH_PID" 2>/dev/null
  [[ -n $KS_PID ]] && kill "$KS_PID" 2>/dev/null && wait "$KS_PID" 2>/dev/null
  if $BROUGHT_UP && ! $KEEP; then log "lab/lab.sh down"; "$LAB" down >/dev/null 2>&1; fi
  log "work files kept in $WORK"
}
trap cleanup EXIT

KCFG=$STATE/tenant-a/admin.kubeconfig
GS_CONFIG=$STATE/tenant-a/gpuslice-config.yaml
kc() { "$BIN/kubectl" --kubeconfig "$KCFG" "$@"; }
# Upstream kube-scheduler's identity as a control plane gives it (system:kube-scheduler: its RBAC, and APF's
# "kube-scheduler" FlowSchema at workload-high, where manifests/base/flowschema.yaml puts gpuslice); admin
# (system:masters) would be exempt from API Priority and Fairness. Until 2026-12-06 it ran as admin.
KS_KCFG=$STATE/tenant-a/kube-scheduler.kubeconfig
conditions() {
  printf 'load average %s; %s free MiB' "$(cut -d' ' -f1-3 /proc/loadavg)" "$(free -m | awk '/^Mem:/ {print $7}')"
}

# ---- the lab and the nodes ----------------------------------------------------------------------------------
if "$LAB" status >/dev/null 2>&1; then die "a lab is running in $STATE: lab/lab.sh down it first (same env)"; fi
log "lab/lab.sh up --tenants a --no-gpuslice ($STATE, API port $GPUSLICE_LAB_API_PORT); $(conditions)"
BROUGHT_UP=true
"$LAB" up --tenants a --no-gpuslice >"$WORK/lab-up.log" 2>&1 || { tail -20 "$WORK/lab-up.log"; die "lab up"; }
GS_BIN=$STATE/bin/gpuslice
[[ -x $GS_BIN ]] || die "no gpuslice binary in the lab ($WORK/lab-up.log): build it (cmake --preset release -B build/bench)"
NETNS=$(awk -F= '$1 == "NETNS_PREFIX" {print $2}' "$STATE/lab.env")-a
HEALTH=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["server"]["healthBindAddress"])' "$GS_CONFIG")

# gpuslice's configuration for this run: client QPS/burst and the node lock.
python3 - "$GS_CONFIG" "$NODE_LOCK" "$QPS" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c.setdefault("scheduler", {})
s["nodeLock"] = sys.argv[2]
s["kubeQPS"] = int(sys.argv[3])
s["kubeBurst"] = 2 * int(sys.argv[3])
open(sys.argv[1], "w").write(yaml.safe_dump(c, sort_keys=False))
PY

kwok_node "a-scale-@I@" "$(a100_register "GPU-a-scale-@I@" "$CARDS")" "$((CARDS * 10))" 64 512Gi \
  "gpuslice.io/lab: extra" >"$WORK/node-template.yaml"
log "creating $NODES kwok nodes x $CARDS A100 ($THREADS connections)"
python3 "$WATCH" create --kubeconfig "$KCFG" --template "$WORK/node-template.yaml" --count "$NODES" --threads "$THREADS" ||
  die "node creation"
ready_nodes() {
  kc get nodes -l gpuslice.io/lab=extra -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c True || true
}
t0=$(now) deadline=$((SECONDS + 600))
until (($(ready_nodes) >= NODES)); do
  ((SECONDS < deadline)) || die "only $(ready_nodes) / $NODES nodes Ready after 600 s (lab.sh logs a kwok)"
  sleep 2
done
ALL_NODES=$(kc get nodes --no-headers | wc -l)
log "  $NODES nodes Ready $(since "$t0") s after creation ($ALL_NODES nodes in all)"
kc create namespace "$NS" >/dev/null

# ---- helpers ------------------------------------------------------------------------------------------------
# start_watch SELECTOR OUTFILE: background watch that exits once PODS pods are bound; returns once it has listed.
start_watch() {
  rm -f "$2.ready"
  python3 "$WATCH" watch --kubeconfig "$KCFG" --namespace "$NS" --selector "$1" --expect-bound "$PODS" \
    --timeout "$BIND_TIMEOUT" --ready-file "$2.ready" >"$2" 2>"$2.err" &
  WATCH_PID=$!
  local d=$((SECONDS + 300))
  until [[ -s $2.ready ]]; do
    kill -0 "$WATCH_PID" 2>/dev/null || die "the watch exited ($2.err)"
    ((SECONDS < d)) || die "the watch did not list within 300 s"
    sleep 0.2
  done
}
# rss_sampler PID OUT: "unix-seconds VmRSS-kB VmHWM-kB" every 0.5 s while PID lives.
rss_sampler() {
  while [[ -r /proc/$1/status ]]; do
    awk -v t="$(now)" '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} END {if (r) print t, r, h}' "/proc/$1/status" 2>/dev/null
    sleep 0.5
  done >"$2"
}
# wait_ready URL-FETCHING-CMD...: unix seconds of the first success (polled every 0.1 s), or "-".
wait_ready() {
  local d=$((SECONDS + BIND_TIMEOUT))
  until "$@" >/dev/null 2>&1; do ((SECONDS < d)) || { echo -; return; }; sleep 0.1; done
  now
}
bound_count() { cut -f3,4 "$1" | awk -F'\t' '$2 != "-" {print $1}' | sort -u | wc -l; }
# run_phase NAME SELECTOR START_FN READY_FN: one scheduler's figures into $WORK/NAME.{events,rss,json}.
run_phase() {
  local name=$1 sel=$2 start_fn=$3 ready_fn=$4 pid ready rc=0
  start_watch "$sel" "$WORK/$name.events"
  log "  $name: start ($(conditions))"
  local t_start; t_start=$(now)
  "$start_fn"
  pid=$PHASE_PID
  rss_sampler "$pid" "$WORK/$name.rss" &
  SAMPLER_PID=$!
  ready=$(wait_ready "$ready_fn")
  log "  $name: ready after $(awk -v a="$ready" -v b="$t_start" 'BEGIN {if (a == "-") print "-"; else printf "%.1f", a - b}') s"
  wait "$WATCH_PID" || rc=$?
  WATCH_PID=""
  ((rc == 0)) || die "$name bound $(bound_count "$WORK/$name.events") / $PODS pods within ${BIND_TIMEOUT}s"
  local t_all; t_all=$(now)
  log "  $name: all $PODS bound after $(since "$t_start") s; settling ${SETTLE}s ($(conditions))"
  cp "/proc/$pid/status" "$WORK/$name.status-all-bound" 2>/dev/null || true
  sleep "$SETTLE"
  # Where the memory is (for a profile): the process status, and its mappings (anonymous heap arenas vs the binary).
  cp "/proc/$pid/status" "$WORK/$name.status-settled" 2>/dev/null || true
  cp "/proc/$pid/smaps" "$WORK/$name.smaps" 2>/dev/null || true
  kill "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""
  python3 - "$WORK/$name" "$t_start" "$ready" "$t_all" "$PODS" "$WATCH" <<'PY'
import json, subprocess, sys
base, t_start, ready, t_all, pods, watch = sys.argv[1:7]
t_start, t_all = float(t_start), float(t_all)
tp = json.loads(subprocess.check_output(["python3", watch, "throughput", "--events", base + ".events",
                                         "--start", str(t_start), "--pods", pods]))
rows = [tuple(map(float, l.split())) for l in open(base + ".rss") if l.strip()]
during = [r for r in rows if r[0] <= t_all]
after = [r for r in rows if r[0] > t_all]
tp["ready_s"] = None if ready == "-" else float(ready) - t_start
tp["rss_peak_mb"] = max(r[1] for r in rows) / 1024 if rows else None
tp["hwm_mb"] = max(rows[-1][2], max(r[1] for r in rows)) / 1024 if rows else None  # VmHWM, or a higher sample
tp["rss_at_all_bound_mb"] = during[-1][1] / 1024 if during else None
tp["rss_settled_mb"] = after[-1][1] / 1024 if after else None
tp["samples"] = len(rows)
json.dump(tp, open(base + ".json", "w"))
print(json.dumps(tp))
PY
}

# ---- 1. gpuslice ----------------------------------------------------------------------------------------------
start_gpuslice() {
  "$LAB" start a gpuslice
  PHASE_PID=$(cat "$STATE/pids/a-gpuslice.pid")
}
gpuslice_ready() { ip netns exec "$NETNS" curl -sf "http://$HEALTH/readyz"; }
if [[ $ONLY != kube-scheduler ]]; then
  log "1/2 gpuslice ($("$GS_BIN" --version 2>/dev/null | head -1), kubeQPS $QPS burst $((2 * QPS)), nodeLock $NODE_LOCK): $PODS GPU pods on $ALL_NODES nodes"
  gpu_pod gpu-@I@ gpu >"$WORK/gpu-template.yaml"
  python3 "$WATCH" create --kubeconfig "$KCFG" --template "$WORK/gpu-template.yaml" --count "$PODS" --threads "$THREADS" ||
    die "pod creation"
  [[ $NODE_LOCK == off ]] || "$LAB" start a mock-device-agent
  run_phase gpuslice bench=gpu start_gpuslice gpuslice_ready
  grep -iE 'sync|listed' "$STATE/logs/a-gpuslice.log" | head -20 >"$WORK/gpuslice-sync.log" || true
  "$LAB" stop a gpuslice
  [[ $NODE_LOCK == off ]] || "$LAB" stop a mock-device-agent
  log "  deleting the GPU pods"
  python3 "$WATCH" delete-pods --kubeconfig "$KCFG" --namespace "$NS" --selector bench=gpu --prefix gpu- --count "$PODS" \
    --threads "$THREADS"
fi

# ---- 2. kube-scheduler ----------------------------------------------------------------------------------------
KS_PORT=$(awk -F= '$1 == "SCHED_PORT_BASE" {print $2}' "$STATE/lab.env")
start_kube_scheduler() {
  cat >"$WORK/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $KS_KCFG, qps: $QPS, burst: $((2 * QPS))}
leaderElection: {leaderElect: false}
profiles: [{schedulerName: $KS_NAME}]
EOF
  "$BIN/kube-scheduler" --config="$WORK/kube-scheduler.yaml" --bind-address=127.0.0.1 --secure-port="$KS_PORT" \
    >"$WORK/kube-scheduler.log" 2>&1 &
  KS_PID=$!
  PHASE_PID=$KS_PID
}
# /readyz is on the always-allowed paths (anonymous): it includes the handlers' informer sync.
kube_scheduler_ready() { curl -sfk "https://127.0.0.1:$KS_PORT/readyz"; }
if [[ $ONLY != gpuslice ]]; then
  log "2/2 kube-scheduler ($("$BIN/kube-scheduler" --version 2>/dev/null), qps $QPS burst $((2 * QPS))): $PODS plain pods"
  plain_pod plain-@I@ plain >"$WORK/plain-template.yaml"
  python3 "$WATCH" create --kubeconfig "$KCFG" --template "$WORK/plain-template.yaml" --count "$PODS" --threads "$THREADS" ||
    die "pod creation"
  run_phase kube-scheduler bench=plain start_kube_scheduler kube_scheduler_ready
  kill "$KS_PID" 2>/dev/null; wait "$KS_PID" 2>/dev/null || true; KS_PID=""
fi

# ---- report ---------------------------------------------------------------------------------------------------
python3 - "$WORK" "$PODS" "$ALL_NODES" "$NODES" "$CARDS" "$QPS" "$NODE_LOCK" <<'PY'
import json, os, sys
work, pods, all_nodes, nodes, cards, qps, lock = sys.argv[1:8]
def load(n):
    p = os.path.join(work, n + ".json")
    return json.load(open(p)) if os.path.exists(p) else {}
gs, ks = load("gpuslice"), load("kube-scheduler")
def f(x, d=1): return "-" if x is None else f"{x:.{d}f}"
def ratio(k, inverse=False):
    a, b = gs.get(k), ks.get(k)
    if not a or not b: return ""
    return f(b / a if inverse else a / b, 2)
print(f"\nclient QPS {qps} / burst {2 * int(qps)} for both schedulers; gpuslice nodeLock {lock}")
print(f"\n| {pods} pods, {nodes} nodes x {cards} A100 ({all_nodes} nodes in all) | gpuslice (GPU pods) | kube-scheduler (plain pods) | ratio |")
print("|---|---|---|---|")
print(f"| bound | {gs.get('bound', '-')} | {ks.get('bound', '-')} | |")
print(f"| start -> /readyz (listed and synced) (s) | {f(gs.get('ready_s'))} | {f(ks.get('ready_s'))} | |")
print(f"| start -> first bind (s) | {f(gs.get('first'))} | {f(ks.get('first'))} | |")
print(f"| start -> all bound (s) | {f(gs.get('start_to_all_s'))} | {f(ks.get('start_to_all_s'))} | |")
print(f"| pods/s incl. start-up and sync | {f(gs.get('pods_per_s_start'))} | {f(ks.get('pods_per_s_start'))} | {ratio('pods_per_s_start')} |")
print(f"| pods/s first -> last bind | {f(gs.get('pods_per_s_steady'))} | {f(ks.get('pods_per_s_steady'))} | {ratio('pods_per_s_steady')} |")
print(f"| pods/s, middle 80 % of binds | {f(gs.get('pods_per_s_mid80'))} | {f(ks.get('pods_per_s_mid80'))} | {ratio('pods_per_s_mid80')} |")
print(f"| RSS peak (VmHWM) (MiB) | {f(gs.get('hwm_mb'))} | {f(ks.get('hwm_mb'))} | |")
print(f"| RSS when all bound (MiB) | {f(gs.get('rss_at_all_bound_mb'))} | {f(ks.get('rss_at_all_bound_mb'))} | |")
print(f"| RSS settled (MiB) | {f(gs.get('rss_settled_mb'))} | {f(ks.get('rss_settled_mb'))} | |")
PY

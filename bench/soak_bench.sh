#!/usr/bin/env bash
# The soak (issue 14 item 5; not in CI): an hour of GPU pod create/delete churn through a real kube-apiserver with
# the webhook under a steady extra load, and gpuslice's process sampled throughout: does anything grow?
#
#   1. lab/lab.sh up --tenants a --extra-nodes NODES (kwok nodes x 4 A100, 40 slices each; gpuslice serve and the
#      mock device agent in the tenant's network namespace), then gpuslice restarted with --node-lock and --qps.
#   2. Steady webhook load: bench/webhook_load inside the namespace, straight at gpuslice's webhook port, at
#      --review-rate reviews/s over --review-connections keep-alive connections (fixed rate, the review of
#      bench/data/gpu_pod_review_v1.json), for the whole churn.
#   3. Churn (bench/soak_churn.py): --rate GPU pods/s created through the API server (no schedulerName, no
#      opt-out: the API server calls the webhook, which mutates them; gpuslice binds them), each deleted (grace 0)
#      --lifetime s after it was asked for, so the cluster holds about rate x lifetime pods. A watch times every
#      bind. Every --sample-interval s one CSV row: VmRSS/VmHWM, open fds, threads, CPU of the gpuslice process
#      (/proc), its /metrics gauges and counters (pending pods, binds in flight, live webhook connections, API
#      requests and watch events, process_* if any), and the interval's creates, binds (p50/p99/max), deletes and
#      errors.
#   4. bench/soak_report.py: first vs last window (10 min) medians, slope per hour after the first window, bind
#      latency over time, and the verdict against the thresholds documented there (exit 1 on FAIL).
#
#   bench/soak_bench.sh [--duration 3600] [--rate 20] [--lifetime 10] [--review-rate 100]
#                       [--review-connections 4] [--sample-interval 10] [--nodes 20] [--node-lock hami|off]
#                       [--qps 500] [--out DIR] [--keep]
#     --node-lock  gpuslice's scheduler.nodeLock (default off: bind straight away; hami is the lab's lock,
#                  annotations, device-agent handshake and unlock for every pod, which binds 3-7 pods/s here, far
#                  below 20/s, so the backlog, not the process, would grow); --qps its kubeQPS (burst 2x;
#                  default 500, so that the client limiter does not decide whether 20 pods/s keep up)
#
# Needs root (the lab does) and a release build: cmake --preset release -B build/release &&
# cmake --build build/release --target gpuslice webhook_load (GPUSLICE_BIN overrides the gpuslice binary,
# WEBHOOK_LOAD the client). Its own lab instance: GPUSLICE_LAB_STATE (default /tmp/gssoak/state) and the
# GPUSLICE_LAB_* ports from the environment (defaults below, beside the other benches'); a lab already running
# in that state is refused. Results (samples.csv, churn.json, webhook_load.out, report.md, the lab's gpuslice
# log) go to --out (default: a new /tmp/gpuslice-soak.XXXXXX).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
LAB=$REPO/lab/lab.sh
export GPUSLICE_LAB_STATE=${GPUSLICE_LAB_STATE:-/tmp/gssoak/state}
export GPUSLICE_LAB_ETCD_PORT=${GPUSLICE_LAB_ETCD_PORT:-15579}
export GPUSLICE_LAB_API_PORT=${GPUSLICE_LAB_API_PORT:-19643}
export GPUSLICE_LAB_KONN_PORT=${GPUSLICE_LAB_KONN_PORT:-9732}
export GPUSLICE_LAB_SCHED_PORT=${GPUSLICE_LAB_SCHED_PORT:-11759}
export GPUSLICE_LAB_NETNS_PREFIX=${GPUSLICE_LAB_NETNS_PREFIX:-gsk}
if [[ -z ${GPUSLICE_BIN:-} && -x $REPO/build/release/cmd/gpuslice ]]; then export GPUSLICE_BIN=$REPO/build/release/cmd/gpuslice; fi
WEBHOOK_LOAD=${WEBHOOK_LOAD:-$REPO/build/release/bench/webhook_load}
STATE=$GPUSLICE_LAB_STATE
BIN=$("$REPO/lab/build-tools.sh" --print-bin)
DURATION=3600 RATE=20 LIFETIME=10 REVIEW_RATE=100 REVIEW_CONNS=4 INTERVAL=10 NODES=20 OUT="" KEEP=false
NODE_LOCK=off QPS=500
NS=gpuslice-soak

usage() { sed -n '20,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --duration) DURATION=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --lifetime) LIFETIME=$2; shift 2 ;;
    --review-rate) REVIEW_RATE=$2; shift 2 ;;
    --review-connections) REVIEW_CONNS=$2; shift 2 ;;
    --sample-interval) INTERVAL=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --node-lock) NODE_LOCK=$2; shift 2 ;;
    --qps) QPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=true; shift ;;
    *) usage ;;
  esac
done
[[ $NODE_LOCK == hami || $NODE_LOCK == off ]] || usage
for v in "$DURATION" "$RATE" "$LIFETIME" "$REVIEW_RATE" "$REVIEW_CONNS" "$INTERVAL" "$NODES" "$QPS"; do
  [[ $v =~ ^[0-9]+$ ]] || usage
done
[[ -x $WEBHOOK_LOAD ]] || { echo "no $WEBHOOK_LOAD: cmake --build build/release --target webhook_load" >&2; exit 1; }

log() { printf '[soak %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
conditions() {
  printf 'load average %s; %s MiB available; %s cores' "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(free -m | awk '/^Mem:/ {print $7}')" "$(nproc)"
}

OUT=${OUT:-$(mktemp -d /tmp/gpuslice-soak.XXXXXX)}
mkdir -p "$OUT"
LOAD_PID="" BROUGHT_UP=false
cleanup() {
  set +eu
  [[ -n $LOAD_PID ]] && kill "$LOAD_PID" 2>/dev/null
  [[ -f $STATE/logs/a-gpuslice.log ]] && cp "$STATE/logs/a-gpuslice.log" "$OUT/gpuslice.log"
  if $BROUGHT_UP && ! $KEEP; then log "lab/lab.sh down"; "$LAB" down >/dev/null 2>&1; fi
  log "results in $OUT"
}
trap cleanup EXIT

KCFG=$STATE/tenant-a/admin.kubeconfig
kc() { "$BIN/kubectl" --kubeconfig "$KCFG" "$@"; }

# ---- the lab ------------------------------------------------------------------------------------------------
if "$LAB" status >/dev/null 2>&1; then die "a lab is running in $STATE: lab/lab.sh down it first (same env)"; fi
log "lab/lab.sh up --tenants a --extra-nodes $NODES ($STATE, API port $GPUSLICE_LAB_API_PORT); $(conditions)"
BROUGHT_UP=true
"$LAB" up --tenants a --extra-nodes "$NODES" >"$OUT/lab-up.log" 2>&1 || { tail -20 "$OUT/lab-up.log"; die "lab up"; }
[[ -f $STATE/pids/a-gpuslice.pid ]] || die "gpuslice is not running in tenant a ($OUT/lab-up.log)"
NETNS=$(awk -F= '$1 == "NETNS_PREFIX" {print $2}' "$STATE/lab.env")-a
GS_CONFIG=$STATE/tenant-a/gpuslice-config.yaml
python3 - "$GS_CONFIG" "$NODE_LOCK" "$QPS" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c.setdefault("scheduler", {})
s["nodeLock"] = sys.argv[2]
s["kubeQPS"] = int(sys.argv[3])
s["kubeBurst"] = 2 * int(sys.argv[3])
open(sys.argv[1], "w").write(yaml.safe_dump(c, sort_keys=False))
PY
"$LAB" stop a gpuslice >>"$OUT/lab-up.log" 2>&1
"$LAB" start a gpuslice >>"$OUT/lab-up.log" 2>&1
read -r HEALTH WEBHOOK LOCK_MODE < <(python3 -c '
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
print(c["server"]["healthBindAddress"], c["webhook"]["bindAddress"], c.get("scheduler", {}).get("nodeLock", "hami"))' "$GS_CONFIG")
GS_PID=$(cat "$STATE/pids/a-gpuslice.pid")
log "gpuslice pid $GS_PID ($("$STATE/bin/gpuslice" --version 2>/dev/null | head -1)), nodeLock $LOCK_MODE, kubeQPS $QPS, webhook $WEBHOOK, health $HEALTH in $NETNS"
kc create namespace "$NS" >/dev/null

# ---- the webhook's steady load ------------------------------------------------------------------------------
# The churn's own reviews (RATE/s, through the API server and the tunnel) come on top of these.
LOAD_SECONDS=$((DURATION + 30))
log "webhook load: $REVIEW_RATE reviews/s over $REVIEW_CONNS keep-alive connections for $LOAD_SECONDS s"
ip netns exec "$NETNS" "$WEBHOOK_LOAD" --port "${WEBHOOK##*:}" --ca "$STATE/tenant-a/webhook-certs/ca.crt" \
  --body "$BENCH_DIR/data/gpu_pod_review_v1.json" --connections "$REVIEW_CONNS" --rate "$REVIEW_RATE" \
  --duration "$LOAD_SECONDS" --warmup 1 --threads 1 >"$OUT/webhook_load.out" 2>&1 &
LOAD_PID=$!
sleep 3
kill -0 "$LOAD_PID" 2>/dev/null || die "webhook_load exited: $(cat "$OUT/webhook_load.out")"

# ---- churn and samples --------------------------------------------------------------------------------------
cat >"$OUT/conditions.txt" <<EOF
start $(date -u +%FT%TZ); $(conditions); $(nproc) cores shared with other sessions (builds, tests)
gpuslice $("$STATE/bin/gpuslice" --version 2>/dev/null | head -1) (release build), nodeLock $LOCK_MODE, kubeQPS $QPS burst $((2 * QPS)), mock device agent on
churn: $RATE pods/s for $DURATION s, lifetime $LIFETIME s; $NODES kwok nodes x 4 A100 ($((NODES * 40)) slices)
webhook load: $REVIEW_RATE reviews/s over $REVIEW_CONNS connections; samples every $INTERVAL s
EOF
log "churn: $RATE pods/s for $DURATION s, lifetime $LIFETIME s; samples every $INTERVAL s -> $OUT/samples.csv"
rc=0
python3 "$BENCH_DIR/soak_churn.py" --kubeconfig "$KCFG" --namespace "$NS" --rate "$RATE" --duration "$DURATION" \
  --lifetime "$LIFETIME" --sample-interval "$INTERVAL" --pid-file "$STATE/pids/a-gpuslice.pid" \
  --metrics-cmd "ip netns exec $NETNS curl -s --max-time 5 http://$HEALTH/metrics" \
  --csv "$OUT/samples.csv" --summary "$OUT/churn.json" --binds "$OUT/binds.csv" 2>"$OUT/churn.log" || rc=$?
((rc == 0)) || { tail -5 "$OUT/churn.log"; die "soak_churn.py exited $rc"; }
log "churn done; waiting for the webhook load client"
wait "$LOAD_PID" || log "webhook_load exited $?"
LOAD_PID=""
ip netns exec "$NETNS" curl -s --max-time 5 "http://$HEALTH/metrics" >"$OUT/metrics-end.txt" || true
cp "/proc/$GS_PID/status" "$OUT/status-end" 2>/dev/null || true
echo "end $(date -u +%FT%TZ); $(conditions)" >>"$OUT/conditions.txt"

# ---- report -------------------------------------------------------------------------------------------------
rc=0
python3 "$BENCH_DIR/soak_report.py" --csv "$OUT/samples.csv" --summary "$OUT/churn.json" --duration "$DURATION" \
  --binds "$OUT/binds.csv" \
  --webhook-load "$OUT/webhook_load.out" --rate "$RATE" --lifetime "$LIFETIME" >"$OUT/report.md" || rc=$?
{ cat "$OUT/conditions.txt"; echo; cat "$OUT/report.md"; } >&2
exit $rc

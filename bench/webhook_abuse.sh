#!/usr/bin/env bash
# Webhook abuse from the tenant's side (issue 14 item 3): a Release `gpuslice serve` (webhook only, scheduler
# off) on 127.0.0.1 with a self-signed pair from `gpuslice certs`, its health listener on another port, then
# bench/webhook_abuse.py: a steady load of 20 reviews/s on new TLS connections and 10 /readyz/s while each abuse
# case runs; figures in bench/RESULTS.md "Webhook abuse".
#   bench/webhook_abuse.sh [build-dir]          (default build/bench; configured and built here when missing)
#   CASES=idle10k_many_sources,pipelined bench/webhook_abuse.sh    some cases only (webhook_abuse.py --cases)
#   CONFIG=extra.yaml ...                       webhook keys merged into the server's configuration
#   NOBUILD=1 ...                               run the binary in build-dir as it is (e.g. one built from older code)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/bench}
if [ ! -f "$B/build.ninja" ]; then
  cmake --preset release -B "$B" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
fi
[ -n "${NOBUILD:-}" ] || nice -n 10 cmake --build "$B" -j2 --target gpuslice >/dev/null
W=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT
# 10,000 idle connections plus the steady load's: the server's and this shell's descriptors.
ulimit -n 20000
"$B/cmd/gpuslice" certs --service gpuslice --namespace kube-system --ip-san 127.0.0.1 --out-dir "$W/pki" >/dev/null
cat >"$W/config.yaml" <<CFG
apiVersion: gpuslice.io/v1alpha1
kind: GpusliceConfiguration
logging: {format: json, verbosity: 0}
webhook:
  bindAddress: 127.0.0.1:0
  tlsCertFile: $W/pki/tls.crt
  tlsPrivateKeyFile: $W/pki/tls.key
$(if [ -n "${CONFIG:-}" ]; then sed 's/^/  /' "$CONFIG"; fi)
scheduler: {enabled: false}
server: {healthBindAddress: 127.0.0.1:0}
CFG
"$B/cmd/gpuslice" serve --config "$W/config.yaml" --enable-scheduler=false 2>"$W/serve.log" &
PID=$!
for _ in $(seq 100); do grep -q '"healthPort":' "$W/serve.log" && break; sleep 0.1; done
PORT=$(grep -o '"port":[0-9]*' "$W/serve.log" | head -1 | cut -d: -f2)
HEALTH=$(grep -o '"healthPort":[0-9]*' "$W/serve.log" | head -1 | cut -d: -f2)
echo "$(date -u +%FT%TZ) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); gpuslice $(git rev-parse --short HEAD) pid $PID port $PORT health $HEALTH"
python3 bench/webhook_abuse.py --port "$PORT" --health-port "$HEALTH" --ca "$W/pki/ca.crt" \
  --body bench/data/gpu_pod_review_v1.json --pid "$PID" ${CASES:+--cases "$CASES"} ${IDLE:+--idle "$IDLE"} ${JSON:+--json "$JSON"}
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -0 "$PID" && echo "server still running" || { echo "server DIED"; tail -20 "$W/serve.log"; exit 1; }

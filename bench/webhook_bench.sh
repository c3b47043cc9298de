#!/usr/bin/env bash
# The webhook server benchmark: Release build, certs, `gpuslice serve` on 127.0.0.1, then the load client
# in closed-loop (throughput) and fixed-rate (latency at 1,000 reviews/s) modes, plus the server's RSS.
#   bench/webhook_bench.sh [build-dir]        (default build/release)
#   SERVER=bench bench/webhook_bench.sh ...   uses bench/webhook_bench_server (same Server + review(), no CLI)
#                                             so only the webhook libraries need a Release build
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
[ -f "$B/build.ninja" ] || cmake --preset release -B "$B" >/dev/null
W=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$W"' EXIT
if [ "${SERVER:-serve}" = bench ]; then
  cmake --build "$B" -j2 --target webhook_bench_server webhook_load >/dev/null
  # Certificates from a separate (any) build of gpuslice, or openssl as a fallback.
  G=${GPUSLICE:-$(ls build/*/cmd/gpuslice 2>/dev/null | head -1)}
  "$G" certs --service gpuslice --namespace kube-system --ip-san 127.0.0.1 --out-dir "$W/pki" 2>/dev/null
  "$B/bench/webhook_bench_server" "$W/pki/tls.crt" "$W/pki/tls.key" "${THREADS:-2}" >"$W/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do grep -q 'port=' "$W/serve.log" && break; sleep 0.1; done
  PORT=$(grep -o 'port=[0-9]*' "$W/serve.log" | head -1 | cut -d= -f2)
else
  cmake --build "$B" -j2 --target gpuslice webhook_load >/dev/null
  "$B/cmd/gpuslice" certs --service gpuslice --namespace kube-system --ip-san 127.0.0.1 --out-dir "$W/pki" 2>/dev/null
  "$B/cmd/gpuslice" serve --tls-cert-file "$W/pki/tls.crt" --tls-private-key-file "$W/pki/tls.key" \
    --webhook-bind-address 127.0.0.1:0 --health-bind-address "" --enable-scheduler=false \
    --webhook-threads "${THREADS:-2}" --logging-format json 2>"$W/serve.log" &
  PID=$!
  for _ in $(seq 100); do grep -q '"port":' "$W/serve.log" && break; sleep 0.1; done
  PORT=$(grep -o '"port":[0-9]*' "$W/serve.log" | head -1 | cut -d: -f2)
fi
BODY=bench/data/gpu_pod_review_v1.json
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); server threads: ${THREADS:-2}"
"$B/bench/webhook_load" --port "$PORT" --ca "$W/pki/ca.crt" --body "$BODY" --connections "${CONNS:-32}" \
  --duration "${DURATION:-10}" --threads 1 --server-pid "$PID"
"$B/bench/webhook_load" --port "$PORT" --ca "$W/pki/ca.crt" --body "$BODY" --connections 8 --rate 1000 \
  --duration "${DURATION:-10}" --threads 1 --server-pid "$PID"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

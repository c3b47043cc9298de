#!/usr/bin/env bash
# The webhook at tenant scale (issue 12 item 5): 1,000 keep-alive connections, a fixed 5,000 reviews/s, wrk, and
# the TLS cost of a new connection, against one or more webhook_bench_server binaries (the same webhook::Server +
# review() that `gpuslice serve` runs), interleaved round by round so that before/after share the machine's load.
#   bench/webhook_scale_bench.sh SERVER [SERVER...]       e.g. /work/wt/old/build/rel/bench/webhook_bench_server
#   CLIENT=path/webhook_load (default: next to the first SERVER)  ROUNDS=2  DURATION=10  THREADS=2 (server threads)
#   CASES="closed32 closed1000 rate5000 wrk1000 reconnect"  (default: all)
# Every server is driven by the same client binary and the same certificate (ECDSA P-256, made here by openssl).
# Output: one line per case and server with reviews/s, p50/p99/p99.9, server CPU per review and RSS.
# Traffic goes to 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,9p "$0"; exit 2; }
SERVERS=("$@")
CLIENT=${CLIENT:-$(dirname "$1")/webhook_load}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
THREADS=${THREADS:-2}
CASES=${CASES:-closed32 closed1000 rate5000 wrk1000 reconnect}
BODY=bench/data/gpu_pod_review_v1.json
# 1,000 connections on each side of 127.0.0.1, plus wrk's.
ulimit -n 20000
W=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT

# A CA and a serving pair for 127.0.0.1, as `gpuslice certs` makes them (ECDSA P-256).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$W/ca.key" -out "$W/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=gpuslice.kube-system.svc \
  -keyout "$W/tls.key" -out "$W/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:gpuslice.kube-system.svc\nextendedKeyUsage=serverAuth\n' >"$W/ext"
openssl x509 -req -in "$W/tls.csr" -CA "$W/ca.crt" -CAkey "$W/ca.key" -CAcreateserial -days 2 \
  -extfile "$W/ext" -out "$W/tls.crt" 2>/dev/null

start_server() {
  "$1" "$W/tls.crt" "$W/tls.key" "$THREADS" >"$W/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 300); do grep -q 'port=' "$W/serve.log" && break; sleep 0.1; done
  PORT=$(grep -o 'port=[0-9]*' "$W/serve.log" | head -1 | cut -d= -f2 || true)
  if [ -z "$PORT" ]; then
    echo "server $1 did not start within 30s:" >&2
    cat "$W/serve.log" >&2
    exit 1
  fi
}
stop_server() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# One load run on one line; a run with errors says so (errors=N) and the script carries on.
load() {
  { "$CLIENT" --port "$PORT" --ca "$W/ca.crt" --body "$BODY" --duration "$DURATION" --threads 1 --server-pid "$PID" "$@" 2>&1 ||
    true; } | tr '\n' ' ' | sed 's/  */ /g'
  echo
}

echo "$(date -u +%FT%TZ) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); client $CLIENT"
for round in $(seq "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    for c in $CASES; do
      start_server "$s"
      printf '[round %s] %s %s load=%s: ' "$round" "$c" "$s" "$(cut -d' ' -f1 /proc/loadavg)"
      case $c in
        closed32) load --connections 32 ;;
        closed1000) load --connections 1000 ;;
        rate5000) load --connections 1000 --rate 5000 ;;
        wrk1000)
          # wrk is closed loop (each connection sends its next request on the answer): -c 1000 is 1,000
          # requests in flight, not a rate. Server CPU from /proc over wrk's whole run (its connects included).
          t0=$(cpu_ticks "$PID")
          wrk -t 1 -c 1000 -d "${DURATION}s" --latency -s bench/webhook_wrk.lua "https://127.0.0.1:$PORT/mutate" \
            >"$W/wrk.out" 2>&1 || true
          t1=$(cpu_ticks "$PID")
          n=$(awk '/requests in/ {print $1}' "$W/wrk.out")
          awk -v t="$((t1 - t0))" -v n="$n" -v hz="$(getconf CLK_TCK)" -v rss="$(grep VmHWM /proc/$PID/status | awk '{print $2}')" '
            /Requests\/sec/ {rps=$2} /Non-2xx/ {bad=$NF} /Socket errors/ {err=$0}
            /^ +50%/ {p50=$2} /^ +99%/ {p99=$2}
            END {if (bad == "") bad = 0; per = 0; if (n > 0) per = t / hz / n * 1e6
                 printf "wrk -c 1000: reviews/s=%s p50=%s p99=%s non2xx=%s %s server cpu/review=%.1fus VmHWM=%s kB\n",
                 rps, p50, p99, bad, err, per, rss}' "$W/wrk.out"
          ;;
        reconnect)
          # A new TCP + TLS connection per review (an API server past client-go's 25 idle connections per host
          # reconnects; it offers no session to resume, see RESULTS). Full handshakes, then resumed ones; each
          # connection ends with close_notify, as Go's tls.Conn.Close does (without it OpenSSL drops the session).
          for v in 1.3 1.2; do
            for r in 0 1; do
              printf '\n    tls %s resume %s: ' "$v" "$r"
              load --connections 8 --reconnect 1 --close-notify 1 --tls "$v" --resume "$r" |
                grep -o 'errors=[0-9]*\|reviews/s=[0-9]*\|handshakes: [^;]*; server cpu[^)]*) [0-9.]*us' | tr '\n' ' ' || true
            done
          done
          echo
          ;;
      esac
      stop_server
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

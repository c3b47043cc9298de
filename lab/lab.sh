#!/usr/bin/env bash
# The hermetic gpuslice lab: Kamaji-style tenant control planes on one machine, every byte on loopback.
#
#   lab/lab.sh up [--tenants a,b] [--extra-nodes N] [--no-gpuslice] [--helm b]
#                                                    start (cleans up a crashed run first); --helm: these tenants
#                                                    get gpuslice by `helm install` of charts/gpuslice
#   lab/lab.sh down                                                      stop everything, delete namespaces
#   lab/lab.sh status                                                    what runs, what answers
#   lab/lab.sh env TENANT                                                `eval "$(lab/lab.sh env a)"` -> kubectl
#   lab/lab.sh logs [TENANT [COMPONENT]]                                 list logs, or tail one
#   lab/lab.sh stop|start TENANT COMPONENT                               e.g. `stop a agent`, `start a kube-scheduler`,
#                                                    `start a sidecar`: gpuslice beside the API server (Kamaji sidecar)
#
# Topology (see ../shared/docs/kamaji-konnectivity.md and control-plane-lab.md):
#   host = management cluster: ONE etcd (tmpfs, 127.0.0.1:12379) shared by every tenant; per tenant a
#     kube-apiserver (own PKI, --etcd-prefix=/tenant-X, egress `cluster` -> its Konnectivity proxy-server over a
#     Unix socket), kube-controller-manager and proxy-server.
#   network namespace gs-X (only `lo`) = tenant X's worker network: proxy-agent (reaches the proxy-server through
#     a socat bridge over a Unix socket), the tenant's API server on 127.0.0.1:<its port> (socat bridge),
#     kwok (keeps the tenant's simulated GPU nodes Ready, bound pods Running), the mock device agent and
#     `gpuslice serve` (webhook + scheduling loop). The API server reaches the webhook only through the tunnel.
#
# Needs root (ip netns). Environment: GPUSLICE_BIN (gpuslice binary), GPUSLICE_LAB_STATE (state directory,
# default lab/.state), GPUSLICE_LAB_CACHE (tools cache, default ~/.cache/gpuslice-lab).
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$LAB_DIR/.." && pwd)
# shellcheck source=lab/nodes.sh
source "$LAB_DIR/nodes.sh"
STATE=${GPUSLICE_LAB_STATE:-$LAB_DIR/.state}
CACHE=${GPUSLICE_LAB_CACHE:-$HOME/.cache/gpuslice-lab}
BIN=$(GPUSLICE_LAB_CACHE=$CACHE "$LAB_DIR/build-tools.sh" --print-bin)   # $CACHE/bin-k8s-<version>
STAGE=$BIN/kwok-stage
RUN=$STATE/run                  # Unix sockets: keep "$RUN/X-agent.sock" under 108 characters
# Host ports and namespace names; override them to run a second lab beside this one (with its own
# GPUSLICE_LAB_STATE). `up` records them in $STATE/lab.env and every later command of that lab uses the record.
ETCD_PORT=${GPUSLICE_LAB_ETCD_PORT:-12379}        # peer port +1; not Debian's 2379
API_PORT_BASE=${GPUSLICE_LAB_API_PORT:-16443}     # tenant i: + 10000*i
KONN_PORT_BASE=${GPUSLICE_LAB_KONN_PORT:-8132}    # tenant i: + 100*i (agent), +1 admin, +2 health
SCHED_PORT_BASE=${GPUSLICE_LAB_SCHED_PORT:-10259} # upstream kube-scheduler, tenant i: + 100*i
NETNS_PREFIX=${GPUSLICE_LAB_NETNS_PREFIX:-gs}     # namespaces gs-a, gs-b, ...
# kube-apiserver's /debug/pprof (bench/apiserver_bench.sh --pprof: where the API server's CPU goes); off as in a
# hardened control plane unless asked for.
APISERVER_PROFILING=${GPUSLICE_LAB_APISERVER_PROFILING:-false}
if [[ ${1:-} != up && -f $STATE/lab.env ]]; then
  # shellcheck source=/dev/null
  source "$STATE/lab.env"
fi
ETCD_PEER_PORT=$((ETCD_PORT + 1))
SCHEDULER_NAME=gpuslice-scheduler
WEBHOOK_PORT=9443 HEALTH_PORT=8080     # inside each tenant's namespace
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy ALL_PROXY all_proxy || true
export NO_PROXY=127.0.0.1,localhost,::1

log() { printf '[lab %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf 'lab.sh: %s\n' "$*" >&2; exit 1; }

# ---- tenants and ports ------------------------------------------------------------------------------------
# Tenant X (index i in the order given to `up`): API server 16443 + 10000*i (a: 16443, b: 26443, ...),
# Konnectivity agent/admin/health ports 8132/8133/8134 + 100*i on the host. Inside a namespace the same
# API-server port is bridged, so one kubeconfig works on both sides.
MAX_TENANTS=5
UP_TENANTS=()
tenant_index() { local i=0 t; for t in $(cat "$STATE/tenants" 2>/dev/null); do [[ $t == "$1" ]] && { echo $i; return; }; i=$((i + 1)); done; return 1; }
api_port() { echo $((API_PORT_BASE + 10000 * $(tenant_index "$1"))); }
konn_port() { echo $((KONN_PORT_BASE + 100 * $(tenant_index "$1") + $2)); }   # $2: 0 agent, 1 admin, 2 health
netns_of() { echo "$NETNS_PREFIX-$1"; }
tdir() { echo "$STATE/tenant-$1"; }
norm_tenant() { local t=${1#tenant-}; [[ $t =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "bad tenant name \"$1\" (want a, b, ...)"; echo "$t"; }
tenants() { cat "$STATE/tenants" 2>/dev/null || true; }

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root: network namespaces (ip netns) require CAP_SYS_ADMIN; run as root or with sudo"
}

# ---- the gpuslice binary ----------------------------------------------------------------------------------
# `up` copies the chosen binary to $STATE/bin/gpuslice, so rebuilds in the tree during a run never swap the
# binary under the lab (or leave it half-linked); later `start` commands use the copy unless GPUSLICE_BIN is set.
gpuslice_bin() {
  if [[ -n ${GPUSLICE_BIN:-} ]]; then echo "$GPUSLICE_BIN"; return; fi
  if [[ -z ${LAB_CHOOSING_BIN:-} && -x $STATE/bin/gpuslice ]]; then echo "$STATE/bin/gpuslice"; return; fi
  local b
  for b in "$REPO/build/release/cmd/gpuslice" "$REPO/build/dev/cmd/gpuslice"; do
    [[ -x $b ]] && { echo "$b"; return; }
  done
  echo "$REPO/build/release/cmd/gpuslice"
}
# True when the binary lists subcommand $1 (`gpuslice X --help` exits 0 for any X, so read the list).
gpuslice_serve_has() { "$(gpuslice_bin)" serve --help 2>/dev/null | grep -qE "^ +$1[ ,=]"; }
gpuslice_has() { local b; b=$(gpuslice_bin); [[ -x $b ]] && "$b" --help 2>/dev/null | grep -qE "^ +$1( |$)"; }

# ===========================================================================================================
# THE GPUSLICE COMMAND LINES (the one place to change when the flags of `gpuslice serve` or
# `gpuslice mock-device-agent` change). Both run inside the tenant's network namespace; $1 is the tenant.
# The configuration file is the tenant's ConfigMap `gpuslice-config` as applied from manifests/, with the
# lab's paths and loopback addresses substituted (write_gpuslice_config).
# ===========================================================================================================
gpuslice_serve_cmd() {
  local t=$1 d; d=$(tdir "$1")
  printf '%s\n' "$(gpuslice_bin)" serve \
    --config="$d/gpuslice-config.yaml"
  # --kubeconfig exists only when the scheduler loop is built in (the config file names it too).
  if gpuslice_serve_has --kubeconfig; then printf '%s\n' --kubeconfig="$d/gpuslice.kubeconfig"; fi
}
mock_device_agent_cmd() {
  local t=$1 d; d=$(tdir "$1")
  # --v=1: one line per admitted or rejected pod (pendingPod, error) in the lab's logs.
  printf '%s\n' "$(gpuslice_bin)" mock-device-agent \
    --kubeconfig="$d/hami-device-plugin.kubeconfig" --v=1
}
# ===========================================================================================================

# ---- certificates -----------------------------------------------------------------------------------------
# gpuslice's webhook serving certificate: `gpuslice certs` when the binary has it, else openssl (fallback,
# same file layout: ca.crt ca.key tls.crt tls.key ca-bundle.b64).
webhook_certs() {
  local out=$1
  mkdir -p "$out"
  if gpuslice_has certs; then
    "$(gpuslice_bin)" certs --service gpuslice-webhook --namespace gpuslice-system --ip-san 127.0.0.1 \
      --dns-san localhost --out-dir "$out" >>"$STATE/logs/certs.log" 2>&1 || { cat "$STATE/logs/certs.log" >&2; return 1; }
  else
    webhook_certs_openssl "$out"
  fi
}
# FALLBACK until `gpuslice certs` exists: a CA and a serving certificate for the Service's DNS names.
webhook_certs_openssl() {
  local out=$1 svc=gpuslice-webhook ns=gpuslice-system
  log "  webhook certificate: openssl fallback (gpuslice certs not available in $(gpuslice_bin))"
  ( cd "$out"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 -subj "/CN=gpuslice-webhook-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$svc.$ns.svc" \
      -keyout tls.key -out tls.csr 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local,DNS:%s,DNS:%s.%s,DNS:localhost,IP:127.0.0.1\n' \
      $svc $ns $svc $ns $svc $svc $ns >tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile tls.ext -out tls.crt 2>/dev/null
    chmod 600 ca.key tls.key; rm -f tls.csr tls.ext ca.srl
    base64 -w0 ca.crt >ca-bundle.b64 )
}

# The tenant's control-plane PKI (what Kamaji generates per TenantControlPlane).
tenant_pki() {
  local t=$1 p; p=$(tdir "$1")/pki
  mkdir -p "$p"
  ( cd "$p"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=tenant-$t-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    sign() {  # name subject extensions
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf '%b\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" \
        -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    local S='keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth' C
    C=${S/serverAuth/clientAuth}
    sign apiserver /CN=kube-apiserver \
      "$S\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default.svc"
    sign admin "/O=system:masters/CN=tenant-$t-admin" "$C"
    # gpuslice authenticates as its ServiceAccount (client certificate with the SA's user name and groups),
    # so the lab exercises exactly the least-privilege RBAC of manifests/base/rbac.yaml.
    sign gpuslice "/O=system:serviceaccounts/O=system:serviceaccounts:gpuslice-system/CN=system:serviceaccount:gpuslice-system:gpuslice" "$C"
    # The mock device agent stands for HAMi's device plugin: its ServiceAccount's identity, and only the RBAC of
    # HAMi's chart (lab/hami-device-plugin-rbac.yaml), so the allocation guard treats it as it treats the plugin.
    sign hami-device-plugin "/O=system:serviceaccounts/O=system:serviceaccounts:kube-system/CN=system:serviceaccount:kube-system:hami-device-plugin" "$C"
    # Upstream kube-scheduler as a control plane runs it: user system:kube-scheduler (its bootstrap RBAC, and API
    # Priority and Fairness' suggested FlowSchema "kube-scheduler", workload-high), for bench/'s side-by-side runs;
    # as system:masters (admin) it would be exempt from APF while gpuslice queues.
    sign kube-scheduler /CN=system:kube-scheduler "$C"
    sign konn-server /CN=konnectivity-server "$S\nsubjectAltName=IP:127.0.0.1,DNS:localhost"
    sign konn-agent /CN=konnectivity-agent "$C"
    openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key; rm -f ca.srl )
}

kubeconfig() {  # tenant user-cert-basename
  local t=$1 u=$2 p; p=$(tdir "$1")/pki
  cat <<EOF
apiVersion: v1
kind: Config
clusters: [{name: tenant-$t, cluster: {server: "https://127.0.0.1:$(api_port "$t")", certificate-authority: $p/ca.crt}}]
users: [{name: $u, user: {client-certificate: $p/$u.crt, client-key: $p/$u.key}}]
contexts: [{name: tenant-$t, context: {cluster: tenant-$t, user: $u}}]
current-context: tenant-$t
EOF
}

# ---- processes --------------------------------------------------------------------------------------------
# Every process runs in its own session (setsid), writes its own PID (so `ip netns exec` wrapping does not
# matter), logs to $STATE/logs/<name>.log. Stopping signals the whole process group (socat's forked children
# included), then SIGKILLs after a grace (proxy-agent ignores SIGTERM).
start_proc() {  # name netns(or -) cmd...
  local name=$1 ns=$2; shift 2
  local pidf=$STATE/pids/$name.pid logf=$STATE/logs/$name.log
  rm -f "$pidf"
  if [[ $ns == - ]]; then
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" >>"$logf" 2>&1 </dev/null &
  else
    setsid ip netns exec "$ns" bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" >>"$logf" 2>&1 </dev/null &
  fi
  local i
  for i in $(seq 50); do [[ -s $pidf ]] && return 0; sleep 0.05; done
  die "$name did not start (see $logf)"
}
# A zombie counts as dead: our processes are reparented to PID 1, which may reap them late.
pid_alive() { local st; st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [[ -n $st && $st != Z ]]; }
proc_alive() { local p; p=$(cat "$STATE/pids/$1.pid" 2>/dev/null) && [[ -n $p ]] && pid_alive "$p"; }
stop_proc() {  # name [grace seconds]
  local name=$1 grace=${2:-5} pidf=$STATE/pids/$1.pid pid pgid i
  pid=$(cat "$pidf" 2>/dev/null) || return 0
  if [[ -n $pid ]] && pid_alive "$pid"; then
    pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
    # Only a process group this lab started (its leader runs in our session): never a recycled PID's group.
    if [[ -n $pgid && $pgid != "$(ps -o pgid= -p $$ | tr -d ' ')" ]]; then
      kill -TERM -- "-$pgid" 2>/dev/null || true
      for i in $(seq $((grace * 10))); do pid_alive "$pid" || break; sleep 0.1; done
      kill -KILL -- "-$pgid" 2>/dev/null || true
    else
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidf"
}

wait_until() {  # seconds description cmd...
  local secs=$1 what=$2 deadline; shift 2
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { log "TIMEOUT after ${secs}s waiting for $what"; return 1; }
    sleep 0.2
  done
}

kc() { local t=$1; shift; "$BIN/kubectl" --kubeconfig "$(tdir "$t")/admin.kubeconfig" "$@"; }

# ---- nodes ------------------------------------------------------------------------------------------------
# Simulated GPU nodes: every Node manifest under examples/tenant-X/ (HAMi register annotation, allocatable
# nvidia.com/gpu > 0, kwok.x-k8s.io/node: fake), plus --extra-nodes generated ones for benchmarks.
example_nodes() {
  local t=$1 f dir=$REPO/examples/tenant-$t
  [[ -d $dir ]] || return 0
  for f in "$dir"/*.yaml "$dir"/*.yml; do
    [[ -f $f ]] || continue
    python3 - "$f" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if isinstance(doc, dict) and doc.get("kind") == "Node":
        print("---"); print(yaml.safe_dump(doc, sort_keys=False), end="")
PY
  done
}
# Generated nodes: 4 x A100-80GB each (40 slices per node with HAMi's default split count of 10).
extra_nodes() {
  local t=$1 n=$2 i
  for ((i = 0; i < n; i++)); do
    echo "---"
    kwok_node "$t-extra-$i" "$(a100_register "GPU-$t-x$i")" 40 64 512Gi "gpuslice.io/lab: extra"
  done
}

# ---- up ---------------------------------------------------------------------------------------------------
start_etcd() {
  local data=/dev/shm/gpuslice-lab-etcd-$(printf '%s' "$STATE" | cksum | cut -d' ' -f1)
  rm -rf "$data"; echo "$data" >"$STATE/etcd-data"
  start_proc etcd - "$BIN/etcd" --name lab --data-dir "$data" --logger=zap --log-outputs=stderr \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes=4294967296
  wait_until 20 "etcd /health" curl -sf "http://127.0.0.1:$ETCD_PORT/health" || die "etcd is not healthy (lab.sh logs - etcd)"
}

start_tenant_control_plane() {
  local t=$1 d p ns port ka kadm kh
  d=$(tdir "$t"); p=$d/pki; ns=$(netns_of "$t"); port=$(api_port "$t")
  ka=$(konn_port "$t" 0); kadm=$(konn_port "$t" 1); kh=$(konn_port "$t" 2)
  mkdir -p "$d"
  tenant_pki "$t"
  kubeconfig "$t" admin >"$d/admin.kubeconfig"
  kubeconfig "$t" kube-scheduler >"$d/kube-scheduler.kubeconfig"
  kubeconfig "$t" gpuslice >"$d/gpuslice.kubeconfig"
  kubeconfig "$t" hami-device-plugin >"$d/hami-device-plugin.kubeconfig"
  cat >"$d/egress.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- {name: cluster, connection: {proxyProtocol: GRPC, transport: {uds: {udsName: $RUN/$t-konn.sock}}}}
- {name: controlplane, connection: {proxyProtocol: Direct}}
- {name: etcd, connection: {proxyProtocol: Direct}}
EOF
  # Konnectivity proxy-server: gRPC frontend on a Unix socket for the API server, mTLS agent port.
  start_proc "$t-proxy-server" - "$BIN/proxy-server" --mode=grpc --uds-name="$RUN/$t-konn.sock" --server-port=0 \
    --agent-bind-address=127.0.0.1 --agent-port="$ka" --admin-bind-address=127.0.0.1 --admin-port="$kadm" \
    --health-bind-address=127.0.0.1 --health-port="$kh" \
    --cluster-cert="$p/konn-server.crt" --cluster-key="$p/konn-server.key" --cluster-ca-cert="$p/ca.crt"
  wait_until 15 "$t proxy-server socket" test -S "$RUN/$t-konn.sock" || die "proxy-server of tenant $t did not start"
  # MutatingAdmissionPolicy is GA in 1.36 (admissionregistration.k8s.io/v1, on by default): charts/gpuslice's
  # policy topology (tests/e2e/admission_policy_test.sh) needs no feature gate and no runtime-config.
  start_proc "$t-apiserver" - "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="/tenant-$t" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" --cert-dir="$d/apiserver" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" --client-ca-file="$p/ca.crt" \
    --service-account-issuer="https://127.0.0.1:$port" --service-account-key-file="$p/sa.pub" \
    --service-account-signing-key-file="$p/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=Node,RBAC --allow-privileged=true --profiling="$APISERVER_PROFILING" \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --egress-selector-config-file="$d/egress.yaml"
  # The worker side: namespace with only lo, bridges over Unix sockets, the agent. Every listener with a backlog of
  # 4096 (the kernel's somaxconn): socat's default of 5 dropped the SYNs of concurrent connects, each retried by
  # TCP 1 s later (gpuslice's start-up paid 1 s, measured 2026-12-06; a real network path has no such queue).
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  start_proc "$t-bridge-agent-host" - socat "UNIX-LISTEN:$RUN/$t-agent.sock,fork,unlink-early,backlog=4096" "TCP:127.0.0.1:$ka"
  start_proc "$t-bridge-agent-ns" "$ns" socat "TCP-LISTEN:8132,bind=127.0.0.1,reuseaddr,fork,backlog=4096" "UNIX-CONNECT:$RUN/$t-agent.sock"
  start_proc "$t-bridge-api-host" - socat "UNIX-LISTEN:$RUN/$t-api.sock,fork,unlink-early,backlog=4096" "TCP:127.0.0.1:$port"
  start_proc "$t-bridge-api-ns" "$ns" socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork,backlog=4096" "UNIX-CONNECT:$RUN/$t-api.sock"
  start_agent "$t"
}

# Tenants installed with `helm install` of charts/gpuslice (up --helm) instead of `kubectl apply -k`.
is_helm_tenant() { grep -qx "$1" "$STATE/helm-tenants" 2>/dev/null; }
# The chart with lab/helm-values-lab.yaml (the chart's equivalent of manifests/components/lab) into the
# namespace of manifests/base/namespace.yaml (created first: helm does not label the namespaces it creates).
# The serving certificate is the one the chart generated: copied from its Secret for the process.
helm_install_tenant() {
  local t=$1 d out; d=$(tdir "$1")
  out=$( { kc "$t" apply -f "$STATE/manifests/base/namespace.yaml" &&
           "$BIN/helm" --kubeconfig "$d/admin.kubeconfig" install gpuslice "$REPO/charts/gpuslice" \
             --namespace gpuslice-system -f "$REPO/lab/helm-values-lab.yaml" --set tenant="tenant-$t" --wait=false; } 2>&1) ||
    { printf '%s\n' "$out" >&2; die "helm install of charts/gpuslice into tenant $t failed"; }
  printf '%s\n' "$out" >"$STATE/logs/$t-manifests.log"
  mkdir -p "$d/webhook-certs"
  local k
  for k in tls.crt tls.key ca.crt; do
    kc "$t" -n gpuslice-system get secret gpuslice-webhook-tls -o jsonpath="{.data.${k//./\\.}}" | base64 -d >"$d/webhook-certs/$k" ||
      die "tenant $t: no $k in the chart's Secret gpuslice-system/gpuslice-webhook-tls"
  done
  chmod 600 "$d/webhook-certs/tls.key"
}

start_agent() {
  local t=$1 p; p=$(tdir "$t")/pki
  start_proc "$t-agent" "$(netns_of "$t")" "$BIN/proxy-agent" --proxy-server-host=127.0.0.1 --proxy-server-port=8132 \
    --health-server-port=8135 --admin-server-port=8136 \
    --ca-cert="$p/ca.crt" --agent-cert="$p/konn-agent.crt" --agent-key="$p/konn-agent.key"
}
agent_connected() { curl -sf "http://127.0.0.1:$(konn_port "$1" 2)/readyz"; }

finish_tenant() {
  local t=$1 d ns port
  d=$(tdir "$t"); ns=$(netns_of "$t"); port=$(api_port "$t")
  wait_until 90 "tenant $t kube-apiserver /readyz" curl -sf --cacert "$d/pki/ca.crt" "https://127.0.0.1:$port/readyz" ||
    die "kube-apiserver of tenant $t is not ready (lab.sh logs $t apiserver)"
  start_proc "$t-controller-manager" - "$BIN/kube-controller-manager" --kubeconfig="$d/admin.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 \
    --service-account-private-key-file="$d/pki/sa.key" --root-ca-file="$d/pki/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-nodelifecycle,-service-lb-controller,-route,-cloud-node-lifecycle'
  wait_until 30 "tenant $t agent connected to its proxy-server" agent_connected "$t" ||
    die "proxy-agent of tenant $t did not connect (lab.sh logs $t agent)"
  wait_until 20 "tenant $t API server reachable from namespace $ns" \
    ip netns exec "$ns" curl -sf --cacert "$d/pki/ca.crt" "https://127.0.0.1:$port/readyz" ||
    die "tenant $t API server not reachable inside $ns (lab.sh logs $t bridge-api-ns)"

  # gpuslice's manifests, exactly as in manifests/overlays/lab/tenant-X, on a private copy with the
  # webhook certificate in certs/.
  local m=$STATE/manifests overlay
  overlay=$m/overlays/lab/tenant-$t
  if [[ ! -d $overlay ]]; then   # a tenant with no overlay of its own: tenant-a's lab overlay minus its labels
    mkdir -p "$overlay/certs"
    cp "$m/overlays/lab/tenant-a/certs/kustomization.yaml" "$overlay/certs/"
    sed '/components\/tenant-a/d' "$m/overlays/lab/tenant-a/kustomization.yaml" >"$overlay/kustomization.yaml"
  fi
  wait_until 30 "tenant $t default ServiceAccount (kube-controller-manager)" kc "$t" -n default get serviceaccount default ||
    die "kube-controller-manager of tenant $t did not create the default ServiceAccount"
  local out
  if is_helm_tenant "$t"; then
    helm_install_tenant "$t"
  else
    webhook_certs "$d/webhook-certs"
    cp "$d/webhook-certs/tls.crt" "$d/webhook-certs/tls.key" "$d/webhook-certs/ca.crt" "$overlay/certs/"
    out=$(kc "$t" apply -k "$overlay" 2>&1) || { printf '%s\n' "$out" >&2; die "applying $overlay to tenant $t failed"; }
    printf '%s\n' "$out" >"$STATE/logs/$t-manifests.log"
  fi
  out=$(kc "$t" apply -f "$REPO/lab/hami-device-plugin-rbac.yaml" 2>&1) ||
    { printf '%s\n' "$out" >&2; die "applying lab/hami-device-plugin-rbac.yaml to tenant $t failed"; }
  printf '%s\n' "$out" >>"$STATE/logs/$t-manifests.log"
  write_gpuslice_config "$t"

  # Nodes, then kwok to keep them Ready.
  { example_nodes "$t"; extra_nodes "$t" "$EXTRA_NODES"; } >"$d/nodes.yaml"
  if [[ ! -s $d/nodes.yaml ]]; then
    log "  tenant $t: no Node manifests under examples/tenant-$t/ and no --extra-nodes: default GPU nodes"
    default_nodes "$t" >"$d/nodes.yaml"
  fi
  kc "$t" create -f "$d/nodes.yaml" >/dev/null
  start_proc "$t-kwok" "$ns" "$BIN/kwok" --kubeconfig="$d/admin.kubeconfig" --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --node-lease-duration-seconds=40 \
    --cidr=10.244.0.0/16 --node-ip=10.244.0.1 \
    --config="$STAGE/node/fast/node-initialize.yaml" \
    --config="$STAGE/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    --config="$STAGE/pod/fast/pod-ready.yaml" --config="$STAGE/pod/fast/pod-complete.yaml" \
    --config="$STAGE/pod/fast/pod-delete.yaml"

  if $WITH_GPUSLICE; then start_gpuslice "$t"; fi
}

# Fallback when examples/tenant-X/ has no Node manifest yet: the seed's workers (tenant-a one A100-80GB,
# tenant-b two L4, others one A100).
default_nodes() {
  local t=$1 reg gpus=1
  case $t in
    b) gpus=2
       reg='[{"id":"GPU-b-worker-0-0","count":10,"devmem":23034,"devcore":100,"type":"NVIDIA L4","mode":"hami-core","health":true},{"id":"GPU-b-worker-0-1","index":1,"count":10,"devmem":23034,"devcore":100,"type":"NVIDIA L4","mode":"hami-core","health":true}]' ;;
    *) reg="[{\"id\":\"GPU-$t-worker-0-0\",\"count\":10,\"devmem\":81920,\"devcore\":100,\"type\":\"NVIDIA A100-SXM4-80GB\",\"mode\":\"hami-core\",\"health\":true}]" ;;
  esac
  kwok_node "$t-worker-0" "$reg" "$((gpus * 10))" 32 256Gi
}

# gpuslice's configuration: the ConfigMap the tenant holds (applied from manifests/), with the lab's files and
# namespace-local addresses.
write_gpuslice_config() {
  local t=$1 d; d=$(tdir "$1")
  kc "$t" -n gpuslice-system get configmap gpuslice-config -o jsonpath='{.data.config\.yaml}' >"$d/gpuslice-config.yaml.applied"
  python3 - "$d" <<'PY'
import sys, yaml
d = sys.argv[1]
c = yaml.safe_load(open(d + "/gpuslice-config.yaml.applied"))
c["kubeconfig"] = d + "/gpuslice.kubeconfig"
c.setdefault("logging", {})["format"] = "text"
w = c.setdefault("webhook", {})
w["bindAddress"] = "127.0.0.1:9443"
w["tlsCertFile"] = d + "/webhook-certs/tls.crt"
w["tlsPrivateKeyFile"] = d + "/webhook-certs/tls.key"
c.setdefault("server", {})["healthBindAddress"] = "127.0.0.1:8080"
open(d + "/gpuslice-config.yaml", "w").write(
    "# Generated by lab/lab.sh from the tenant's ConfigMap gpuslice-system/gpuslice-config.\n" +
    yaml.safe_dump(c, sort_keys=False))
PY
}

start_gpuslice() {
  local t=$1 ns d; ns=$(netns_of "$t"); d=$(tdir "$t")
  if ! gpuslice_has serve; then
    log "  tenant $t: $(gpuslice_bin) has no 'serve' subcommand yet: gpuslice NOT started (webhook calls fail open, the guard refuses GPU pods)"
    return 0
  fi
  local -a cmd
  mapfile -t cmd < <(gpuslice_serve_cmd "$t")
  start_proc "$t-gpuslice" "$ns" "${cmd[@]}"
  if gpuslice_has mock-device-agent; then
    mapfile -t cmd < <(mock_device_agent_cmd "$t")
    start_proc "$t-mock-device-agent" "$ns" "${cmd[@]}"
  else
    log "  tenant $t: no 'mock-device-agent' subcommand in $(gpuslice_bin): HAMi node locks will not be released"
  fi
  local why=""
  if ! wait_until 30 "tenant $t gpuslice /readyz" gpuslice_ready "$t"; then why="is not ready"
  elif ! proc_alive "$t-gpuslice"; then why="exited"; fi
  [[ -z $why ]] ||
    log "  WARNING: gpuslice of tenant $t $why (lab.sh logs $t gpuslice): $(tail -n 3 "$STATE/logs/$t-gpuslice.log" | tr '\n' ' ')"
}
# Ready = /readyz answers 200 over TLS for the Service's name with the caBundle's CA (so SAN and CA are right
# too). A dead process is final: stop waiting at once.
gpuslice_ready() {
  local t=$1 d; d=$(tdir "$1")
  proc_alive "$t-gpuslice" || return 0
  ip netns exec "$(netns_of "$t")" curl -sf --cacert "$d/webhook-certs/ca.crt" \
    --resolve "gpuslice-webhook.gpuslice-system.svc:$WEBHOOK_PORT:127.0.0.1" \
    "https://gpuslice-webhook.gpuslice-system.svc:$WEBHOOK_PORT/readyz"
}

nodes_ready() {
  local t=$1 want; want=$(grep -c '^kind: Node' "$(tdir "$t")/nodes.yaml")
  [[ $(kc "$t" get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True) -ge $want ]]
}

# Before anything is recorded or started: the ports and namespace names this run will use must be free, or
# another lab (other GPUSLICE_LAB_STATE) would lose them. Fails naming the holder.
preflight() {
  local i=0 t port holder ports=("$ETCD_PORT" "$ETCD_PEER_PORT")
  for t in "$@"; do
    ports+=($((API_PORT_BASE + 10000 * i)) $((KONN_PORT_BASE + 100 * i)) $((KONN_PORT_BASE + 100 * i + 1)) $((KONN_PORT_BASE + 100 * i + 2)))
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS_PREFIX-$t"; then
      die "network namespace $NETNS_PREFIX-$t exists but is not this lab's ($STATE): another lab uses it (lab.sh down with its GPUSLICE_LAB_STATE, or set GPUSLICE_LAB_NETNS_PREFIX)"
    fi
    i=$((i + 1))
  done
  for port in "${ports[@]}"; do
    holder=$(ss -Hltnp "sport = :$port" 2>/dev/null | sed -n 's/.*users:((\("[^"]*"\),pid=\([0-9]*\).*/\1 pid \2/p' | head -1)
    [[ -z $holder ]] || die "port $port is in use by $holder (another lab? choose other ports: GPUSLICE_LAB_* in lab/README.md)"
  done
}

cmd_up() {
  local tenant_list=a,b helm_list=""
  EXTRA_NODES=0 WITH_GPUSLICE=true
  while (($#)); do
    case $1 in
      --tenants) tenant_list=$2; shift 2 ;;
      --tenants=*) tenant_list=${1#*=}; shift ;;
      --extra-nodes) EXTRA_NODES=$2; shift 2 ;;
      --extra-nodes=*) EXTRA_NODES=${1#*=}; shift ;;
      --no-gpuslice) WITH_GPUSLICE=false; shift ;;
      --helm) helm_list=$2; shift 2 ;;
      --helm=*) helm_list=${1#*=}; shift ;;
      *) die "up: unknown argument \"$1\" (want --tenants a,b --extra-nodes N --no-gpuslice --helm b)" ;;
    esac
  done
  [[ $EXTRA_NODES =~ ^[0-9]+$ ]] || die "--extra-nodes: \"$EXTRA_NODES\" is not a number"
  need_root
  local t0=$SECONDS t list=()
  IFS=, read -r -a list <<<"$tenant_list"
  ((${#list[@]} >= 1 && ${#list[@]} <= MAX_TENANTS)) || die "--tenants: \"$tenant_list\": between 1 and $MAX_TENANTS tenants"
  for t in "${list[@]}"; do UP_TENANTS+=("$(norm_tenant "$t")"); done

  # A crashed or earlier run: first with the ports and names it recorded, then with this run's.
  if [[ -f $STATE/lab.env ]]; then ( source "$STATE/lab.env"; cleanup quiet ); fi
  cleanup quiet
  preflight "${UP_TENANTS[@]}"   # before this run records anything in $STATE
  log "building or reusing the lab tools (lab/build-tools.sh, cached in $CACHE)"
  # Progress lines ([lab-build ...], one per tool with its duration) go to the terminal; go's chatter to a file.
  local blog=${TMPDIR:-/tmp}/gpuslice-lab-build.log rc
  set +o pipefail
  "$LAB_DIR/build-tools.sh" 2>&1 | tee "$blog" | { grep --line-buffered '^\[lab-build' >&2; true; }
  rc=${PIPESTATUS[0]}
  set -o pipefail
  ((rc == 0)) || { tail -20 "$blog" >&2; die "lab/build-tools.sh failed (full log: $blog)"; }
  local b
  for b in etcd kube-apiserver kube-controller-manager kubectl kwok proxy-server proxy-agent; do
    [[ -x $BIN/$b ]] || die "missing $BIN/$b after build-tools.sh"
  done
  # Fresh logs per run; the previous run's stay in logs.prev (useful after a crash).
  if [[ -d $STATE/logs ]]; then rm -rf "$STATE/logs.prev"; mv "$STATE/logs" "$STATE/logs.prev"; fi
  mkdir -p "$STATE"/{logs,pids} "$RUN"
  ((${#RUN} + 20 < 108)) || die "state path too long for Unix sockets: $RUN (set GPUSLICE_LAB_STATE to a shorter path)"
  for t in "${list[@]}"; do norm_tenant "$t"; done >"$STATE/tenants"
  local hl=()
  IFS=, read -r -a hl <<<"$helm_list"
  for t in "${hl[@]}"; do
    t=$(norm_tenant "$t"); grep -qx "$t" "$STATE/tenants" || die "--helm: \"$t\" is not one of --tenants $tenant_list"
    [[ -x $BIN/helm ]] || die "--helm: no $BIN/helm (lab/build-tools.sh builds it)"
    echo "$t"
  done >"$STATE/helm-tenants"
  ((API_PORT_BASE + 10000 * (${#list[@]} - 1) < 65536 && KONN_PORT_BASE + 100 * ${#list[@]} < 49152)) ||
    die "ports: GPUSLICE_LAB_API_PORT=$API_PORT_BASE or GPUSLICE_LAB_KONN_PORT=$KONN_PORT_BASE too high for ${#list[@]} tenants"
  printf 'ETCD_PORT=%q\nAPI_PORT_BASE=%q\nKONN_PORT_BASE=%q\nSCHED_PORT_BASE=%q\nNETNS_PREFIX=%q\n' \
    "$ETCD_PORT" "$API_PORT_BASE" "$KONN_PORT_BASE" "$SCHED_PORT_BASE" "$NETNS_PREFIX" >"$STATE/lab.env"
  rm -rf "$STATE/manifests"; cp -r "$REPO/manifests" "$STATE/manifests"
  local src; src=$(LAB_CHOOSING_BIN=1 gpuslice_bin)
  rm -rf "$STATE/bin"; mkdir -p "$STATE/bin"
  if [[ -x $src ]]; then
    cp "$src" "$STATE/bin/gpuslice.tmp" && mv "$STATE/bin/gpuslice.tmp" "$STATE/bin/gpuslice"
    log "gpuslice: $src ($("$STATE/bin/gpuslice" --version 2>/dev/null || echo '?')), copied to $STATE/bin/gpuslice"
  else
    log "gpuslice: no binary at $src (build it, or set GPUSLICE_BIN): control planes only"
  fi
  unset GPUSLICE_BIN   # from here on every use is the copy

  log "starting etcd on 127.0.0.1:$ETCD_PORT (tmpfs)"
  start_etcd
  for t in $(tenants); do
    log "tenant $t: control plane (kube-apiserver :$(api_port "$t"), proxy-server) and worker namespace $(netns_of "$t")"
    start_tenant_control_plane "$t"
  done
  # The tenants are independent from here on: finish them in parallel (a failure names its tenant and log).
  local -A pids=()
  for t in $(tenants); do
    log "tenant $t: kube-controller-manager, manifests, nodes, kwok, gpuslice"
    ( finish_tenant "$t" ) &
    pids[$t]=$!
  done
  local failed=""
  for t in "${!pids[@]}"; do wait "${pids[$t]}" || failed+=" $t"; done
  [[ -z $failed ]] || die "tenant(s)$failed did not come up (messages above; lab/lab.sh down cleans up)"
  for t in $(tenants); do
    wait_until 60 "tenant $t nodes Ready (kwok)" nodes_ready "$t" || die "nodes of tenant $t not Ready (lab.sh logs $t kwok)"
  done
  echo "$((SECONDS - t0))" >"$STATE/up-seconds"
  log "lab up in $((SECONDS - t0)) s"
  cmd_status
}

# ---- down / cleanup ---------------------------------------------------------------------------------------
cleanup() {
  local quiet=${1:-} f name ns pid
  # 1. Processes this lab recorded (host side and namespaces), agents last-resort SIGKILLed by stop_proc.
  if [[ -d $STATE/pids ]]; then
    for f in "$STATE"/pids/*.pid; do
      [[ -e $f ]] || continue
      name=$(basename "$f" .pid)
      [[ $name == etcd ]] && continue
      # In parallel: proxy-agent needs its SIGKILL after the grace anyway (it ignores SIGTERM).
      if [[ $name == *-agent ]]; then stop_proc "$name" 1 & else stop_proc "$name" 3 & fi
    done
    wait
    stop_proc etcd 5
  fi
  # 2. Anything still inside the lab's namespaces (created by this lab, nothing else runs there), then the
  #    namespaces of the recorded tenants (recorded before any namespace is created).
  for ns in $(tenants | sed "s/^/$NETNS_PREFIX-/"); do
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns" || continue
    [[ -z $quiet ]] && log "deleting network namespace $ns"
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # 3. tmpfs etcd data and sockets.
  if [[ -f $STATE/etcd-data ]]; then rm -rf "$(cat "$STATE/etcd-data")"; rm -f "$STATE/etcd-data"; fi
  rm -rf "$RUN"
  rm -f "$STATE/tenants" "$STATE/lab.env" "$STATE/helm-tenants"
}

cmd_down() {
  need_root
  log "stopping the lab ($STATE)"
  cleanup
  log "lab down"
}

# ---- status / env / logs ----------------------------------------------------------------------------------
cmd_status() {
  [[ -s $STATE/tenants ]] || { echo "lab: not running (lab/lab.sh up)"; return 1; }
  local t f name st
  printf '\ngpuslice lab (%s)\n' "$STATE"
  printf '  etcd            127.0.0.1:%s  %s\n' "$ETCD_PORT" "$(proc_alive etcd && echo running || echo STOPPED)"
  for t in $(tenants); do
    printf '\n  tenant-%s: kube-apiserver https://127.0.0.1:%s  (etcd prefix /tenant-%s, worker namespace %s)\n' \
      "$t" "$(api_port "$t")" "$t" "$(netns_of "$t")"
    for f in "$STATE"/pids/"$t"-*.pid; do
      [[ -e $f ]] || continue
      name=$(basename "$f" .pid); name=${name#"$t"-}
      proc_alive "$t-$name" && st=running || st=STOPPED
      printf '    %-22s %s\n' "$name" "$st"
    done
    printf '    %-22s %s\n' "agent connected" "$(agent_connected "$t" >/dev/null 2>&1 && echo yes || echo NO)"
    printf '    %-22s %s\n' "nodes" "$(kc "$t" get nodes --no-headers 2>/dev/null | awk '{printf "%s(%s) ", $1, $2}')"
    printf '    %-22s eval "$(%s env %s)"; kubectl get nodes\n' "kubectl" "$LAB_DIR/lab.sh" "$t"
  done
  printf '\n  logs: %s/logs   (lab/lab.sh logs TENANT COMPONENT)\n' "$STATE"
  [[ -f $STATE/up-seconds ]] && printf '  last up took %s s\n' "$(cat "$STATE/up-seconds")"
  return 0
}

cmd_env() {
  local t; t=$(norm_tenant "${1:?usage: lab.sh env TENANT}")
  [[ -f $(tdir "$t")/admin.kubeconfig ]] || die "no tenant \"$t\" (lab/lab.sh up --tenants ...)"
  printf 'export KUBECONFIG=%q\nexport PATH=%q:"$PATH"\nexport GPUSLICE_LAB_TENANT=%q\nexport GPUSLICE_LAB_NETNS=%q\n' \
    "$(tdir "$t")/admin.kubeconfig" "$BIN" "$t" "$(netns_of "$t")"
}

cmd_logs() {
  local f
  case $# in
    0) for f in "$STATE"/logs/*.log; do [[ -e $f ]] && printf '%8s lines  %s\n' "$(wc -l <"$f")" "$f"; done ;;
    1) if [[ -f $STATE/logs/$1.log ]]; then tail -n 100 "$STATE/logs/$1.log"  # etcd, or a full name like a-agent
       else tail -n 20 "$STATE"/logs/"$(norm_tenant "$1")"-*.log; fi ;;
    *) tail -n 100 "$STATE/logs/$(norm_tenant "$1")-$2.log" ;;
  esac
}

# ---- the Kamaji sidecar topology -----------------------------------------------------------------------------
# `lab.sh start TENANT sidecar [HELM ARGS...]`: gpuslice as an additional container of the TenantControlPlane
# pod, i.e. on the HOST (the management side) beside the tenant's kube-apiserver, NOT in the worker namespace:
# the webhook on 127.0.0.1:<API port + 1> registered by URL (charts/gpuslice topology sidecar; the API server
# dials it directly, the Konnectivity tunnel is not on the path), /metrics and probes on <API port + 2>, the
# scheduling loop on the API server's own address. It runs as the same ServiceAccount and competes for the same
# Lease as the worker-side gpuslice (as every replica of a TenantControlPlane would): stop that one to make the
# sidecar the scheduler. HELM ARGS are extra chart values (e.g. a webhook.namespaceSelector).
# `lab.sh stop TENANT sidecar` stops it and deletes its objects.
sidecar_ports() { local p; p=$(api_port "$1"); echo "$((p + 1)) $((p + 2))"; }
start_sidecar() {
  local t=$1 d s wp hp; shift; d=$(tdir "$t"); s=$d/sidecar
  read -r wp hp < <(sidecar_ports "$t")
  mkdir -p "$s"
  "$BIN/helm" template gpuslice-sidecar "$REPO/charts/gpuslice" --namespace gpuslice-system --set topology=sidecar \
    --set fullnameOverride=gpuslice-sidecar --set certs.secretName=gpuslice-sidecar-webhook-tls \
    --set serviceAccount.create=false --set serviceAccount.name=gpuslice \
    --set webhook.url="https://127.0.0.1:$wp/mutate" --set webhook.port="$wp" --set metrics.port="$hp" \
    --set logging.format=text --set tenant="tenant-$t" "$@" >"$s/objects.yaml" || die "helm template (topology sidecar) failed"
  python3 - "$s" "$d" <<'PY'
import base64, os, sys, yaml
s, d = sys.argv[1], sys.argv[2]
for o in yaml.safe_load_all(open(s + "/objects.yaml")):
    if not o:
        continue
    if o["kind"] == "Secret":  # the serving certificate (in Kamaji: a Secret of the management cluster)
        for k in ("tls.crt", "tls.key", "ca.crt"):
            open(f"{s}/{k}", "wb").write(base64.b64decode(o["data"][k]))
        os.chmod(f"{s}/tls.key", 0o600)
    if o["kind"] == "ConfigMap":
        c = yaml.safe_load(o["data"]["config.yaml"])
        c["kubeconfig"] = d + "/gpuslice.kubeconfig"
        c["webhook"]["tlsCertFile"] = s + "/tls.crt"
        c["webhook"]["tlsPrivateKeyFile"] = s + "/tls.key"
        open(s + "/config.yaml", "w").write("# Generated by lab/lab.sh from charts/gpuslice (topology sidecar).\n" +
                                            yaml.safe_dump(c, sort_keys=False))
PY
  [[ -s $s/config.yaml && -s $s/tls.crt ]] || die "tenant $t sidecar: no ConfigMap or Secret in the chart's rendering"
  # The tenant side: RBAC, the URL webhook, the guards (no Deployment, Service or PDB in this topology).
  local out
  out=$(kc "$t" apply -f "$s/objects.yaml" 2>&1) || { printf '%s\n' "$out" >&2; die "tenant $t sidecar: applying the chart's objects failed"; }
  printf '%s\n' "$out" >"$STATE/logs/$t-sidecar-manifests.log"
  start_proc "$t-sidecar" - "$(gpuslice_bin)" serve --config="$s/config.yaml" --kubeconfig="$d/gpuslice.kubeconfig"
  # Ready as a webhook; whether it leads the scheduling is the Lease's business (`leader` is a /readyz check).
  wait_until 30 "tenant $t sidecar /readyz" curl -sf --cacert "$s/ca.crt" "https://127.0.0.1:$wp/readyz?exclude=leader" ||
    die "tenant $t sidecar gpuslice is not ready (lab.sh logs $t sidecar)"
}
stop_sidecar() {
  local t=$1 s; s=$(tdir "$1")/sidecar
  stop_proc "$t-sidecar" 5
  [[ -s $s/objects.yaml ]] && kc "$t" delete -f "$s/objects.yaml" --ignore-not-found --wait=false >/dev/null 2>&1
  return 0
}

# The upstream kube-scheduler (profile default-scheduler), for side-by-side benchmarks: not started by `up`.
start_kube_scheduler() {
  local t=$1 d; d=$(tdir "$1")
  printf '%s\n' "apiVersion: kubescheduler.config.k8s.io/v1" "kind: KubeSchedulerConfiguration" \
    "clientConnection: {kubeconfig: $d/admin.kubeconfig, qps: 5000, burst: 5000}" \
    "leaderElection: {leaderElect: false}" "profiles: [{schedulerName: default-scheduler}]" >"$d/kube-scheduler.yaml"
  start_proc "$t-kube-scheduler" - "$BIN/kube-scheduler" --config="$d/kube-scheduler.yaml" --bind-address=127.0.0.1 \
    --secure-port="$((SCHED_PORT_BASE + 100 * $(tenant_index "$t")))" \
    --authentication-kubeconfig="$d/admin.kubeconfig" --authorization-kubeconfig="$d/admin.kubeconfig"
}

cmd_stop_start() {
  local op=$1 t c; t=$(norm_tenant "${2:?usage: lab.sh $1 TENANT COMPONENT}"); c=${3:?component: agent gpuslice mock-device-agent kube-scheduler kwok controller-manager sidecar}
  shift 3
  need_root
  case $op:$c in
    stop:sidecar) stop_sidecar "$t" ;;
    start:sidecar) start_sidecar "$t" "$@" ;;
    stop:*) stop_proc "$t-$c" 2 ;;
    start:agent) start_agent "$t"; wait_until 30 "agent connected" agent_connected "$t" ;;
    start:gpuslice)
      local -a cmd; mapfile -t cmd < <(gpuslice_serve_cmd "$t"); start_proc "$t-gpuslice" "$(netns_of "$t")" "${cmd[@]}" ;;
    start:mock-device-agent)
      local -a cmd; mapfile -t cmd < <(mock_device_agent_cmd "$t"); start_proc "$t-mock-device-agent" "$(netns_of "$t")" "${cmd[@]}" ;;
    start:kube-scheduler) start_kube_scheduler "$t" ;;
    *) die "$op $c: not supported (start supports agent, gpuslice, mock-device-agent, kube-scheduler, sidecar)" ;;
  esac
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) shift; cmd_env "$@" ;;
  logs) shift; cmd_logs "$@" ;;
  stop|start) cmd_stop_start "$@" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

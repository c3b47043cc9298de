#!/usr/bin/env bash
# `gpuslice doctor` on a gpuslice deployed under OTHER names, in another namespace, with an ExternalName Service
# for the webhook (issue 15 item 5: doctor failed such a healthy path with service-port-mismatch). On tenant a,
# beside the lab's own gpuslice (which stays up):
#   - charts/gpuslice rendered with fullnameOverride acme-gpu-$$ into namespace R (every object renamed:
#     MutatingWebhookConfiguration, Service, ConfigMap, serving Secret, ServiceAccount, RBAC, Lease
#     acme-gpu-scheduler, Deployment scaled to 0: the lab runs gpuslice as a process); the webhook's Service is
#     an ExternalName to localhost whose ports list 443, while clientConfig.service.port is 9543 (the API server
#     dials <externalName>:<clientConfig.service.port>; the Service's ports do not matter for ExternalName);
#     the cluster-wide guards are not duplicated (the lab's stay);
#   - a second `gpuslice serve` in tenant a's worker network namespace with that configuration (webhook on
#     127.0.0.1:9543, reached through the Konnectivity tunnel as the lab's), authenticated as R's ServiceAccount;
#   - the webhook selects only the probe namespace P (labelled gpuslice.io/webhook=ignore: the lab's webhook
#     skips it).
# Checks:
#   1. doctor (no flag but --probe-namespace) passes: finds the webhook, the Service, the Secret, the ConfigMap
#      and the Lease by what they point at; no service-port-mismatch; the dry-run GPU pod was mutated by the
#      renamed webhook (the API server really dialed localhost:9543 through the tunnel);
#   2. broken: the Service made a ClusterIP with the same ports: webhook-config FAIL [service-port-mismatch], and
#      the API server agrees (once it dials again, the dry-run GPU pod is not mutated: refused by the guard);
#   3. broken: the renamed gpuslice stopped: webhook-config PASS (the Service is fine), gpu-pod-dry-run FAIL
#      [webhook-down] (the tunnel works, nothing answers at the webhook);
#   4. the Lease out of cluster (item 5): a configuration that names no leaderElection.resourceNamespace, `serve`
#      run out of cluster (as here) puts its Lease in gpuslice-system (common/config.h effective_lease_namespace),
#      not in the ConfigMap's namespace R; doctor finds it there and says why.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"
HELM=$("$ROOT/lab/build-tools.sh" --print-bin)/helm
use_tenant a || { fail "tenant a" "lab/lab.sh env a failed"; exit 1; }
N=acme-gpu-$$ R=acme-system-$$ P=acme-probe-$$
WPORT=9543 HPORT=8180 LEASE=acme-gpu-scheduler
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-renamed-test.XXXXXX")
pki=$(tenant_dir a)/pki
serve_pid=""
stop_serve() {
  [[ -n $serve_pid ]] || return 0
  kill -TERM "$serve_pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$serve_pid" 2>/dev/null
  wait "$serve_pid" 2>/dev/null
  serve_pid=""
  ! in_ns a curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$HPORT/livez"   # nothing of ours listens any more
}
cleanup() {
  stop_serve
  use_tenant a
  [[ -s $work/objects.yaml ]] && kubectl delete -f "$work/objects.yaml" --ignore-not-found --wait=false >/dev/null 2>&1
  kubectl -n gpuslice-system delete lease "$LEASE" --ignore-not-found --wait=false >/dev/null 2>&1
  kubectl delete namespace "$R" "$P" --wait=false >/dev/null 2>&1
  [[ -f $work/serve.log ]] && grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work/serve.log" &&
    { fail "no sanitizer report in the renamed gpuslice's log" "$(grep -m3 -E 'ERROR:|runtime error' "$work/serve.log")"; cp "$work/serve.log" "/tmp/doctor-renamed-$$.log"; }
  rm -rf "$work"
}
trap cleanup EXIT

# render VALUES...: the chart under other names into R, with the lab's changes (ExternalName Service listing 443,
# no replicas, no second guard), written to $work/objects.yaml; the serving key pair and CA to $work/tls/.
render() {
  "$HELM" template acme "$ROOT/charts/gpuslice" --namespace "$R" --set fullnameOverride="$N" \
    --set certs.secretName="$N-tls" --set tenant=tenant-a --set replicas=0 --set logging.format=text \
    --set service.type=ExternalName --set service.externalName=localhost \
    --set webhook.servicePort="$WPORT" --set webhook.port="$WPORT" --set metrics.port="$HPORT" \
    --set leaderElection.resourceName="$LEASE" --set guard.enabled=false --set allocationGuard.enabled=false \
    --set-json "webhook.namespaceSelector={\"matchLabels\":{\"gpuslice.io/e2e\":\"$P\"}}" "$@" >"$work/rendered.yaml" || return 1
  python3 - "$work" "$WPORT" <<'PY'
import base64, os, sys, yaml
work, wport = sys.argv[1], int(sys.argv[2])
out = []
os.makedirs(work + "/tls", exist_ok=True)
for o in yaml.safe_load_all(open(work + "/rendered.yaml")):
    if not o or o["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        continue  # the lab's guards stay the tenant's only ones
    if o["kind"] == "Service":
        # As a ClusterIP Service would list it (443 -> the container port): for ExternalName these ports are not
        # used, the API server dials localhost:<clientConfig.service.port>.
        o["spec"]["ports"] = [{"name": "webhook", "port": 443, "targetPort": wport, "protocol": "TCP"}]
    if o["kind"] == "Secret" and o.get("type") == "kubernetes.io/tls":
        for k in ("tls.crt", "tls.key", "ca.crt"):
            open(f"{work}/tls/{k}", "wb").write(base64.b64decode(o["data"][k]))
        os.chmod(work + "/tls/tls.key", 0o600)
    if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {}):
        open(work + "/configmap-config.yaml", "w").write(o["data"]["config.yaml"])
    out.append(o)
yaml.safe_dump_all(out, open(work + "/objects.yaml", "w"), sort_keys=False)
PY
}
# serve_config [drop-lease-namespace]: the ConfigMap's configuration with the lab's paths and loopback addresses.
serve_config() {
  python3 - "$work" "$WPORT" "$HPORT" "${1:-}" <<'PY'
import sys, yaml
work, wport, hport, drop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
c = yaml.safe_load(open(work + "/configmap-config.yaml"))
c["kubeconfig"] = work + "/acme.kubeconfig"
c["webhook"]["bindAddress"] = "127.0.0.1:" + wport
c["webhook"]["tlsCertFile"] = work + "/tls/tls.crt"
c["webhook"]["tlsPrivateKeyFile"] = work + "/tls/tls.key"
c.setdefault("server", {})["healthBindAddress"] = "127.0.0.1:" + hport
if drop:
    c["scheduler"]["leaderElection"].pop("resourceNamespace", None)
open(work + "/serve-config.yaml", "w").write(yaml.safe_dump(c, sort_keys=False))
PY
}
start_serve() {
  # ip netns exec execs gpuslice: $! is gpuslice's own pid (a shell function here would leave it orphaned).
  ip netns exec "$(netns_of a)" "$(gpuslice_bin)" serve --config="$work/serve-config.yaml" >>"$work/serve.log" 2>&1 &
  serve_pid=$!
  wait_for 30 in_ns a curl -sf --cacert "$work/tls/ca.crt" --resolve "$N-webhook.$R.svc:$WPORT:127.0.0.1" \
    "https://$N-webhook.$R.svc:$WPORT/readyz?exclude=leader"
}
lease_of() { kubectl -n "$1" get lease "$LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
leads() { [[ -n $(lease_of "$1") ]]; }
verdicts() { grep -E '^(PASS|FAIL|SKIP) |^doctor:' <<<"$DOCTOR_OUT" | tr -s ' ' | tr '\n' ' '; }

section "gpuslice under other names: fullnameOverride $N, namespace $R, ExternalName Service"
kubectl create namespace "$R" >/dev/null && kubectl label namespace "$R" gpuslice.io/webhook=ignore >/dev/null
kubectl create namespace "$P" >/dev/null && kubectl label namespace "$P" gpuslice.io/webhook=ignore gpuslice.io/e2e="$P" >/dev/null
if ! render 2>"$work/err"; then fail "helm template under other names" "$(cat "$work/err")"; exit 1; fi
serve_config
if out=$(kubectl apply -f "$work/objects.yaml" 2>&1); then
  pass "the renamed objects applied" "$(grep -oE '^[a-z.]+/[a-z0-9.-]+' <<<"$out" | tr '\n' ' ')"
else
  fail "the renamed objects applied" "$out"; exit 1
fi
svc=$(kubectl -n "$R" get service "$N-webhook" -o jsonpath='{.spec.type} {.spec.externalName} ports={.spec.ports[*].port}')
cc=$(kubectl get mutatingwebhookconfiguration "$N" -o jsonpath='{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}:{.webhooks[0].clientConfig.service.port}')
note "Service $R/$N-webhook: $svc; webhook clientConfig.service $cc"
# The process authenticates as R's ServiceAccount (a client certificate from the tenant's CA, as lab.sh does for
# gpuslice-system's), so the renamed RBAC is what it runs with.
subj="/O=system:serviceaccounts/O=system:serviceaccounts:$R/CN=system:serviceaccount:$R:$N"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subj" -keyout "$work/acme.key" -out "$work/acme.csr" 2>/dev/null &&
  printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$work/acme.ext" &&
  openssl x509 -req -in "$work/acme.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -CAserial "$work/ca.srl" \
    -days 1 -extfile "$work/acme.ext" -out "$work/acme.crt" 2>/dev/null
sed -e "s|$pki/gpuslice.crt|$work/acme.crt|" -e "s|$pki/gpuslice.key|$work/acme.key|" \
  "$(tenant_dir a)/gpuslice.kubeconfig" >"$work/acme.kubeconfig"
if start_serve; then
  pass "a second gpuslice serve in $(netns_of a) as system:serviceaccount:$R:$N (webhook 127.0.0.1:$WPORT)" "pid $serve_pid"
else
  fail "the renamed gpuslice serve ready" "$(tail -5 "$work/serve.log")"; exit 1
fi
if wait_for 40 leads "$R"; then
  pass "it leads on Lease $R/$LEASE" "holder $(lease_of "$R")"
else
  fail "it leads on Lease $R/$LEASE" "$(grep -m3 -iE 'lease|forbidden' "$work/serve.log")"
fi

section "doctor finds the renamed deployment by what it points at (healthy path)"
rc=0; run_doctor a --probe-namespace "$P" || rc=$?
if ((rc == 0)) && [[ $DOCTOR_OUT != *service-port-mismatch* ]]; then
  pass "doctor passes the healthy renamed path (exit 0, no service-port-mismatch)" "$(verdicts)"
else
  fail "doctor passes the healthy renamed path (exit $rc)" "$DOCTOR_OUT"
fi
b=$(doctor_block webhook-config)
[[ $b == *"$N"* && $b == *"Service $R/$N-webhook: ExternalName localhost: the API server dials localhost:$WPORT"* ]] &&
  pass "webhook-config: the renamed webhook, its ExternalName Service dialed on clientConfig's port $WPORT (the Service lists 443)" "$b" ||
  fail "webhook-config: the renamed webhook and its ExternalName Service" "$b"
b=$(doctor_block serving-cert)
[[ $(doctor_verdict serving-cert) == PASS && $b == *"Secret $R/$N-tls"* ]] &&
  pass "serving-cert: the Secret $R/$N-tls found by its chain to the caBundle" "$b" ||
  fail "serving-cert: the Secret $R/$N-tls found by its chain to the caBundle" "$b"
b=$(doctor_block gpu-pod-dry-run)
[[ $(doctor_verdict gpu-pod-dry-run) == PASS ]] &&
  pass "gpu-pod-dry-run: mutated by the renamed webhook (the API server dialed localhost:$WPORT through the tunnel)" "$b" ||
  fail "gpu-pod-dry-run: mutated by the renamed webhook" "$b"
b=$(doctor_block scheduler-lease)
[[ $(doctor_verdict scheduler-lease) == PASS && $b == *"ConfigMap $R/$N-config"* && $b == *"Lease $R/$LEASE"* ]] &&
  pass "scheduler-lease: the Lease named by the renamed ConfigMap, held" "$b" ||
  fail "scheduler-lease: the Lease named by the renamed ConfigMap, held" "$b"

section "broken: the webhook's Service a ClusterIP with the same ports (443, not $WPORT)"
kubectl -n "$R" get service "$N-webhook" -o yaml >"$work/service.yaml"
kubectl -n "$R" delete service "$N-webhook" --wait=true >/dev/null 2>&1
kubectl -n "$R" create service clusterip "$N-webhook" --tcp=443:"$WPORT" >/dev/null 2>&1
# The API server resolves the Service when it dials, and keeps its connection to the webhook alive: restart the
# webhook so the next call dials (and resolves) again.
stop_serve; start_serve || fail "the renamed gpuslice restarted" "$(tail -5 "$work/serve.log")"
rc=0; run_doctor a --probe-namespace "$P" || rc=$?
b=$(doctor_block webhook-config)
if ((rc == 1)) && [[ $(doctor_verdict webhook-config) == FAIL && $b == *"[service-port-mismatch]"* ]]; then
  pass "doctor: webhook-config FAIL [service-port-mismatch] (exit 1)" "$b"
else
  fail "doctor: webhook-config FAIL [service-port-mismatch]" "exit $rc: $b"
fi
got=$(gpu_pod really-broken 1000 10 | kubectl -n "$P" create --dry-run=server -o jsonpath='{.spec.schedulerName}' -f - 2>&1)
[[ $got != gpuslice-scheduler ]] && pass "the API server agrees: a GPU pod in $P is not mutated" "$got" ||
  fail "the API server agrees: a GPU pod in $P is not mutated" "schedulerName $got"
kubectl -n "$R" delete service "$N-webhook" --wait=true >/dev/null 2>&1
kubectl apply -f "$work/objects.yaml" >/dev/null 2>&1
restored() { run_doctor a --probe-namespace "$P"; }
wait_for 20 restored && pass "the ExternalName Service restored: doctor passes again" "$(verdicts)" ||
  fail "the ExternalName Service restored: doctor passes again" "$DOCTOR_OUT"

section "broken: the renamed gpuslice stopped (the Service is right, nothing answers)"
stop_serve || fail "the renamed gpuslice stopped" "its health port $HPORT still answers"
rc=0; run_doctor a --probe-namespace "$P" || rc=$?
b=$(doctor_block gpu-pod-dry-run)
if ((rc == 1)) && [[ $(doctor_verdict webhook-config) == PASS && $(doctor_verdict gpu-pod-dry-run) == FAIL && $b == *"[webhook-down]"* ]]; then
  pass "doctor: webhook-config PASS, gpu-pod-dry-run FAIL [webhook-down]" "$b"
else
  fail "doctor: webhook-config PASS, gpu-pod-dry-run FAIL [webhook-down]" "exit $rc: $(verdicts) $b"
fi

section "the Lease out of cluster: no leaderElection.resourceNamespace in the configuration"
# The chart's RBAC for a Lease in gpuslice-system (leaderElection.resourceNamespace), then the configuration
# without resourceNamespace in the ConfigMap and for the process: serve, out of cluster, takes gpuslice-system.
render --set leaderElection.resourceNamespace=gpuslice-system 2>"$work/err" || fail "helm template (Lease in gpuslice-system)" "$(cat "$work/err")"
python3 - "$work" <<'PY'
import sys, yaml
work = sys.argv[1]
objs = [o for o in yaml.safe_load_all(open(work + "/objects.yaml")) if o]
for o in objs:
    if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {}):
        c = yaml.safe_load(o["data"]["config.yaml"])
        c["scheduler"]["leaderElection"].pop("resourceNamespace", None)
        o["data"]["config.yaml"] = yaml.safe_dump(c, sort_keys=False)
        open(work + "/configmap-config.yaml", "w").write(o["data"]["config.yaml"])
yaml.safe_dump_all(objs, open(work + "/objects.yaml", "w"), sort_keys=False)
PY
kubectl apply -f "$work/objects.yaml" >/dev/null 2>&1
kubectl -n "$R" delete lease "$LEASE" --ignore-not-found >/dev/null 2>&1
serve_config drop
grep -q resourceNamespace "$work/serve-config.yaml" && note "serve-config still names resourceNamespace"
start_serve || fail "the renamed gpuslice restarted" "$(tail -5 "$work/serve.log")"
if wait_for 40 leads gpuslice-system; then
  pass "serve out of cluster, no resourceNamespace: its Lease is gpuslice-system/$LEASE (not $R)" "holder $(lease_of gpuslice-system); in $R: $(lease_of "$R" || true)"
else
  fail "serve out of cluster, no resourceNamespace: its Lease in gpuslice-system" "$(grep -m3 -iE 'lease|forbidden' "$work/serve.log")"
fi
run_doctor a --probe-namespace "$P"
b=$(doctor_block scheduler-lease)
[[ $(doctor_verdict scheduler-lease) == PASS && $b == *"Lease gpuslice-system/$LEASE"* ]] &&
  pass "doctor: scheduler-lease PASS, the Lease found in gpuslice-system (out of cluster) though the ConfigMap is in $R" "$b" ||
  fail "doctor: scheduler-lease finds the out-of-cluster Lease in gpuslice-system" "$b"
exit 0

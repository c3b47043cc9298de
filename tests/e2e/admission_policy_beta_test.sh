#!/usr/bin/env bash
# charts/gpuslice's MutatingAdmissionPolicy as admissionregistration.k8s.io/v1beta1 (the Kubernetes 1.34/1.35
# API; admissionPolicy.apiVersion) against a REAL API server that serves it. The lab's kube-apiserver v1.36.3
# serves the policy as v1 (GA) and, as every beta API, v1beta1 only with --runtime-config; lab/lab.sh's servers
# stay as they are, so this test starts one more kube-apiserver of the same binary for itself (tenant a's PKI,
# the lab's etcd under a prefix of its own, a free loopback port; no controller-manager, no webhook, no tunnel)
# with --runtime-config=admissionregistration.k8s.io/v1beta1=true.
# A server serving the policy as v1beta1 ONLY (1.34/1.35) cannot be made from 1.36: with
# admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false the MutatingAdmissionPolicy admission plugin
# (which watches the v1 resources) never gets ready and kube-apiserver exits in its post-start hooks ("not yet
# ready to handle request"). So both versions are served here, as on a 1.36 cluster with the runtime-config;
# the objects are stored once and converted (the v1 and v1beta1 schemas have the same fields).
#   1. tenant a (the lab's server) does not serve v1beta1 policies;
#   2. the other server does; the chart's v1beta1 rendering passes a server-side dry run (schema and CEL checked
#      by the server; a broken expression is refused by the same dry run), is created as v1beta1 and reads back so;
#   3. the created v1beta1 policy mutates GPU pods (server-side dry-run creates in namespace default): schedulerName,
#      the exclusive-core default, the GPU count default, the admitted-by mark; a CPU pod is left alone;
#   4. `gpuslice doctor` on that server: admission-policy PASS, gpu-pod-dry-run PASS (mutated by the policy).
#      (doctor reads v1 when it is served, v1beta1 only when it is not: that branch is unit-tested only.)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"
BIN=$("$ROOT/lab/build-tools.sh" --print-bin)
HELM=$BIN/helm
CHART=$ROOT/charts/gpuslice
use_tenant a || { fail "tenant a" "lab/lab.sh env a failed"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-beta-test.XXXXXX")
pki=$(tenant_dir a)/pki
ETCD_PORT=$(source "$LAB_STATE/lab.env"; echo "$ETCD_PORT")
PREFIX=/gpuslice-e2e-beta-$$
apiserver_pid=""
cleanup() {
  if [[ -n $apiserver_pid ]]; then
    kill -TERM "$apiserver_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$apiserver_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$apiserver_pid" 2>/dev/null
  fi
  # The server's objects under its own etcd prefix (the lab's etcd lives on tmpfs and goes with `lab.sh down`).
  [[ -x $BIN/etcdctl ]] && "$BIN/etcdctl" --endpoints="http://127.0.0.1:$ETCD_PORT" del --prefix "$PREFIX/" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
kb() { "$BIN/kubectl" --kubeconfig "$work/beta.kubeconfig" "$@"; }
map_versions() {  # the versions under which the current server lists MutatingAdmissionPolicy
  "$@" api-resources --api-group=admissionregistration.k8s.io --no-headers 2>/dev/null |
    awk '$NF == "MutatingAdmissionPolicy" {print $(NF-2)}' | sort | xargs
}

beta_resources() {  # the resources the current server lists under admissionregistration.k8s.io/v1beta1
  "$@" get --raw /apis/admissionregistration.k8s.io/v1beta1 2>&1 | python3 -c '
import json, sys
try: print(" ".join(r["name"] for r in json.load(sys.stdin)["resources"] if "/" not in r["name"]) or "none")
except Exception: print("group version not served")' 2>&1
}
section "tenant a's kube-apiserver (lab/lab.sh) serves the policy as v1 only"
a_api=$(map_versions kubectl)
a_beta=$(beta_resources kubectl)
[[ $a_api == admissionregistration.k8s.io/v1 && $a_beta != *mutatingadmissionpolicies* ]] &&
  pass "tenant a: MutatingAdmissionPolicy as $a_api; admissionregistration.k8s.io/v1beta1: $a_beta" ||
  fail "tenant a serves the policy as v1 only" "api-resources: $a_api; v1beta1: $a_beta"

section "one more kube-apiserver ($("$BIN/kube-apiserver" --version 2>&1)) serving the policy as v1beta1 too"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RUNTIME_CONFIG=admissionregistration.k8s.io/v1beta1=true
mkdir -p "$work/cert-dir"
"$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="$PREFIX" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" --cert-dir="$work/cert-dir" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
  --service-account-issuer="https://127.0.0.1:$port" --service-account-key-file="$pki/sa.pub" \
  --service-account-signing-key-file="$pki/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=RBAC --profiling=false --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
  --runtime-config="$RUNTIME_CONFIG" >"$work/apiserver.log" 2>&1 &
apiserver_pid=$!
cat >"$work/beta.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: beta, cluster: {server: "https://127.0.0.1:$port", certificate-authority: $pki/ca.crt}}]
users: [{name: admin, user: {client-certificate: $pki/admin.crt, client-key: $pki/admin.key}}]
contexts: [{name: beta, context: {cluster: beta, user: admin}}]
current-context: beta
EOF
ready() { curl -sf --cacert "$pki/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && kb get namespace default >/dev/null; }
t0=$(now_ms)
if wait_for 120 ready; then
  pass "kube-apiserver --runtime-config=$RUNTIME_CONFIG ready on 127.0.0.1:$port" "in $(( $(now_ms) - t0 )) ms, etcd prefix $PREFIX"
else
  fail "kube-apiserver with --runtime-config=$RUNTIME_CONFIG ready" "$(grep -m3 -iE 'error|invalid|unknown' "$work/apiserver.log" | cut -c1-300)"
  exit 1
fi
b_beta=$(beta_resources kb)
[[ $b_beta == *mutatingadmissionpolicies* && $b_beta == *mutatingadmissionpolicybindings* ]] &&
  pass "it serves admissionregistration.k8s.io/v1beta1: $b_beta (and v1: $(map_versions kb))" ||
  fail "it serves MutatingAdmissionPolicy as v1beta1" "v1beta1: $b_beta"

section "the chart's v1beta1 rendering on that server"
sel='{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["default"]}]}'
if "$HELM" template beta "$CHART" -s templates/admission-policy.yaml --set topology=policy \
     --set admissionPolicy.apiVersion=admissionregistration.k8s.io/v1beta1 --set-json "admissionPolicy.namespaceSelector=$sel" \
     >"$work/policy.yaml" 2>"$work/err" &&
   [[ $(grep -c '^apiVersion: admissionregistration.k8s.io/v1beta1$' "$work/policy.yaml") == 2 ]]; then
  pass "helm template --set admissionPolicy.apiVersion=admissionregistration.k8s.io/v1beta1: policy and binding v1beta1"
else
  fail "the chart renders the v1beta1 policy and binding" "$(cat "$work/err") $(grep '^apiVersion' "$work/policy.yaml" | tr '\n' ' ')"
fi
if out=$(kb create --dry-run=server -f "$work/policy.yaml" 2>&1); then
  pass "server-side dry run of the v1beta1 rendering (schema and CEL checked by the server)" "$(tr '\n' ' ' <<<"$out")"
else
  fail "server-side dry run of the v1beta1 rendering" "$out"
fi
# A wrong expression must be refused by the same dry run (it checks, it does not just accept).
sed '0,/expression: /s/expression: .*/expression: "object.spec.nosuchfield +"/' "$work/policy.yaml" >"$work/broken.yaml"
if out=$(kb create --dry-run=server -f "$work/broken.yaml" 2>&1); then
  fail "the same dry run refuses a broken CEL expression" "accepted: $out"
else
  pass "the same dry run refuses a broken CEL expression" "$(grep -m1 -oE 'Invalid value.{0,160}|compilation failed.{0,120}' <<<"$out")"
fi
if out=$(kb create -f "$work/policy.yaml" 2>&1); then pass "the v1beta1 policy and binding created" "$(tr '\n' ' ' <<<"$out")"
else fail "the v1beta1 policy and binding created" "$out"; fi
if out=$(kb get mutatingadmissionpolicies.v1beta1.admissionregistration.k8s.io -o name 2>&1) && [[ $out == *beta-gpuslice* || -n $out ]]; then
  pass "the policy reads back as v1beta1" "$(tr '\n' ' ' <<<"$out")"
else
  fail "the policy reads back as v1beta1" "$out"
fi

section "the v1beta1 policy mutates GPU pods inside that API server"
pod() {  # name limits-flow-map
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec: {containers: [{name: c, image: busybox, resources: {limits: %s}}]}\n' "$1" "$2"
}
probe() { pod probe '{nvidia.com/gpu: "1"}' | kb create --dry-run=server -o jsonpath='{.spec.schedulerName}' -f - 2>/dev/null | grep -qx gpuslice-scheduler; }
t0=$(now_ms)
if wait_for 30 probe; then pass "the v1beta1 policy is active" "$(( $(now_ms) - t0 )) ms after it was created"
else fail "the v1beta1 policy is active" "a GPU pod in default is not mutated after 30 s"; fi
got=$(pod whole-card '{nvidia.com/gpu: "1"}' | kb create --dry-run=server -o json -f - 2>&1 | jq -c \
  '{s: .spec.schedulerName, l: .spec.containers[0].resources.limits, a: .metadata.annotations["gpuslice.io/admitted-by"]}' 2>&1)
[[ $got == '{"s":"gpuslice-scheduler","l":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"100"},"a":"admission-policy"}' ]] &&
  pass "a whole-card GPU pod: schedulerName, exclusive cores (gpucores 100), admitted-by" "$got" ||
  fail "a whole-card GPU pod: schedulerName, exclusive cores, admitted-by" "$got"
got=$(pod memory-only '{nvidia.com/gpumem: "4000"}' | kb create --dry-run=server -o json -f - 2>&1 | jq -c \
  '{s: .spec.schedulerName, l: .spec.containers[0].resources.limits}' 2>&1)
[[ $got == '{"s":"gpuslice-scheduler","l":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"4k"}}' ]] &&   # 4000 as the API server canonicalises it
  pass "a memory-only GPU pod: the GPU count default (1), no core default" "$got" ||
  fail "a memory-only GPU pod: the GPU count default (1), no core default" "$got"
got=$(pod cpu-only '{cpu: 100m}' | kb create --dry-run=server -o json -f - 2>&1 | jq -c \
  '{s: .spec.schedulerName, a: (.metadata.annotations // {})}' 2>&1)
[[ $got == '{"s":"default-scheduler","a":{}}' ]] && pass "a CPU pod is left alone" "$got" ||
  fail "a CPU pod is left alone" "$got"

section "gpuslice doctor on that server"
DOCTOR_OUT=$("$(gpuslice_bin)" doctor --kubeconfig "$work/beta.kubeconfig" --probe-namespace default 2>&1)
ap=$(doctor_block admission-policy) gd=$(doctor_block gpu-pod-dry-run)
[[ $(doctor_verdict admission-policy) == PASS ]] &&
  pass "doctor: admission-policy PASS, the policy created as v1beta1 found and bound for default" "$ap" ||
  fail "doctor: admission-policy PASS, the policy created as v1beta1 found" "$ap"
[[ $(doctor_verdict gpu-pod-dry-run) == PASS ]] && pass "doctor: gpu-pod-dry-run PASS (mutated by the v1beta1 policy)" "$gd" ||
  fail "doctor: gpu-pod-dry-run PASS (mutated by the v1beta1 policy)" "$gd"
note "(the other checks of doctor need nodes, a Lease and the guard, which this bare API server does not have)"
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" <<<"$DOCTOR_OUT" &&
  fail "no sanitizer report from doctor" "$(grep -m3 -E 'ERROR:|runtime error' <<<"$DOCTOR_OUT")"
exit 0

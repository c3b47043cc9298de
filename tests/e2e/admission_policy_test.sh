#!/usr/bin/env bash
# The policy topology: GPU pods mutated by charts/gpuslice's MutatingAdmissionPolicy, evaluated INSIDE the
# tenant's kube-apiserver (no webhook call, no tunnel), compared with gpuslice's webhook on the same pods.
#
# The lab runs kube-apiserver v1.36, where MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1, on by
# default: lab/lab.sh sets no feature gate and no --runtime-config). The test requires v1 to be served and renders
# the chart's default (v1); v1beta1 (1.34/1.35 behind the feature gate) stays selectable in the chart.
#
# On tenant a: namespace W is served by the webhook (the lab's normal path, through Konnectivity); namespace P is
# labelled gpuslice.io/webhook=ignore (never sent to the webhook) and is the only one the policy is bound to.
#   1. for each pod shape, a server-side dry-run create in W (the webhook's mutation, webhook/policy.cc: the
#      reference) and in P (the policy's): schedulerName, every container's resources and env must be equal;
#      the only difference allowed is the annotation each writes (gpuslice.io/gpu-request by the webhook,
#      gpuslice.io/admitted-by: admission-policy by the policy);
#   2. namespace F has both (webhook and policy): the same spec as the webhook alone, and both annotations;
#   3. with the Konnectivity agent stopped (the tunnel down), a GPU pod in P is still admitted, mutated and
#      bound by gpuslice; in F it is admitted with the policy's mutation (the fallback); in W it is refused by the
#      scheduler guard (the webhook is unreachable);
#   4. `gpuslice doctor` with the tunnel down: passes for P (no webhook, the bound policy, the policy's pod);
#      fails for F (webhook-fallback: the webhook serving F is not reached) and for a namespace opted out of the
#      webhook that no binding selects (namespace-not-served).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"
HELM=$("$ROOT/lab/build-tools.sh" --print-bin)/helm
W=policy-ref-$$ P=policy-map-$$ F=policy-both-$$ U=policy-none-$$
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-policy-test.XXXXXX")
use_tenant a || { fail "tenant a" "lab/lab.sh env a failed"; exit 1; }
agent_stopped=false
cleanup() {
  use_tenant a
  $agent_stopped && { "$LAB" start a agent >/dev/null 2>&1 || echo "WARNING: could not restart tenant a's agent"; }
  [[ -s $work/policy.yaml ]] && kubectl delete -f "$work/policy.yaml" --wait=false >/dev/null 2>&1
  kubectl delete namespace "$W" "$P" "$F" "$U" --wait=false >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

section "the chart's MutatingAdmissionPolicy on tenant a ($(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"
served=$(kubectl api-resources --api-group=admissionregistration.k8s.io -o name | grep -c mutatingadmissionpolicies)
((served > 0)) || { fail "the API server serves MutatingAdmissionPolicy" "kubectl api-resources shows none (feature gate?)"; exit 1; }
api=$(kubectl api-resources --api-group=admissionregistration.k8s.io --no-headers | awk '$NF == "MutatingAdmissionPolicy" {print $(NF-2)}')
if [[ $api == admissionregistration.k8s.io/v1 ]]; then
  pass "the API server serves MutatingAdmissionPolicy as $api (GA, no feature gate, no runtime-config)"
else
  fail "the API server serves MutatingAdmissionPolicy as admissionregistration.k8s.io/v1" "it serves: ${api:-none}"; exit 1
fi
kubectl create namespace "$W" >/dev/null
kubectl create namespace "$P" >/dev/null
kubectl label namespace "$P" gpuslice.io/webhook=ignore gpuslice.io/e2e="$P" >/dev/null
kubectl create namespace "$F" >/dev/null   # both: the webhook (not opted out) and the policy
kubectl label namespace "$F" gpuslice.io/e2e="$F" >/dev/null
out=""
if "$HELM" template e2e "$ROOT/charts/gpuslice" -s templates/admission-policy.yaml --set topology=policy \
     --set fullnameOverride=gpuslice-e2e-$$ \
     --set-json "admissionPolicy.namespaceSelector={\"matchExpressions\":[{\"key\":\"gpuslice.io/e2e\",\"operator\":\"In\",\"values\":[\"$P\",\"$F\"]}]}" >"$work/policy.yaml" 2>"$work/err" &&
   [[ $(grep -c '^apiVersion: admissionregistration.k8s.io/v1$' "$work/policy.yaml") == 2 ]] &&
   out=$(kubectl apply -f "$work/policy.yaml" 2>&1); then
  pass "policy and binding applied (the chart's default: admissionregistration.k8s.io/v1)" "$(tr '\n' ' ' <<<"$out")"
else
  fail "policy and binding applied" "$(cat "$work/err") rendered: $(grep '^apiVersion' "$work/policy.yaml" 2>/dev/null | tr '\n' ' ') $out"; exit 1
fi

# The API server loads policies asynchronously: wait until a probe pod in P is mutated.
probe() {
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: %s}\nspec: {containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}]}\n' "$P" |
    kubectl create --dry-run=server -o jsonpath='{.spec.schedulerName}' -f - 2>/dev/null | grep -qx gpuslice-scheduler
}
t0=$(now_ms)
if wait_for 30 probe; then pass "the policy is active" "$(( $(now_ms) - t0 )) ms after it was applied"
else fail "the policy is active" "a probe GPU pod in $P is not mutated after 30 s"; exit 1; fi

# Pod shapes: NAME then the containers (YAML flow), optionally initContainers.
declare -A shapes=(
  [all-given]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "10000", nvidia.com/gpucores: "30"}}}]'
  [memory-only]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpumem: "4000"}}}]'
  [count-only-exclusive]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "2"}}}]'
  [percentage-100]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpumem-percentage: "100"}}}]'
  [percentage-50]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50"}}}]'
  [priority-env]='containers: [{name: c, image: busybox, env: [{name: A, value: b}], resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000", nvidia.com/priority: "1"}}}]'
  [priority-replace]='containers: [{name: c, image: busybox, env: [{name: CUDA_TASK_PRIORITY, value: "7"}], resources: {limits: {nvidia.com/gpumem: "1000", nvidia.com/priority: "0"}}}]'
  [priority-no-env]='containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpucores: "20", nvidia.com/priority: "1"}}}]'
  [init-and-sidecar]='initContainers: [{name: i, image: busybox, resources: {limits: {nvidia.com/gpucores: "10"}}}], containers: [{name: c, image: busybox}, {name: g, image: busybox, resources: {limits: {nvidia.com/gpumem: "2000"}}}]'
  [default-scheduler-named]='schedulerName: default-scheduler, containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpumem: "3000"}}}]'
)
pod_yaml() {  # name namespace shape
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec: {%s}\n' "$1" "$2" "${shapes[$3]}"
}
compare='
import json, sys
w, p = (json.load(open(f)) for f in sys.argv[1:3])
def view(o):
    s = o["spec"]
    return {"schedulerName": s.get("schedulerName"),
            "containers": [{k: c.get(k) for k in ("name", "resources", "env")} for c in s.get("containers", [])],
            "initContainers": [{k: c.get(k) for k in ("name", "resources", "env")} for c in s.get("initContainers", [])]}
vw, vp = view(w), view(p)
aw = w["metadata"].get("annotations", {}); ap = p["metadata"].get("annotations", {})
extra = {"webhook": sorted(set(aw) - set(ap)), "policy": sorted(set(ap) - set(aw))}
ok = vw == vp and extra == {"webhook": ["gpuslice.io/gpu-request"], "policy": ["gpuslice.io/admitted-by"]} and \
     ap.get("gpuslice.io/admitted-by") == "admission-policy"
print(("same" if ok else "DIFFERENT") + " " + json.dumps(vp, separators=(",", ":")) + " annotations only by: " + json.dumps(extra))
if not ok: print("webhook: " + json.dumps(vw, separators=(",", ":")))
sys.exit(0 if ok else 1)
'
section "the same pods through the webhook (reference) and through the policy"
for s in $(printf '%s\n' "${!shapes[@]}" | sort); do
  pod_yaml "$s" "$W" "$s" | kubectl create --dry-run=server -o json -f - >"$work/$s.webhook.json" 2>"$work/$s.webhook.err"
  pod_yaml "$s" "$P" "$s" | kubectl create --dry-run=server -o json -f - >"$work/$s.policy.json" 2>"$work/$s.policy.err"
  if [[ ! -s $work/$s.webhook.json || ! -s $work/$s.policy.json ]]; then
    fail "$s: admitted by both" "webhook: $(cat "$work/$s.webhook.err") policy: $(cat "$work/$s.policy.err")"
    continue
  fi
  if out=$(python3 -c "$compare" "$work/$s.webhook.json" "$work/$s.policy.json" 2>&1); then
    pass "$s: the policy mutates as the webhook does" "$out"
  else
    fail "$s: the policy mutates as the webhook does" "$out"
  fi
done
# A non-GPU pod and a pod of another scheduler: neither mutates (the guard refuses the second in both).
printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: plain, namespace: %s}\nspec: {containers: [{name: c, image: busybox}]}\n' "$P" |
  kubectl create --dry-run=server -o json -f - >"$work/plain.json" 2>&1
if [[ $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["spec"]["schedulerName"], "gpuslice.io/admitted-by" in o["metadata"].get("annotations", {}))' "$work/plain.json" 2>&1) == "default-scheduler False" ]]; then
  pass "a pod asking for no GPU is left alone by the policy"
else
  fail "a pod asking for no GPU is left alone by the policy" "$(head -c 300 "$work/plain.json")"
fi
out=$(printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: foreign, namespace: %s}\nspec: {schedulerName: other, containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}]}\n' "$P" |
  kubectl create --dry-run=server -f - 2>&1)
[[ $? -ne 0 && $out == *gpuslice-scheduler-guard* ]] && pass "a GPU pod naming another scheduler is not taken over by the policy (the guard refuses it)" "$out" ||
  fail "a GPU pod naming another scheduler is not taken over by the policy" "$out"

section "policy and webhook together (the policy runs first, the webhook's mutation is idempotent)"
pod_yaml both "$F" memory-only | kubectl create --dry-run=server -o json -f - >"$work/both.json" 2>&1
if python3 - "$work/memory-only.webhook.json" "$work/both.json" <<'PY'
import json, sys
w, b = (json.load(open(f)) for f in sys.argv[1:3])
strip = lambda o: [{k: c.get(k) for k in ("resources", "env")} for c in o["spec"]["containers"]]
a = b["metadata"].get("annotations", {})
ok = strip(w) == strip(b) and b["spec"]["schedulerName"] == w["spec"]["schedulerName"] and \
     a.get("gpuslice.io/admitted-by") == "admission-policy" and \
     a.get("gpuslice.io/gpu-request") == w["metadata"]["annotations"]["gpuslice.io/gpu-request"]
print("spec as the webhook alone:", strip(b), "annotations:", sorted(a))
sys.exit(0 if ok else 1)
PY
then pass "both: the same spec as the webhook alone, and both annotations"
else fail "both: the same spec as the webhook alone, and both annotations" "$(head -c 400 "$work/both.json")"; fi

section "the tunnel down: the policy needs no webhook"
"$LAB" stop a agent >/dev/null 2>&1 && agent_stopped=true
wait_for 20 bash -c "! curl -sf http://127.0.0.1:\$(( $(source "$LAB_STATE/lab.env"; echo "$KONN_PORT_BASE") + 2 ))/readyz" || true
gpu_pod tunnel-down 5000 25 | sed "s/^metadata:/metadata:\n  namespace: $P/" | kubectl apply -f - >"$work/p.out" 2>&1
if wait_for 30 pod_bound "$P" tunnel-down; then
  pass "tunnel down: a GPU pod in the policy's namespace is admitted, mutated in the API server and bound by gpuslice" \
    "schedulerName=$(pod_field "$P" tunnel-down '{.spec.schedulerName}') node=$(pod_field "$P" tunnel-down '{.spec.nodeName}') admitted-by=$(pod_field "$P" tunnel-down '{.metadata.annotations.gpuslice\.io/admitted-by}') allocated=$(pod_field "$P" tunnel-down '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
else
  fail "tunnel down: a GPU pod in the policy's namespace is bound" "$(cat "$work/p.out") $(pod_field "$P" tunnel-down '{.spec.schedulerName}') $(pod_message "$P" tunnel-down)"
fi
gpu_pod fallback 4000 15 | sed "s/^metadata:/metadata:\n  namespace: $F/" | kubectl apply -f - >"$work/f.out" 2>&1
if wait_for 30 pod_bound "$F" fallback; then
  pass "tunnel down: with policy and webhook, the policy is the fallback (webhook unreachable, pod admitted and bound)" \
    "schedulerName=$(pod_field "$F" fallback '{.spec.schedulerName}') admitted-by=$(pod_field "$F" fallback '{.metadata.annotations.gpuslice\.io/admitted-by}') gpu-request=$(pod_field "$F" fallback '{.metadata.annotations.gpuslice\.io/gpu-request}') (none: the webhook was not reached)"
else
  fail "tunnel down: with policy and webhook, the policy is the fallback" "$(cat "$work/f.out") $(pod_message "$F" fallback)"
fi
t0=$(now_ms)
out=$(gpu_pod tunnel-down 5000 25 | sed "s/^metadata:/metadata:\n  namespace: $W/" | kubectl create --dry-run=server -f - 2>&1)
if [[ $? -ne 0 && $out == *gpuslice-scheduler-guard* ]]; then
  pass "tunnel down: the same pod in a webhook namespace is refused by the guard (webhook unreachable, failurePolicy Ignore)" "after $(( $(now_ms) - t0 )) ms: $out"
else
  fail "tunnel down: the same pod in a webhook namespace is refused by the guard" "$out"
fi

section "gpuslice doctor in the policy topology (tunnel still down)"
if run_doctor a --probe-namespace "$P"; then
  pass "doctor passes the policy path with the tunnel down" "$(grep -E '^(PASS|FAIL|SKIP) |^doctor:' <<<"$DOCTOR_OUT" | tr -s ' ' | tr '\n' ' ')"
else
  fail "doctor passes the policy path with the tunnel down" "$DOCTOR_OUT"
fi
v="$(doctor_verdict webhook-config) $(doctor_verdict admission-policy) $(doctor_verdict serving-cert) $(doctor_verdict gpu-pod-dry-run)"
[[ $v == "SKIP PASS SKIP PASS" && $(doctor_block admission-policy) == *"gpuslice-e2e-$$-gpu-pods"* &&
   $(doctor_block gpu-pod-dry-run) == *"mutated by the MutatingAdmissionPolicy inside the API server"* ]] &&
  pass "doctor: no webhook for $P, the bound policy found, the policy-mutated pod accepted" "$v; $(doctor_block admission-policy) $(doctor_block gpu-pod-dry-run)" ||
  fail "doctor: no webhook for $P, the bound policy found, the policy-mutated pod accepted" "$v; $DOCTOR_OUT"
if ! run_doctor a --probe-namespace "$F" && [[ $(doctor_block gpu-pod-dry-run) == *"[webhook-fallback]"* ]]; then
  pass "doctor fails $F (webhook and policy) with the tunnel down: the policy is only the fallback" "$(doctor_block gpu-pod-dry-run)"
else
  fail "doctor fails $F with the tunnel down: webhook-fallback" "$DOCTOR_OUT"
fi
kubectl create namespace "$U" >/dev/null && kubectl label namespace "$U" gpuslice.io/webhook=ignore >/dev/null
if ! run_doctor a --probe-namespace "$U" && [[ $(doctor_block webhook-config) == *"[namespace-not-served]"* &&
   $(doctor_block gpu-pod-dry-run) == *"[no-admission]"* ]]; then
  pass "doctor fails a namespace opted out of the webhook that no policy binding selects" "$(doctor_block webhook-config)"
else
  fail "doctor fails a namespace served by neither webhook nor policy" "$DOCTOR_OUT"
fi
"$LAB" start a agent >/dev/null 2>&1 && agent_stopped=false

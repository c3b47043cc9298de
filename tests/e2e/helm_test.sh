#!/usr/bin/env bash
# charts/gpuslice against the running lab:
#   1. `helm lint --strict` and `helm template` of every supported combination (topology worker/sidecar/policy,
#      certificates from helm/secret/cert-manager, the admission policy as the webhook's fallback, the lab values);
#   2. the default rendering is object-by-object the kustomize base (tests/e2e/chart_vs_base.py);
#   3. every rendered object passes a server-side dry run on tenant a's real kube-apiserver (schemas, CEL of the
#      matchConditions, ValidatingAdmissionPolicies and the MutatingAdmissionPolicy, cert-manager's CRDs);
#   4. tenant b of the e2e lab IS a `helm install` (lab/lab.sh up --helm b): the release is deployed, a GPU pod
#      goes through the chart's webhook (its own certificate, through the tunnel) and is bound by gpuslice, and
#      `helm upgrade` keeps the serving certificate and the caBundle (the chart looks its Secret up).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"
CACHE=${GPUSLICE_LAB_CACHE:-$HOME/.cache/gpuslice-lab}
BIN=$("$ROOT/lab/build-tools.sh" --print-bin)   # the lab's tools, one directory per Kubernetes version
HELM=$BIN/helm
CHART=$ROOT/charts/gpuslice
KUBE_VERSION=$("$BIN/kubectl" version --client -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
[[ -x $HELM ]] || { fail "helm built" "no $HELM (lab/build-tools.sh)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-helm-test.XXXXXX")
scratch=gpuslice-helm-test-$$
installed_cm_crds=false
cleanup() {
  use_tenant a
  kubectl delete namespace "$scratch" --wait=false >/dev/null 2>&1
  $installed_cm_crds && kubectl delete -f "$CM_CRDS" --wait=false >/dev/null 2>&1
  use_tenant b
  kubectl delete namespace helm-test-$$ --wait=false >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

section "helm lint and helm template ($("$HELM" version --short), --kube-version $KUBE_VERSION)"
ca=$(base64 -w0 <<<"-----BEGIN CERTIFICATE-----")
declare -A variants=(
  [worker-helm-certs]=""
  [worker-secret-certs]="--set certs.source=secret --set certs.caBundle=$ca"
  [worker-cert-manager]="--set certs.source=cert-manager"
  [worker-with-policy-fallback]="--set admissionPolicy.enabled=true"
  [sidecar]="--set topology=sidecar"
  [policy]="--set topology=policy"
  [lab]="-f $ROOT/lab/helm-values-lab.yaml --set tenant=tenant-b"
)
for v in $(printf '%s\n' "${!variants[@]}" | sort); do
  # shellcheck disable=SC2086
  if out=$("$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" ${variants[$v]} 2>&1); then
    pass "helm lint --strict: $v" "$(tail -1 <<<"$out")"
  else
    fail "helm lint --strict: $v" "$(grep -E 'ERROR|WARNING|Error' <<<"$out" | head -5)"
  fi
  # A name of its own so the dry runs below create fresh objects beside tenant a's gpuslice.
  # shellcheck disable=SC2086
  if "$HELM" template chk "$CHART" --namespace "$scratch" --kube-version "$KUBE_VERSION" \
       --set fullnameOverride=gpuslice-chk ${variants[$v]} >"$work/$v.yaml" 2>"$work/$v.err"; then
    pass "helm template: $v" "$(grep '^kind:' "$work/$v.yaml" | sort | uniq -c | awk '{printf "%s %s, ", $1, $3}')"
  else
    fail "helm template: $v" "$(head -3 "$work/$v.err")"
  fi
done
out=$("$HELM" template chk "$CHART" --set topology=nodes 2>&1) && fail "a bad topology is refused" "$out" ||
  { [[ $out == *'topology: "nodes" is not one of worker, sidecar, policy'* ]] && pass "a bad topology is refused, naming the value" "$out" ||
    fail "a bad topology is refused, naming the value" "$out"; }
out=$("$HELM" template chk "$CHART" --set certs.source=secret 2>&1) && fail "certs.source=secret without a caBundle is refused" "$out" ||
  pass "certs.source=secret without a caBundle is refused" "$(tail -1 <<<"$out")"

# What each topology renders (the contract docs/deploy-kamaji.md states).
has_kind() { grep -q "^kind: $2\$" "$work/$1.yaml"; }
check_kinds() {  # variant "present kinds" "absent kinds"
  local v=$1 k bad=""
  for k in $2; do has_kind "$v" "$k" || bad+=" missing:$k"; done
  for k in $3; do has_kind "$v" "$k" && bad+=" unexpected:$k"; done
  if [[ -z $bad ]]; then pass "topology $v renders [$2], not [$3]"; else fail "topology $v renders [$2], not [$3]" "$bad"; fi
}
check_kinds sidecar "MutatingWebhookConfiguration ValidatingAdmissionPolicy ClusterRole Secret" "Deployment Service PodDisruptionBudget MutatingAdmissionPolicy"
check_kinds policy "MutatingAdmissionPolicy MutatingAdmissionPolicyBinding Deployment ValidatingAdmissionPolicy" "MutatingWebhookConfiguration Secret"
check_kinds worker-with-policy-fallback "MutatingWebhookConfiguration MutatingAdmissionPolicy Deployment" ""
# The admission policy's API version: v1 by default (GA from 1.36), v1beta1 still selectable for 1.34/1.35 (only
# rendered here: the lab's 1.36 API server does not serve v1beta1 without --runtime-config).
api_of() { grep --no-group-separator -A1 -E '^apiVersion: admissionregistration' "$1" | paste - - | awk '$4 ~ /^MutatingAdmissionPolicy/ {print $2}' | sort -u | tr '\n' ' '; }
[[ $(api_of "$work/policy.yaml") == "admissionregistration.k8s.io/v1 " ]] &&
  pass "topology policy: MutatingAdmissionPolicy and its binding are admissionregistration.k8s.io/v1 by default" ||
  fail "topology policy: the policy is admissionregistration.k8s.io/v1 by default" "$(api_of "$work/policy.yaml")"
if "$HELM" template chk "$CHART" --set topology=policy --set admissionPolicy.apiVersion=admissionregistration.k8s.io/v1beta1 \
     >"$work/policy-beta.yaml" 2>&1 && [[ $(api_of "$work/policy-beta.yaml") == "admissionregistration.k8s.io/v1beta1 " ]]; then
  pass "admissionPolicy.apiVersion=admissionregistration.k8s.io/v1beta1 renders the beta objects (Kubernetes 1.34/1.35)"
else
  fail "admissionPolicy.apiVersion=admissionregistration.k8s.io/v1beta1 renders the beta objects" "$(head -c 300 "$work/policy-beta.yaml")"
fi
if grep -q 'url: "https://127.0.0.1:9443/mutate"' "$work/sidecar.yaml" && ! grep -q 'service:$' "$work/sidecar.yaml"; then
  pass "topology sidecar registers the webhook by URL on localhost"
else
  fail "topology sidecar registers the webhook by URL on localhost" "$(grep -A3 clientConfig "$work/sidecar.yaml")"
fi

section "the chart's defaults are the kustomize base"
"$HELM" template gpuslice "$CHART" --namespace gpuslice-system --kube-version "$KUBE_VERSION" >"$work/default.yaml" &&
  "$BIN/kubectl" kustomize "$ROOT/manifests/base" >"$work/base.yaml"
if out=$(python3 "$ROOT/tests/e2e/chart_vs_base.py" "$work/default.yaml" "$work/base.yaml" 2>&1); then
  pass "helm template (defaults) == kubectl kustomize manifests/base, object by object" "$(grep -c same <<<"$out") objects equal; $(grep allowed <<<"$out" | sed 's/^ *//' | tr '\n' ';')"
else
  fail "helm template (defaults) == kubectl kustomize manifests/base, object by object" "$(grep DIFF <<<"$out" | head -8)"
fi

comp=$ROOT/manifests/components/admission-policy
if "$comp/regen.sh" "$HELM" "$work/component.yaml" 2>"$work/component.err" && cmp -s "$work/component.yaml" "$comp/admission-policy.yaml"; then
  pass "manifests/components/admission-policy is the chart's policy (regen.sh output unchanged)" "$(grep -c '^apiVersion: admissionregistration.k8s.io/v1$' "$comp/admission-policy.yaml") objects of admissionregistration.k8s.io/v1"
else
  fail "manifests/components/admission-policy is the chart's policy" "stale: run $comp/regen.sh; $(diff "$comp/admission-policy.yaml" "$work/component.yaml" | head -5) $(cat "$work/component.err")"
fi
cp -r "$ROOT/manifests" "$work/manifests" && mkdir -p "$work/manifests/overlays/with-policy"
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/admission-policy]\n' \
  >"$work/manifests/overlays/with-policy/kustomization.yaml"
if "$BIN/kubectl" kustomize "$work/manifests/overlays/with-policy" >"$work/with-policy.yaml" 2>&1 &&
   grep -q '^kind: MutatingAdmissionPolicyBinding$' "$work/with-policy.yaml" && grep -q '^kind: MutatingWebhookConfiguration$' "$work/with-policy.yaml"; then
  pass "kustomize: manifests/base + components/admission-policy renders the webhook and the policy (the fallback)"
else
  fail "kustomize: manifests/base + components/admission-policy" "$(head -5 "$work/with-policy.yaml")"
fi

section "server-side dry run of every rendering on tenant a"
use_tenant a
kubectl create namespace "$scratch" >/dev/null && kubectl label namespace "$scratch" gpuslice.io/webhook=ignore >/dev/null
CM_CRDS=$(ls -d "$CACHE"/cert-manager-*/crds 2>/dev/null | tail -1)
if [[ -n $CM_CRDS ]] && ! kubectl get crd certificates.cert-manager.io >/dev/null 2>&1; then
  kubectl apply -f "$CM_CRDS" >/dev/null && kubectl wait --for=condition=Established --timeout=30s -f "$CM_CRDS" >/dev/null &&
    installed_cm_crds=true
fi
for v in $(printf '%s\n' "${!variants[@]}" | sort); do
  [[ -s $work/$v.yaml ]] || continue
  n=0 bad=""
  # One object at a time so a failure names it; everything is a fresh create (own names, scratch namespace).
  python3 - "$work/$v.yaml" "$work/objs-$v" <<'PY'
import os, sys, yaml
os.makedirs(sys.argv[2], exist_ok=True)
for i, d in enumerate(x for x in yaml.safe_load_all(open(sys.argv[1])) if x):
    open(os.path.join(sys.argv[2], f"{i:02d}.yaml"), "w").write(yaml.safe_dump(d, sort_keys=False))
PY
  for f in "$work/objs-$v"/*.yaml; do
    n=$((n + 1))
    err=$(kubectl create --dry-run=server -f "$f" 2>&1) || bad+="$(head -c 400 <<<"$err"); "
  done
  if [[ -z $bad ]]; then pass "dry run: $v ($n objects created --dry-run=server)"; else fail "dry run: $v" "$bad"; fi
done

if err=$(kubectl create --dry-run=server -f "$ROOT/manifests/components/admission-policy/admission-policy.yaml" 2>&1); then
  pass "dry run: manifests/components/admission-policy" "$(tr '\n' ' ' <<<"$err")"
else
  fail "dry run: manifests/components/admission-policy" "$err"
fi

section "tenant b was installed with helm install"
use_tenant b
st=$("$HELM" --kubeconfig "$KUBECONFIG" list -n gpuslice-system -o json 2>&1 |
     python3 -c 'import json,sys; print(" ".join(r["status"] + " " + r["chart"] for r in json.load(sys.stdin) if r["name"] == "gpuslice"))' 2>&1)
[[ $st == "deployed gpuslice-"* ]] && pass "helm list -n gpuslice-system: release gpuslice $st" ||
  fail "helm list -n gpuslice-system: release gpuslice deployed" "${st:-no release} (lab/lab.sh up --helm b installs it)"
owner=$(kubectl get mutatingwebhookconfiguration gpuslice -o jsonpath='{.metadata.labels.app\.kubernetes\.io/managed-by} {.metadata.annotations.meta\.helm\.sh/release-name}')
[[ $owner == "Helm gpuslice" ]] && pass "the webhook configuration belongs to the release" "$owner" ||
  fail "the webhook configuration belongs to the release" "$owner"
ns=helm-test-$$
kubectl create namespace "$ns" >/dev/null
gpu_pod helm-pod 3000 10 | kubectl -n "$ns" apply -f - >/dev/null
if wait_for 30 pod_bound "$ns" helm-pod; then
  pass "a GPU pod on the helm-installed tenant is mutated by the chart's webhook and bound by gpuslice" \
    "schedulerName=$(pod_field "$ns" helm-pod '{.spec.schedulerName}') node=$(pod_field "$ns" helm-pod '{.spec.nodeName}') allocated=$(pod_field "$ns" helm-pod '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
else
  fail "a GPU pod on the helm-installed tenant is bound by gpuslice" "schedulerName=$(pod_field "$ns" helm-pod '{.spec.schedulerName}') $(pod_message "$ns" helm-pod)"
fi
secret_ca() { kubectl -n gpuslice-system get secret gpuslice-webhook-tls -o jsonpath='{.data.ca\.crt}'; }
bundle() { kubectl get mutatingwebhookconfiguration gpuslice -o jsonpath='{.webhooks[0].clientConfig.caBundle}'; }
ca0=$(secret_ca) b0=$(bundle)
if out=$("$HELM" --kubeconfig "$KUBECONFIG" upgrade gpuslice "$CHART" -n gpuslice-system --reuse-values --set logging.verbosity=0 2>&1); then
  ca1=$(secret_ca) b1=$(bundle)
  if [[ -n $ca0 && $ca0 == "$ca1" && $b0 == "$b1" && $b0 == "$ca0" ]]; then
    pass "helm upgrade keeps the serving certificate and the caBundle (the chart looks its Secret up)" "revision $("$HELM" --kubeconfig "$KUBECONFIG" history gpuslice -n gpuslice-system -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["revision"])')"
  else
    fail "helm upgrade keeps the serving certificate and the caBundle" "ca ${ca0:0:20}.. -> ${ca1:0:20}.., bundle ${b0:0:20}.. -> ${b1:0:20}.."
  fi
else
  fail "helm upgrade --reuse-values" "$out"
fi
gpu_pod helm-pod-2 3000 10 | kubectl -n "$ns" apply -f - >/dev/null
wait_for 30 pod_bound "$ns" helm-pod-2 && pass "after the upgrade a GPU pod is still admitted and bound" ||
  fail "after the upgrade a GPU pod is still admitted and bound" "$(pod_message "$ns" helm-pod-2)"
kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1

#!/usr/bin/env bash
# Validates every kustomize overlay under manifests/ against the running lab's real kube-apiservers with a
# server-side dry run (schema, defaulting, CEL compilation of matchConditions and the ValidatingAdmissionPolicy,
# RBAC object validation), and checks what the manifests promise at admission time:
#   - the webhook's caBundle is the CA that signed the Secret's serving certificate (certs-gpuslice);
#   - the guard refuses a GPU pod naming a foreign scheduler, with its message; admits a GPU pod naming
#     gpuslice-scheduler and a plain pod (dry-run creates, nothing is stored).
# Prints PASS/FAIL lines; exits non-zero on any failure. Needs `lab/lab.sh up` first (started if absent when
# MANIFESTS_TEST_START_LAB=1).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB=$ROOT/lab/lab.sh
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"

failures=0
ok() { pass "$@"; }
ko() { fail "$@"; failures=$((failures + 1)); }
skip() { printf 'SKIP  %s\n' "$1"; [[ -n ${2:-} ]] && printf '      %s\n' "$2"; }

if ! "$LAB" status >/dev/null 2>&1; then
  if [[ ${MANIFESTS_TEST_START_LAB:-0} == 1 ]]; then
    "$LAB" up || { ko "lab up" "lab/lab.sh up failed"; exit 1; }
  else
    ko "lab running" "start it with lab/lab.sh up (or MANIFESTS_TEST_START_LAB=1)"; exit 1
  fi
fi
use_tenant a || { ko "tenant a" "lab/lab.sh env a failed"; exit 1; }
command -v kubectl >/dev/null || { ko "kubectl" "not on PATH after lab.sh env"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-manifests.XXXXXX")
declare -A scratch_ns=()
installed_cm_crds=false
cleanup() {
  local t
  if $installed_cm_crds; then use_tenant a; kubectl delete -f "$CM_CRDS" --wait=false >/dev/null 2>&1; fi
  for t in "${!scratch_ns[@]}"; do use_tenant "$t"; kubectl delete namespace "${scratch_ns[$t]}" --wait=false >/dev/null 2>&1; done
  rm -rf "$work"
}
trap cleanup EXIT
cp -r "$ROOT/manifests" "$work/manifests"
M=$work/manifests

# Throwaway serving certificates for every overlay that takes its Secret from `gpuslice certs` (a certs/
# directory with a secretGenerator): a CA plus a certificate for the Service's DNS name, as `gpuslice certs`
# writes them.
for c in $(find "$M/overlays" -type d -name certs); do
  ( cd "$c"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=gpuslice-webhook.gpuslice-system.svc \
      -keyout tls.key -out tls.csr 2>/dev/null
    printf 'subjectAltName=DNS:gpuslice-webhook.gpuslice-system.svc\nextendedKeyUsage=serverAuth\n' >ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out tls.crt 2>/dev/null )
done

# cert-manager's real CRDs (cached by lab/build-tools.sh from its Go module), so the cert-manager component's
# Issuers and Certificates are validated against their OpenAPI schemas too. Installed into tenant a for the
# run and removed afterwards (there is no cert-manager controller in the lab).
CM_CRDS=$(ls -d "${GPUSLICE_LAB_CACHE:-$HOME/.cache/gpuslice-lab}"/cert-manager-*/crds 2>/dev/null | tail -1)
installed_cm_crds=false
if [[ -n $CM_CRDS ]] && ! kubectl get crd certificates.cert-manager.io >/dev/null 2>&1; then
  if kubectl apply -f "$CM_CRDS" >/dev/null &&
     kubectl wait --for=condition=Established --timeout=30s -f "$CM_CRDS" >/dev/null; then
    installed_cm_crds=true
  else
    ko "cert-manager CRDs installed for validation" "from $CM_CRDS"
  fi
fi

# Which tenant validates an overlay: lab/tenant-X against tenant X when it runs, everything else against a.
tenant_for() {
  local o=$1 t
  if [[ $o == lab/tenant-* ]]; then
    t=${o#lab/tenant-}
    "$LAB" env "$t" >/dev/null 2>&1 && { echo "$t"; return; }
  fi
  echo a
}

overlays=()
while IFS= read -r k; do
  d=$(dirname "$k"); d=${d#"$M/overlays/"}
  [[ $d == */certs ]] && continue
  overlays+=("$d")
done < <(find "$M/overlays" -name kustomization.yaml | sort)
((${#overlays[@]} > 0)) || { ko "overlays found" "none under manifests/overlays"; exit 1; }

for o in "${overlays[@]}"; do
  t=$(tenant_for "$o")
  use_tenant "$t"
  # apiVersion and kind of everything this API server serves (last three columns: APIVERSION NAMESPACED KIND).
  [[ -s $work/served-$t ]] || kubectl api-resources --no-headers | awk '{print $(NF-2), $NF}' >"$work/served-$t"
  built=$work/$(echo "$o" | tr / -).yaml
  if ! kubectl kustomize "$M/overlays/$o" >"$built" 2>"$built.err"; then
    ko "overlays/$o: kustomize build" "$(head -3 "$built.err")"
    continue
  fi
  ok "overlays/$o: kustomize build" "$(grep -c '^kind:' "$built") objects"
  # One object per file, so each gets its own verdict.
  # Namespaced objects move to a scratch namespace and are dry-run CREATED there, so each is validated as a
  # fresh object whatever the lab already holds; cluster-scoped ones are dry-run APPLIED (a three-way merge
  # over what the lab applied, then full validation of the result).
  [[ -n ${scratch_ns[$t]:-} ]] || {
    scratch_ns[$t]=gpuslice-manifests-test-$$
    kubectl create namespace "${scratch_ns[$t]}" >/dev/null &&
      kubectl label namespace "${scratch_ns[$t]}" gpuslice.io/webhook=ignore >/dev/null
  }
  python3 - "$built" "$work/objs-$(echo "$o" | tr / -)" "${scratch_ns[$t]}" <<'PY'
import os, sys, yaml
out = sys.argv[2]; os.makedirs(out, exist_ok=True)
for i, doc in enumerate(d for d in yaml.safe_load_all(open(sys.argv[1])) if d):
    md = doc.get("metadata", {})
    if md.get("namespace"):
        md["namespace"] = sys.argv[3]
    name = f'{i:02d} {doc["apiVersion"]} {doc["kind"]} {md.get("namespace", "-")}/{md["name"]}'
    with open(os.path.join(out, f"{i:02d}.yaml"), "w") as f:
        f.write("# " + name + "\n" + yaml.safe_dump(doc, sort_keys=False))
PY
  for f in "$work/objs-$(echo "$o" | tr / -)"/*.yaml; do
    read -r _ _ api kind ref < <(head -1 "$f")
    if ! grep -qx "$api $kind" "$work/served-$t"; then
      skip "overlays/$o: $kind $ref" "$api is not served by tenant $t's API server (install its CRDs, e.g. cert-manager, to validate it)"
      continue
    fi
    if [[ $ref == -/* ]]; then verb=(apply --dry-run=server); else verb=(create --dry-run=server); fi
    if err=$(kubectl "${verb[@]}" -f "$f" 2>&1); then
      ok "overlays/$o: $kind $ref (server-side dry run, tenant $t)"
    else
      ko "overlays/$o: $kind $ref (server-side dry run, tenant $t)" "$err"
    fi
  done
  # caBundle == the CA in the Secret (certs-gpuslice overlays).
  if [[ -d $M/overlays/$o/certs ]]; then
    bundle=$(python3 - "$built" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "MutatingWebhookConfiguration":
        print(d["webhooks"][0]["clientConfig"].get("caBundle", "").replace("\n", ""))
PY
)
    if [[ -n $bundle && $(printf '%s' "$bundle" | base64 -d 2>/dev/null) == "$(cat "$M/overlays/$o/certs/ca.crt")" ]] &&
       openssl verify -CAfile <(printf '%s' "$bundle" | base64 -d) "$M/overlays/$o/certs/tls.crt" >/dev/null 2>&1; then
      ok "overlays/$o: caBundle is the CA of certs/ and verifies tls.crt"
    else
      ko "overlays/$o: caBundle is the CA of certs/ and verifies tls.crt" "caBundle (first 40 chars): ${bundle:0:40}"
    fi
  fi
done

# Admission behaviour of the applied manifests (lab overlays), per tenant: dry-run pod creates.
pod() {  # name scheduler gpu(yes|no)
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {gpuslice.io/test: manifests}}
spec:
  schedulerName: $2
  containers:
  - name: c
    image: busybox
    resources:
      limits: {cpu: 100m$([[ $3 == yes ]] && printf ', nvidia.com/gpumem: "1000", nvidia.com/gpu: "1"')}
EOF
}
init_gpu_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  schedulerName: $2
  initContainers:
  - {name: i, image: busybox, resources: {requests: {nvidia.com/gpucores: "10"}, limits: {nvidia.com/gpucores: "10"}}}
  containers:
  - {name: c, image: busybox}
EOF
}
# The API Priority and Fairness priority level the API server chose for one request: kubectl ARGS... at -v=8
# prints the response headers; the X-Kubernetes-PF-PriorityLevel-UID one names a PriorityLevelConfiguration.
priority_level_of() {
  local uid
  uid=$(kubectl "$@" -v=8 2>&1 | grep -io 'X-Kubernetes-PF-PriorityLevel-UID: *[0-9a-f-]*' | head -1 | sed 's/.*: *//')
  [[ -n $uid ]] || return 0
  kubectl get prioritylevelconfigurations -o json | python3 -c '
import json, sys
print(next((p["metadata"]["name"] for p in json.load(sys.stdin)["items"] if p["metadata"]["uid"] == sys.argv[1]), ""))' "$uid"
}
for t in $(cat "${GPUSLICE_LAB_STATE:-$ROOT/lab/.state}/tenants" 2>/dev/null); do
  use_tenant "$t"
  if ! kubectl get validatingadmissionpolicy gpuslice-scheduler-guard >/dev/null 2>&1; then
    ko "tenant $t: guard installed" "ValidatingAdmissionPolicy gpuslice-scheduler-guard not found"; continue
  fi
  # The Deployment runs 0 replicas in the lab, so admit its pod template explicitly: PodSecurity "restricted"
  # (the namespace enforces it), the priority class, the ServiceAccount.
  out=$(kubectl -n gpuslice-system get deployment gpuslice -o json | python3 -c '
import json, sys
t = json.load(sys.stdin)["spec"]["template"]
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "spec": t["spec"],
                  "metadata": {"name": "gpuslice-template-probe", "namespace": "gpuslice-system", "labels": t["metadata"]["labels"]}}))' |
        kubectl create --dry-run=server -f - 2>&1)
  if [[ $? -eq 0 && $(kubectl get namespace gpuslice-system -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}') == restricted ]]; then
    ok "tenant $t: gpuslice's pod template is admitted under PodSecurity restricted" "$out"
  else
    ko "tenant $t: gpuslice's pod template is admitted under PodSecurity restricted" "$out"
  fi
  out=$(pod mt-foreign other-scheduler yes | kubectl create --dry-run=server -f - 2>&1)
  if [[ $? -ne 0 && $out == *gpuslice-scheduler-guard* && $out == *'spec.schedulerName is "other-scheduler"'* ]]; then
    ok "tenant $t: guard refuses a GPU pod for another scheduler" "$out"
  else
    ko "tenant $t: guard refuses a GPU pod for another scheduler" "$out"
  fi
  out=$(init_gpu_pod mt-init other-scheduler | kubectl create --dry-run=server -f - 2>&1)
  if [[ $? -ne 0 && $out == *gpuslice-scheduler-guard* ]]; then
    ok "tenant $t: guard sees GPU requests of init containers" "$out"
  else
    ko "tenant $t: guard sees GPU requests of init containers" "$out"
  fi
  if out=$(pod mt-ours gpuslice-scheduler yes | kubectl create --dry-run=server -f - 2>&1); then
    ok "tenant $t: guard admits a GPU pod for gpuslice-scheduler" "$out"
  else
    ko "tenant $t: guard admits a GPU pod for gpuslice-scheduler" "$out"
  fi
  if out=$(pod mt-plain default-scheduler no | kubectl create --dry-run=server -f - 2>&1); then
    ok "tenant $t: a plain pod is admitted" "$out"
  else
    ko "tenant $t: a plain pod is admitted" "$out"
  fi
  if out=$(pod mt-foreign-ks other-scheduler yes | sed 's/namespace: default/namespace: kube-system/' |
           kubectl create --dry-run=server -f - 2>&1); then
    ok "tenant $t: kube-system is exempt from the guard" "$out"
  else
    ko "tenant $t: kube-system is exempt from the guard" "$out"
  fi
  # API Priority and Fairness (manifests/base/flowschema.yaml, the chart's flowSchema.*): the API server files the
  # Deployment's ServiceAccount at kube-scheduler's priority level and its Lease requests at leader-election, as
  # its response header X-Kubernetes-PF-PriorityLevel-UID says (APF classifies the impersonated user). The
  # tenant's default ServiceAccount is the control: "service-accounts", workload-low.
  sa=$(kubectl -n gpuslice-system get deployment gpuslice -o jsonpath='{.spec.template.spec.serviceAccountName}')
  gs=(--as-group=system:serviceaccounts --as-group=system:serviceaccounts:gpuslice-system --as-group=system:authenticated)
  got=$(priority_level_of --as="system:serviceaccount:gpuslice-system:${sa:-gpuslice}" "${gs[@]}" -n default get pods)
  if [[ $got == workload-high ]]; then
    ok "tenant $t: APF files gpuslice's requests at workload-high (kube-scheduler's level)"
  else
    ko "tenant $t: APF files gpuslice's requests at workload-high (kube-scheduler's level)" "priority level: '${got}' (ServiceAccount ${sa:-?})"
  fi
  lease_ns=$(kubectl get flowschemas -o json 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin)["items"]:
    if f["spec"]["priorityLevelConfiguration"]["name"] == "leader-election":
        for r in f["spec"].get("rules", []):
            for rr in r.get("resourceRules", []):
                if "leases" in rr.get("resources", []): print(rr["namespaces"][0]); sys.exit()' 2>/dev/null)
  got=$(priority_level_of --as="system:serviceaccount:gpuslice-system:${sa:-gpuslice}" "${gs[@]}" \
        -n "${lease_ns:-gpuslice-system}" get lease gpuslice-scheduler)
  if [[ $got == leader-election ]]; then
    ok "tenant $t: APF files gpuslice's Lease requests at leader-election"
  else
    ko "tenant $t: APF files gpuslice's Lease requests at leader-election" "priority level: '${got}' (Lease namespace ${lease_ns:-none found})"
  fi
  got=$(priority_level_of --as=system:serviceaccount:default:default --as-group=system:serviceaccounts \
        --as-group=system:serviceaccounts:default --as-group=system:authenticated -n default get pods)
  if [[ $got == workload-low ]]; then
    ok "tenant $t: control: another ServiceAccount stays at workload-low"
  else
    ko "tenant $t: control: another ServiceAccount stays at workload-low" "priority level: '${got}'"
  fi
done

echo
if ((failures)); then echo "manifests_test: $failures failure(s)"; exit 1; fi
echo "manifests_test: all passed"

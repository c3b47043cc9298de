#!/usr/bin/env bash
# Regenerates testdata/<name>.json from <name>.yaml with the real kubectl's client-side dry run:
#   kubectl create --dry-run=client --validate=false -o json -f <name>.yaml
# and, from those pods, the seed corpora of the webhook fuzz targets (tests/fuzz/corpus/{mutation_policy,
# admission_review}/).
#
# kubectl (v1.34) insists on a server even for --dry-run=client: it maps kind -> resource through API
# discovery and otherwise fails with `unable to recognize "x.yaml": ... connection refused`. The smallest
# honest way: a throwaway kubeconfig pointing at a loopback stub (socat + discovery/stub.sh) that serves only
# the static discovery documents in discovery/ (v1 pods, apps/v1 deployments) and 404 for everything else.
# kubectl builds the object itself; nothing is sent to or created on any server.
#
# Needs: kubectl (default: the lab's, $(lab/build-tools.sh --print-bin)/kubectl) and socat.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
kubectl=${KUBECTL:-$("$here/../../../lab/build-tools.sh" --print-bin)/kubectl}
[[ -x $kubectl ]] || { echo "regen.sh: kubectl not found at $kubectl (set KUBECTL)" >&2; exit 1; }
command -v socat >/dev/null || { echo "regen.sh: socat is required" >&2; exit 1; }

tmp=$(mktemp -d)
stub_pid=
cleanup() {
  [[ -n $stub_pid ]] && kill "$stub_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# socat cannot report an ephemeral port, so try a few random loopback ports.
for _ in $(seq 1 20); do
  port=$((20000 + RANDOM % 20000))
  socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "EXEC:$here/discovery/stub.sh" 2>/dev/null &
  stub_pid=$!
  sleep 0.3
  if kill -0 "$stub_pid" 2>/dev/null; then break; fi
  stub_pid=
done
[[ -n $stub_pid ]] || { echo "regen.sh: could not start the discovery stub" >&2; exit 1; }

cat >"$tmp/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: stub, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: nobody, user: {}}]
contexts: [{name: stub, context: {cluster: stub, user: nobody}}]
current-context: stub
KC
export KUBECONFIG=$tmp/kubeconfig
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy
export HOME=$tmp  # no discovery cache from, or into, the real home

for yaml in *.yaml; do
  name=${yaml%.yaml}
  "$kubectl" create --dry-run=client --validate=false -o json -f "$yaml" >"$tmp/$name.json"
  mv "$tmp/$name.json" "$name.json"
  echo "  $name.json"
done

# Seed corpora for the fuzz targets: every pod as is, and wrapped in v1 / v1beta1 AdmissionReviews.
corpus=$here/../../fuzz/corpus
mkdir -p "$corpus/mutation_policy" "$corpus/admission_review"
n=0
for json in *.json; do
  name=${json%.json}
  kind=$(grep -m1 -o '"kind": *"[A-Za-z]*"' "$json" | sed 's/.*"\([A-Za-z]*\)"$/\1/')
  [[ $kind == Pod ]] && cp "$json" "$corpus/mutation_policy/$name.json"
  api=admission.k8s.io/v1
  ((n++ % 2)) && api=admission.k8s.io/v1beta1
  group=
  resource=pods
  [[ $kind == Deployment ]] && group=apps resource=deployments
  printf '{"kind":"AdmissionReview","apiVersion":"%s","request":{"uid":"%08d-0000-4000-8000-000000000000","kind":{"group":"%s","version":"v1","kind":"%s"},"resource":{"group":"%s","version":"v1","resource":"%s"},"namespace":"team-a","operation":"CREATE","userInfo":{"username":"kubernetes-admin","groups":["system:masters"]},"object":%s,"oldObject":null,"dryRun":false}}\n' \
    "$api" "$n" "$group" "$kind" "$group" "$resource" "$(cat "$json")" >"$corpus/admission_review/$name.json"
done
echo "regen.sh: $(ls *.json | wc -l) fixtures, corpora in tests/fuzz/corpus/{mutation_policy,admission_review}"

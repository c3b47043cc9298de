#!/usr/bin/env bash
# Builds the lab's upstream binaries from the Go module proxy, once, into a cache outside the source tree
# keyed by version. Re-running is a no-op when every binary is already cached.
#
#   lab/build-tools.sh            # build what is missing, print the bin directory on the last line
#   lab/build-tools.sh --print-bin  # only print that directory (lab.sh and the e2e tests use it)
#
# The links go to one directory per Kubernetes version ($CACHE/bin-k8s-<version>), so a checkout that moves to
# another version never re-points the tools a lab of another checkout is running from.
#
# Environment: GPUSLICE_LAB_CACHE (default ~/.cache/gpuslice-lab), GO (default: go on PATH).
set -euo pipefail

K8S_VERSION=v1.36.3            # MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from 1.36
K8S_STAGING=v0.36.3
ETCD_VERSION=v3.6.8            # the etcd Kubernetes v1.36.3's go.mod requires
KWOK_VERSION=v0.8.0            # the newest kwok the module proxy serves; it drives any API server version
ANP_VERSION=v0.36.0            # Konnectivity for Kubernetes 1.36
CERT_MANAGER_VERSION=v1.16.5   # only its CRDs, to validate manifests/components/cert-manager server-side
HELM_VERSION=v3.21.4           # client-go v0.36: charts/gpuslice lint, template, install into a lab tenant

CACHE=${GPUSLICE_LAB_CACHE:-$HOME/.cache/gpuslice-lab}
BIN=$CACHE/bin-k8s-$K8S_VERSION
[[ ${1:-} == --print-bin ]] && { echo "$BIN"; exit 0; }
GO=${GO:-go}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io,go.etcd.io,github.com}
export CGO_ENABLED=0
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true

log() { printf '[lab-build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
have() { local d=$1; shift; for b in "$@"; do [[ -x $d/$b ]] || return 1; done; }
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; log "$name ready in $((SECONDS - t0)) s"; }

command -v "$GO" >/dev/null || { echo "lab/build-tools.sh: Go is required (install golang >= 1.26)" >&2; exit 1; }

build_k8s() {
  local out=$CACHE/kubernetes-$K8S_VERSION/bin src=$CACHE/src/kubernetes-$K8S_VERSION
  have "$out" kube-apiserver kube-controller-manager kube-scheduler kubectl && return 0
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $K8S_VERSION (about 5 min cold)"
  mkdir -p "$src" "$out"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them by ./staging/src/...: replace
  # each by its published version (the list comes from the release's own go.mod, so it follows new repos).
  local kmod staging m gov
  kmod=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*|\1|p' "$kmod")
  [[ -n $staging ]] || { log "k8s.io/kubernetes $K8S_VERSION: no staging replaces in $kmod"; return 1; }
  gov=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")
  {
    printf 'module lab/tools\n\ngo %s\n\ngodebug default=go%s\n\nrequire k8s.io/kubernetes %s\n\n' "$gov" "${gov%.*}" "$K8S_VERSION"
    printf 'tool (\n\tk8s.io/kubernetes/cmd/kube-apiserver\n\tk8s.io/kubernetes/cmd/kube-controller-manager\n\tk8s.io/kubernetes/cmd/kube-scheduler\n\tk8s.io/kubernetes/cmd/kubectl\n)\n\nreplace (\n'
    for m in $staging; do
      printf '\t%s => %s %s\n' "$m" "$m" "$K8S_STAGING"
    done
    printf ')\n'
  } >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy)
  local d ldf="-s -w" minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  d=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.gitCommit=unknown -X $p.buildDate=$d"
  done
  (cd "$src" && "$GO" build -trimpath -tags selinux,notest -ldflags "$ldf" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
}

build_etcd() {
  local out=$CACHE/etcd-$ETCD_VERSION/bin src=$CACHE/src/etcd-$ETCD_VERSION
  have "$out" etcd && return 0
  log "building etcd $ETCD_VERSION"
  mkdir -p "$src" "$out"
  printf 'module lab/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n\ntool go.etcd.io/etcd/server/v3\n' "$ETCD_VERSION" >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy && "$GO" build -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  local out=$CACHE/kwok-$KWOK_VERSION/bin
  have "$out" kwok && [[ -d $CACHE/kwok-$KWOK_VERSION/stage ]] && return 0
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out"
  GOBIN=$out "$GO" install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  "$GO" mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
  rm -rf "$CACHE/kwok-$KWOK_VERSION/stage"
  cp -r "$("$GO" env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage" "$CACHE/kwok-$KWOK_VERSION/stage"
  chmod -R u+w "$CACHE/kwok-$KWOK_VERSION/stage"
}

build_anp() {
  local out=$CACHE/konnectivity-$ANP_VERSION/bin src=$CACHE/src/konnectivity-$ANP_VERSION
  have "$out" proxy-server proxy-agent && return 0
  log "building konnectivity proxy-server and proxy-agent $ANP_VERSION"
  mkdir -p "$src" "$out"
  printf 'module lab/anp\n\ngo 1.26.2\n\nrequire (\n\tsigs.k8s.io/apiserver-network-proxy %s\n\tsigs.k8s.io/apiserver-network-proxy/konnectivity-client %s\n)\n\ntool (\n\tsigs.k8s.io/apiserver-network-proxy/cmd/server\n\tsigs.k8s.io/apiserver-network-proxy/cmd/agent\n)\n' "$ANP_VERSION" "$ANP_VERSION" >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy)
  for c in server agent; do
    (cd "$src" && "$GO" build -trimpath -o "$out/proxy-$c" "sigs.k8s.io/apiserver-network-proxy/cmd/$c")
  done
}

# cert-manager's Certificate/Issuer CRDs, from its Go module (deploy/crds/ are Helm-templated only in comments
# and label values: those lines are dropped). Used by tests/e2e/manifests_test.sh; never installed by `up`.
build_cert_manager_crds() {
  local out=$CACHE/cert-manager-$CERT_MANAGER_VERSION/crds dir f
  [[ -s $out/crd-issuers.yaml ]] && return 0
  log "fetching cert-manager $CERT_MANAGER_VERSION CRDs (Go module)"
  dir=$("$GO" mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d $dir/deploy/crds ]] || { log "cert-manager module has no deploy/crds"; return 1; }
  mkdir -p "$out"
  for f in crd-certificates.yaml crd-issuers.yaml crd-clusterissuers.yaml; do
    grep -v '{{' "$dir/deploy/crds/$f" >"$out/$f"
  done
}

# helm, for charts/gpuslice (tests/e2e/helm_test.sh: lint, template, server-side dry run, helm install).
build_helm() {
  local out=$CACHE/helm-$HELM_VERSION/bin gomod kv ldf p
  have "$out" helm && return 0
  log "building helm $HELM_VERSION (about 3 min cold)"
  mkdir -p "$out"
  # As helm's Makefile: the default Kubernetes version of `helm template`/`lint` is client-go's (v0.X -> 1.X);
  # without it helm assumes 1.20.
  gomod=$("$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  kv=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
  [[ -n $kv ]] || { log "helm $HELM_VERSION: no k8s.io/client-go version in $gomod"; return 1; }
  ldf="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldf="$ldf -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kv"
  done
  GOBIN=$out "$GO" install -trimpath -ldflags "$ldf" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# One build at a time per cache: two Go builds writing the same outputs (a CI run beside a developer's lab, or two
# engineers' labs starting together) collide. The second waits for the first and then finds the tools built.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  log "another lab/build-tools.sh is building into $CACHE: waiting for it"
  flock 9
fi
t0=$SECONDS
timed etcd build_etcd
timed kubernetes build_k8s
timed kwok build_kwok
timed konnectivity build_anp
timed helm build_helm
timed cert-manager-crds build_cert_manager_crds || log "cert-manager CRDs unavailable: manifests_test skips cert-manager objects"
log "all lab tools ready in $((SECONDS - t0)) s under $CACHE"
# Last line: this version's bin directory with links to every tool, for PATH.
mkdir -p "$BIN"
for d in kubernetes-$K8S_VERSION etcd-$ETCD_VERSION kwok-$KWOK_VERSION konnectivity-$ANP_VERSION helm-$HELM_VERSION; do
  for b in "$CACHE/$d"/bin/*; do ln -sf "$b" "$BIN/$(basename "$b")"; done
done
ln -sfn "$CACHE/kwok-$KWOK_VERSION/stage" "$BIN/kwok-stage"
echo "$BIN"

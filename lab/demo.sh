#!/usr/bin/env bash
# The README's main job: on a fresh Debian 12 machine (as root), install what is missing, build gpuslice and the
# upstream Kubernetes tools (cached), bring up the two Kamaji-style tenants with gpuslice running, run the
# end-to-end checks, print a summary table, and leave the lab up with instructions.
#
#   lab/demo.sh                 # everything
#   lab/demo.sh --no-checks     # build and bring the lab up only
#
# Environment: JOBS (build parallelism, default nproc), GPUSLICE_BIN (skip the build and use this binary).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
RUN_CHECKS=true
[[ ${1:-} == --no-checks ]] && RUN_CHECKS=false
stage() { printf '\n==== %s (%(%H:%M:%S)T)\n' "$*" -1; }
[[ $(id -u) -eq 0 ]] || { echo "lab/demo.sh: run as root (apt-get and network namespaces need it)" >&2; exit 1; }

stage "dependencies"
lab/install-deps.sh

if [[ -z ${GPUSLICE_BIN:-} ]]; then
  stage "gpuslice (release build)"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$JOBS" --target gpuslice
  export GPUSLICE_BIN=$ROOT/build/release/cmd/gpuslice
fi

stage "upstream tools (first run about 10 minutes, then cached)"
lab/build-tools.sh

stage "two tenants: etcd, kube-apiserver + kube-controller-manager + Konnectivity each, kwok, gpuslice"
lab/lab.sh up --tenants a,b

results=$(mktemp "${TMPDIR:-/tmp}/gpuslice-demo.XXXXXX")
if $RUN_CHECKS; then
  stage "end-to-end checks"
  export E2E_RESULTS=$results LAB=$ROOT/lab/lab.sh
  for t in tests/e2e/*_test.sh; do
    [[ -x $t ]] || continue
    printf '\n---- %s\n' "$t"
    "$t" || true   # every check records PASS/FAIL in $E2E_RESULTS; the table below is the verdict
  done
  # Tests may restart pieces of the lab; make sure it is whole again before handing it over.
  lab/lab.sh status >/dev/null 2>&1 || lab/lab.sh up --tenants a,b
fi

stage "summary"
if [[ -s $results ]]; then
  printf '%-6s %s\n' RESULT CHECK
  printf '%-6s %s\n' ------ -----
  sort -s -k1,1r "$results" | awk '{r=$1; $1=""; printf "%-6s%s\n", r, $0}'
  printf '\n%d passed, %d failed\n' "$(grep -c '^PASS' "$results" || true)" "$(grep -c '^FAIL' "$results" || true)"
fi
lab/lab.sh status || true
cat <<EOF

The lab stays up. Try it:
  eval "\$(lab/lab.sh env a)"                 # kubectl -> tenant-a (the lab's real kubectl)
  kubectl apply -f examples/tenant-a/pods.yaml
  kubectl get pods -o wide; kubectl get pod share-1 -o jsonpath='{.metadata.annotations}'
  kubectl get pod share-4 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}'
  eval "\$(lab/lab.sh env b)"; kubectl apply -f examples/tenant-b/pods.yaml
  lab/lab.sh stop a agent                     # break tenant-a's tunnel: GPU pods are refused, plain pods are not
  lab/lab.sh start a agent
  lab/lab.sh down                             # when done
EOF
if [[ -s $results ]] && grep -q '^FAIL' "$results"; then rm -f "$results"; exit 1; fi
rm -f "$results"

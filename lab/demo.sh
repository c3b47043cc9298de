#!/usr/bin/env bash
# The README's main job: on a fresh Debian 12 machine (as root), install what is missing, build gpuslice and the
# upstream Kubernetes tools (cached), bring up the two Kamaji-style tenants with gpuslice running, run the ten
# two-tenant checks (tests/e2e/tenants_test.sh), print a summary table (check, tenant, result, evidence), and
# leave the lab up with instructions. The full end-to-end suite is tests/e2e/run.sh (tests/run-all.sh).
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
table=$(mktemp "${TMPDIR:-/tmp}/gpuslice-demo-table.XXXXXX")
if $RUN_CHECKS; then
  stage "the ten two-tenant checks (tests/e2e/tenants_test.sh)"
  # Every check records PASS/FAIL in $E2E_RESULTS and a row in $E2E_TABLE; the table below is the verdict.
  E2E_RESULTS=$results E2E_TABLE=$table LAB=$ROOT/lab/lab.sh timeout --kill-after=10 600 tests/e2e/tenants_test.sh || true
  # Check 9 stops and restarts tenant-a's agent; make sure the lab is whole before handing it over.
  lab/lab.sh status >/dev/null 2>&1 || lab/lab.sh up --tenants a,b
fi

stage "summary"
if [[ -s $table ]]; then
  python3 - "$table" <<'PY2'
import sys
rows = [l.rstrip("\n").split("\t", 3) for l in open(sys.argv[1]) if l.strip()]
rows.sort(key=lambda r: (int(r[0].split()[-1]) if r[0].split()[-1].isdigit() else 99, r[1]))
w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(["CHECK", "TENANT", "RESULT"])]
print(f'{"CHECK":<{w[0]}}  {"TENANT":<{w[1]}}  {"RESULT":<{w[2]}}  EVIDENCE')
for r in rows:
    r += [""] * (4 - len(r))
    print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
PY2
  # A check passes when every row of it (one per tenant it covers) passed.
  printf '\nchecks: %d passed, %d failed (%d rows)\n' \
    "$(awk -F'\t' '{r[$1] = r[$1] $3} END {n = 0; for (c in r) if (r[c] !~ /FAIL/) n++; print n}' "$table")" \
    "$(awk -F'\t' '{r[$1] = r[$1] $3} END {n = 0; for (c in r) if (r[c] ~ /FAIL/) n++; print n}' "$table")" \
    "$(grep -c . "$table")"
elif $RUN_CHECKS; then
  echo "no check ran (see the output above)"
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
status=0
if $RUN_CHECKS && { [[ ! -s $table ]] || grep -q $'\tFAIL\t' "$table" || grep -q '^FAIL' "$results"; }; then status=1; fi
rm -f "$results" "$table"
exit $status

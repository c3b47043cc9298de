#!/usr/bin/env bash
# Runs every gpuslice test on this machine, installing what is missing first:
#   1. unit tests and fuzz-corpus replays under ASan/UBSan (CTest, `asan` preset);
#   2. the release build of the binary used by the end-to-end tests;
#   3. the end-to-end tests against a real two-tenant control plane (lab/lab.sh: etcd, kube-apiserver,
#      kube-controller-manager, Konnectivity, kwok, all built from the Go module proxy and cached).
# Needs root (apt-get, network namespaces). Exits non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
stage() { printf '\n==== %s (%(%H:%M:%S)T)\n' "$*" -1; }

stage "install dependencies"
lab/install-deps.sh

stage "unit tests + fuzz corpus replay under ASan/UBSan"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS"
ctest --preset asan -j "$JOBS"

stage "release build"
cmake --preset release >/dev/null
cmake --build --preset release -j "$JOBS" --target gpuslice
export GPUSLICE_BIN=$ROOT/build/release/cmd/gpuslice

stage "lab tools (cached after the first build)"
lab/build-tools.sh

stage "end-to-end tests against the lab"
tests/e2e/run.sh

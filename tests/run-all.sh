#!/usr/bin/env bash
# Runs every gpuslice test on this machine, installing what is missing first:
#   1. unit tests and fuzz-corpus replays under ASan/UBSan (CTest, `asan` preset), then each fuzz target run by
#      libFuzzer for a bounded time (tests/fuzz/run.sh, `fuzz` preset);
#   2. the container image (image/build.sh) built from that binary, twice (same digest), run with podman;
#   3. the end-to-end tests against a real two-tenant control plane (lab/lab.sh: etcd, kube-apiserver,
#      kube-controller-manager, Konnectivity, kwok, all built from the Go module proxy and cached), run with
#      the same ASan/UBSan build of gpuslice, so memory errors on the real path fail the run too.
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

stage "fuzz: every libFuzzer target for FUZZ_SECONDS (default 20) under ASan/UBSan (clang-14, fuzz preset)"
JOBS="$JOBS" tests/fuzz/run.sh

export GPUSLICE_BIN=$ROOT/build/asan/cmd/gpuslice
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

stage "container image: image/build.sh from the ASan binary, run with podman"
tests/image/image_test.sh "$GPUSLICE_BIN"

stage "lab tools (cached after the first build)"
lab/build-tools.sh

stage "end-to-end tests against the lab (gpuslice built with ASan/UBSan)"
status=0
tests/e2e/run.sh || status=$?
# A sanitizer report in any gpuslice log fails the run even if every check passed.
logs=${GPUSLICE_LAB_STATE:-$ROOT/lab/.state}/logs
if grep -rlE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$logs" 2>/dev/null; then
  echo "sanitizer reports found in the lab logs above"
  grep -rhE -A20 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$logs" | head -80
  status=1
fi
exit $status

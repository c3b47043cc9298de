#!/usr/bin/env bash
# CI fuzz stage: builds the libFuzzer targets (`fuzz` preset: clang-14, ASan + UBSan, only the fuzz targets and
# the libraries they link) and runs each one for a bounded time from its committed seed corpus. Any crash, leak,
# sanitizer report, timeout or out-of-memory fails the stage, with the reproducer printed.
#
#   tests/fuzz/run.sh [TARGET...]          default: every gpuslice_fuzz() target in tests/fuzz/CMakeLists.txt
#
# Environment: FUZZ_SECONDS (per target, default 20), FUZZ_TIMEOUT (seconds per input, default 10),
# FUZZ_RSS_MB (default 2048), FUZZ_MAX_LEN (default: libFuzzer's, from the corpus), JOBS (build, default 1),
# FUZZ_NICE (default 0), FUZZ_KEEP=1 keeps new inputs in build/fuzz/tests/fuzz/new_<target>/ for merging
# into the corpora (see tests/README.md). ccache is used when installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SECONDS_PER=${FUZZ_SECONDS:-20}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS=${FUZZ_RSS_MB:-2048}
JOBS=${JOBS:-1}
NICE=${FUZZ_NICE:-0}

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^gpuslice_fuzz(\([a-z_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
fi
t0=$(date +%s)
cmake --preset fuzz "${launcher[@]}" >/dev/null
nice -n "$NICE" cmake --build --preset fuzz -j "$JOBS" --target "${targets[@]/#/fuzz_}"
echo "fuzz build: $(($(date +%s) - t0)) s"

bin=$ROOT/build/fuzz/tests/fuzz
out=$bin/runs
rm -rf "$out"
mkdir -p "$out"
# ASan: leaks are errors; abort so libFuzzer records the input. UBSan: every report is fatal (the build also has
# -fno-sanitize-recover=undefined).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for t in "${targets[@]}"; do
  work=$out/$t
  mkdir -p "$work/new" "$work/artifacts"
  args=(-max_total_time="$SECONDS_PER" -timeout="$TIMEOUT" -rss_limit_mb="$RSS" -malloc_limit_mb="$RSS"
        -print_final_stats=1 -artifact_prefix="$work/artifacts/")
  [ -n "${FUZZ_MAX_LEN:-}" ] && args+=(-max_len="$FUZZ_MAX_LEN")
  printf '\n---- fuzz_%s: %s s\n' "$t" "$SECONDS_PER"
  rc=0
  nice -n "$NICE" "$bin/fuzz_$t" "${args[@]}" "$work/new" "$ROOT/tests/fuzz/corpus/$t" >"$work/log" 2>&1 || rc=$?
  grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)' \
    "$work/log" || true
  if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$work/log"; then
    failed+=("$t")
    echo "FAIL fuzz_$t (exit $rc); log: $work/log"
    grep -nE -A40 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|==[0-9]+== ?ERROR|deadly signal' \
      "$work/log" | head -80
    for a in "$work"/artifacts/*; do
      [ -e "$a" ] || continue
      echo "reproducer: $a ($(stat -c %s "$a") bytes), base64:"
      base64 -w0 "$a" | head -c 4096
      echo
      echo "replay: build/fuzz/tests/fuzz/fuzz_$t $a   (or under g++: build/asan/tests/fuzz/fuzz_$t $a)"
    done
  fi
  if [ "${FUZZ_KEEP:-0}" = 1 ]; then
    rm -rf "$bin/new_$t" && cp -r "$work/new" "$bin/new_$t"
  fi
done
echo
echo "fuzz stage: ${#targets[@]} targets x $SECONDS_PER s, $(($(date +%s) - t0)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz failures: ${failed[*]}"
  exit 1
fi

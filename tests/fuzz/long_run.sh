#!/usr/bin/env bash
# The longer search (not in CI): each fuzz target in turn for FUZZ_SECONDS (default 90) from its committed corpus,
# then the inputs that add coverage merged into tests/fuzz/corpus/<target>/ (libFuzzer -merge=1: the committed
# inputs stay, only new features are added, each input minimal). Needs the `fuzz` preset built (tests/fuzz/run.sh
# builds it). Prints one summary line per target: executions, exec/s, cov/ft of libFuzzer's final line, corpus
# files before/after, crashes. A crash stops nothing: its reproducer is kept in $OUT/<target>/artifacts/.
#
#   FUZZ_SECONDS=90 FUZZ_NICE=15 tests/fuzz/long_run.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SECONDS_PER=${FUZZ_SECONDS:-90}
NICE=${FUZZ_NICE:-15}
OUT=${FUZZ_OUT:-$ROOT/build/fuzz/tests/fuzz/long}
bin=$ROOT/build/fuzz/tests/fuzz
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^gpuslice_fuzz(\([a-z_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$OUT"
printf '| target | executions | exec/s | cov | ft | corpus before -> after | crashes |\n|---|---:|---:|---:|---:|---:|---|\n' \
  >"$OUT.md.tmp"
for t in "${targets[@]}"; do
  corpus=$ROOT/tests/fuzz/corpus/$t
  work=$OUT/$t
  rm -rf "$work"
  mkdir -p "$work/new" "$work/artifacts"
  before=$(find "$corpus" -type f | wc -l)
  nice -n "$NICE" "$bin/fuzz_$t" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" >"$work/log" 2>&1 || true
  final=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -1 || true)
  [ -n "$final" ] || final=$(grep -E '^#[0-9]+[[:space:]]' "$work/log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
  cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' <<<"$final")
  ft=$(sed -n 's/.* ft: \([0-9]*\) .*/\1/p' <<<"$final")
  crashes=$(find "$work/artifacts" -type f | wc -l)
  nice -n "$NICE" "$bin/fuzz_$t" -merge=1 -timeout=10 -rss_limit_mb=2048 "$corpus" "$work/new" >"$work/merge.log" 2>&1 || true
  after=$(find "$corpus" -type f | wc -l)
  line="| $t | ${execs:-?} | ${eps:-?} | ${cov:-?} | ${ft:-?} | $before -> $after | $crashes |"
  echo "$line" | tee -a "$OUT.md.tmp"
  echo "  final: $final"
  grep -E 'MERGE-OUTER: [0-9]+ new files' "$work/merge.log" | sed 's/^/  /' || true
done
mv "$OUT.md.tmp" "$OUT.md"
echo "summary: $OUT.md"

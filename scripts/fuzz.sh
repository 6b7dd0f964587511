#!/usr/bin/env bash
# libFuzzer over every parser (tests/fuzz/NAME.cpp -> fuzz_NAME in the clang sanitizer tree,
# build-san/, cmake --preset sanitize).
# Usage: scripts/fuzz.sh --list                 the targets, one per line
#        scripts/fuzz.sh [TARGET|all] [SECONDS]   build, then fuzz each target SECONDS (default 60),
#                                          FUZZ_JOBS targets at a time (default: the core count)
# Each target starts from its committed seeds (tests/fuzz/seeds/TARGET, made by make_seeds.py) and
# a corpus that grows between runs (build-san/fuzz/corpus/TARGET). A crash, sanitizer report, leak,
# timeout (10 s per input) or allocation over 2 GB fails the run; the input is kept in
# build-san/fuzz/crashes/ and becomes a regression test (tests/fuzz/regressions/TARGET/, replayed
# by the fuzz_regressions CTest in this tree). Prints, per target, executions, coverage (cov: edges
# and ft: features) and corpus size.
# FUZZ_SEED=N makes a run repeatable: libFuzzer's random seed is N and the corpus starts afresh
# from the seeds alone (build-san/fuzz/seeded/TARGET), so the same inputs are tried in the same
# order on any machine (a faster one gets further along). CI's short run (scripts/sanitize.sh)
# uses it, so a run here with the same seed and more time shows what CI will meet.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
targets=$(cd tests/fuzz && ls *.cpp | sed 's/\.cpp$//' | sort)
if [[ "${1:-}" == "--list" ]]; then
  echo "$targets"
  exit 0
fi
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
which="${1:-all}"
seconds="${2:-60}"
if [[ "$which" != all ]] && ! grep -qx "$which" <<<"$targets"; then
  echo "fuzz.sh: error: unknown target '$which' (scripts/fuzz.sh --list names them)" >&2
  exit 2
fi
[[ "$which" == all ]] && run=$targets || run=$which
if [[ ! -d ../shared/data/tokenizers ]]; then
  # tokenizer_encode fuzzes text through the real tokenizers of ../shared/data.
  echo "fuzz.sh: skipping tokenizer_encode: ../shared/data/tokenizers is absent (a clone alone has none)"
  run=$(grep -vx tokenizer_encode <<<"$run" || true)
fi

cmake --preset sanitize >/dev/null
ninja -C build-san $(sed 's/^/fuzz_/' <<<"$run") >/dev/null

out=build-san/fuzz
mkdir -p "$out/logs" "$out/crashes"
scratch=/dev/shm
[[ -d $scratch && -w $scratch ]] || scratch=${TMPDIR:-/tmp}
export FOUNDRY_TEXT_DATA_DIR="$root/../shared/data"
seed_args=()
[[ -n "${FUZZ_SEED:-}" ]] && seed_args=(-seed="$FUZZ_SEED")
corpus_of() { [[ -n "${FUZZ_SEED:-}" ]] && echo "$out/seeded/$1" || echo "$out/corpus/$1"; }
fuzz_one() {
  local t=$1 corpus dict=()
  corpus=$(corpus_of "$t")
  [[ -n "${FUZZ_SEED:-}" ]] && rm -rf "$corpus"
  mkdir -p "$corpus"
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  local seeds=()
  [[ -d tests/fuzz/seeds/$t ]] && seeds=("tests/fuzz/seeds/$t")
  TMPDIR=$scratch ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/sanitize/ubsan.supp \
    LSAN_OPTIONS=suppressions=$root/tests/sanitize/lsan.supp \
    "build-san/bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 "${seed_args[@]}" -artifact_prefix="$out/crashes/$t-" "${dict[@]}" "$corpus" "${seeds[@]}" \
    >"$out/logs/$t.log" 2>&1
}
jobs_max="${FUZZ_JOBS:-$(nproc)}"
declare -A pid_of
for t in $run; do
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  fuzz_one "$t" &
  pid_of[$t]=$!
done
status=0
printf '%-18s %12s %8s %8s %8s  %s\n' target executions cov ft corpus result
for t in $run; do
  rc=0
  wait "${pid_of[$t]}" || rc=$?
  log=$out/logs/$t.log
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  files=$(ls "$(corpus_of "$t")" | wc -l)
  result=ok
  if (( rc != 0 )); then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|runtime error|terminate|deadly signal' "$log" || echo see log) -- $log"
    status=1
  fi
  printf '%-18s %12s %8s %8s %8s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$files" "$result"
done
exit $status

#!/usr/bin/env bash
# The whole C++ test suite (CTest) under AddressSanitizer + UndefinedBehaviorSanitizer, built with
# clang into build-san/ (cmake --preset sanitize: -O1, coverage counters for libFuzzer, two Highway
# targets, AVX2 and AVX-512, instead of the release build's four), then a short libFuzzer run of
# every parser (scripts/fuzz.sh all FUZZ_SECONDS, default 20, with a fixed FUZZ_SEED so that
# the run can be repeated here). .ci/run calls it after the README's
# test command. Exits non-zero on any test failure, sanitizer report or fuzz crash.
# Usage: scripts/sanitize.sh   (FUZZ_SECONDS, FUZZ_SEED, FOUNDRY_JOBS, FOUNDRY_TEST_JOBS in the environment)
set -euo pipefail
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
[[ $# -eq 0 ]] || { echo "sanitize.sh: error: it takes no arguments, got '$1' (see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs="${FOUNDRY_JOBS:-$(nproc)}"
cmake --preset sanitize >/dev/null
cmake --build build-san -j "$jobs"
status=0
# Leaks fail a test too (suppressions: tests/sanitize/); a report names the source line (llvm-symbolizer).
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=0:strict_init_order=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitize/ubsan.supp"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp"
ctest --test-dir build-san --output-on-failure -j "${FOUNDRY_TEST_JOBS:-2}" --timeout 1800 || status=1
FUZZ_SEED="${FUZZ_SEED:-1}" bash scripts/fuzz.sh all "${FUZZ_SECONDS:-20}" || status=1
exit $status

#!/usr/bin/env bash
# The README's test command (and what .ci/run calls): install dependencies, build everything,
# run the C++ test suite (CTest: unit, ops, text labels) and the Python tests (pytest with
# Debian's PyTorch as the live reference). Exits non-zero on any failure.
# Usage: scripts/test.sh   (FOUNDRY_JOBS: parallel build jobs; FOUNDRY_TEST_JOBS: parallel tests)
set -euo pipefail
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
[[ $# -eq 0 ]] || { echo "test.sh: error: it takes no arguments, got '$1' (see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
status=0
ctest --test-dir build --output-on-failure -j "${FOUNDRY_TEST_JOBS:-2}" --timeout 900 || status=1
PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -rs tests/python || status=1
exit $status

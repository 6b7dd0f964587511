#!/usr/bin/env bash
# Proves that a clone stands alone: clones this repository's HEAD into a fresh directory with no
# ../shared beside it, runs the README's two commands there (scripts/main-job.sh, then
# scripts/test.sh), and checks that the main job trained and sampled and that every test passed
# or skipped with a reason.
#
# Usage: scripts/clone-alone.sh [--cold] [--keep] [--dest DIR]
#
# By default ccache may reuse this machine's objects (CCACHE_BASEDIR makes the clone's paths
# relative, so a hit is the same compile of the same source); --cold disables ccache, as on a
# fresh machine (~25 min more on 2 cores). --keep leaves the clone for inspection.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cold=0 keep=0 parent=""
while (($#)); do
  case "$1" in
    --cold) cold=1 ;;
    --keep) keep=1 ;;
    --dest) parent="${2:?--dest needs a directory}"; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "clone-alone.sh: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "$parent" ]]; then parent="$(mktemp -d /tmp/foundry-clone-alone.XXXXXX)"; fi
mkdir -p "$parent"
clone="$parent/foundry"
if [[ -e "$parent/shared" ]]; then
  echo "clone-alone.sh: $parent/shared exists; the clone must have no ../shared beside it" >&2
  exit 2
fi
if [[ -e "$clone" ]]; then echo "clone-alone.sh: $clone already exists" >&2; exit 2; fi
if ((!keep)); then trap 'rm -rf "$clone"' EXIT; fi

if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]]; then
  echo "clone-alone.sh: note: uncommitted changes in $repo are not in the clone (it takes HEAD)"
fi
git clone -q --no-hardlinks "$repo" "$clone"
echo "clone-alone.sh: cloned $(git -C "$clone" rev-parse --short HEAD) into $clone (no $parent/shared)"

if ((cold)); then export CCACHE_DISABLE=1; else export CCACHE_BASEDIR="$clone"; fi
# Nothing from the developer's environment may point back at the data the clone lacks.
unset FOUNDRY_TEXT_DATA_DIR || true

cd "$clone"
log="$parent/logs"; mkdir -p "$log"
fail=0
start=$SECONDS
if bash scripts/main-job.sh >"$log/main-job.txt" 2>&1; then
  echo "clone-alone.sh: main job finished in $((SECONDS - start)) s (log: $log/main-job.txt)"
else
  echo "clone-alone.sh: FAILED: scripts/main-job.sh exited non-zero; its last lines:"; tail -20 "$log/main-job.txt"
  fail=1
fi
# The main job must have trained (a validation loss) and sampled (a non-empty sample).
if ! grep -qi "val.*loss" "$log/main-job.txt"; then
  echo "clone-alone.sh: FAILED: the main job printed no validation loss"; fail=1
fi
if [[ ! -d runs/shakespeare_char ]]; then
  echo "clone-alone.sh: FAILED: the main job left no run folder runs/shakespeare_char"; fail=1
fi

start=$SECONDS
if bash scripts/test.sh >"$log/test.txt" 2>&1; then
  echo "clone-alone.sh: test suite passed in $((SECONDS - start)) s (log: $log/test.txt)"
else
  echo "clone-alone.sh: FAILED: scripts/test.sh exited non-zero; its failures:"
  grep -E "\(Failed\)|\(SEGFAULT\)|\(Subprocess aborted\)|\(Timeout\)|^FAILED|^ERROR " "$log/test.txt" | head -40 \
    || tail -25 "$log/test.txt"
  fail=1
fi
grep -E "tests passed|tests failed" "$log/test.txt" | tail -1 || true
grep -E "^[0-9]+ (passed|failed)|passed|skipped" "$log/test.txt" | tail -1 || true

# What a clone alone skips, and why (scripts/test.sh runs pytest with -rs and CTest lists the tests
# that did not run): every skip must name its reason.
grep -E "^SKIPPED \[" "$log/test.txt" | sed 's/^SKIPPED \[[0-9]*\] [^:]*:[0-9]*: //' \
  | sort | uniq -c | sort -rn >"$log/python-skips.txt" || true
sed -n '/The following tests did not run/,/^$/p' "$log/test.txt" >"$log/ctest-skips.txt" || true
echo "clone-alone.sh: Python skips by reason:"; cat "$log/python-skips.txt"
echo "clone-alone.sh: C++ tests that did not run: $(grep -c "Skipped" "$log/ctest-skips.txt" || true)"
head -40 "$log/ctest-skips.txt"
if ((fail)); then echo "clone-alone.sh: FAILED"; exit 1; fi
echo "clone-alone.sh: OK: a clone with no ../shared ran both README commands"

#!/usr/bin/env bash
# Regenerates the committed PyTorch parity fixtures from the registry's samples.
# Usage: tools/gen_fixtures.sh [op ...]   (no ops: all)
# Builds the CLI (scripts/build.sh), dumps each op's samples (foundry ops --dump-samples) and runs
# them through PyTorch 1.13 (tools/gen_fixtures.py) into tests/parity/fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gen_fixtures.sh: error: unknown option '$a' (tools/gen_fixtures.sh --help)" >&2; exit 2 ;;
  esac
done
bash scripts/build.sh --target foundry_cli
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ "$#" -gt 0 ]; then
  build/bin/foundry ops --dump-samples "$tmp" --only "$@"
else
  build/bin/foundry ops --dump-samples "$tmp"
fi
/usr/bin/python3 tools/gen_fixtures.py "$tmp" tests/parity/fixtures "$@"

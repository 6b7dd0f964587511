#!/usr/bin/env bash
# Regenerates the committed PyTorch parity fixtures from the registry's samples.
# Usage: tools/gen_fixtures.sh [op ...]   (no ops: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --target foundry_cli
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ "$#" -gt 0 ]; then
  build/bin/foundry ops --dump-samples "$tmp" --only "$@"
else
  build/bin/foundry ops --dump-samples "$tmp"
fi
/usr/bin/python3 tools/gen_fixtures.py "$tmp" tests/parity/fixtures "$@"

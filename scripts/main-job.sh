#!/usr/bin/env bash
# The README's main job: install dependencies, build, train a small character-level GPT on Tiny
# Shakespeare (examples/shakespeare_char.toml), report the validation loss, and sample text.
# Re-running resumes from the last checkpoint in runs/shakespeare_char (pass --fresh to restart).
# Usage: scripts/main-job.sh [--fresh] [other `foundry train` options]
set -euo pipefail
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target foundry_cli
build/bin/foundry train --config examples/shakespeare_char.toml "$@"

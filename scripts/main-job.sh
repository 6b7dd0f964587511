#!/usr/bin/env bash
# The README's main job: install dependencies, build, train a small character-level GPT on Tiny
# Shakespeare (examples/shakespeare_char.toml), report the validation loss, and sample text.
# Re-running resumes from the last checkpoint in runs/shakespeare_char (pass --fresh to restart).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target foundry_cli
build/bin/foundry train --config examples/shakespeare_char.toml "$@"

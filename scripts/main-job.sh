#!/usr/bin/env bash
# The README's main job: install dependencies, build, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target foundry_cli
build/bin/foundry demo

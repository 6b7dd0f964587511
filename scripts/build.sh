#!/usr/bin/env bash
# Configures and builds Foundry (release preset, Ninja, ccache) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${FOUNDRY_JOBS:-$(nproc)}"
cmake --preset release >/dev/null
cmake --build build -j "$jobs" "$@"

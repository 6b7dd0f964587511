#!/usr/bin/env bash
# Configures and builds Foundry (release preset, Ninja, ccache) into build/.
# Usage: scripts/build.sh [cmake --build options, e.g. --target foundry_cli]   (FOUNDRY_JOBS: parallel jobs)
set -euo pipefail
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
cd "$(dirname "$0")/.."
jobs="${FOUNDRY_JOBS:-$(nproc)}"
cmake --preset release >/dev/null
cmake --build build -j "$jobs" "$@"

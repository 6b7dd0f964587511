#!/usr/bin/env bash
# Installs the reference implementations (npm tokenizers@0.23.2 and tiktoken into NPM_DIR,
# once) and writes the expected outputs into OUT_DIR. Debian's python3-sentencepiece comes from
# scripts/install-deps.sh.
# usage: run_reference.sh NPM_DIR DATA_DIR TESTS_DIR OUT_DIR [LINES]; exits 77 (CTest's skip) when
# DATA_DIR has no tokenizers.
set -euo pipefail
npm_dir=$1 data_dir=$2 tests_dir=$3 out_dir=$4 lines=${5:-1000}
if [ ! -d "$data_dir/tokenizers" ]; then
  # A clone alone: the tests that need these references skip themselves, naming the reason.
  echo "run_reference.sh: SKIPPED: $data_dir/tokenizers is absent (no ../shared/data beside this clone)"
  exit 77
fi
if [ ! -f "$npm_dir/node_modules/tokenizers/package.json" ] || [ ! -f "$npm_dir/node_modules/tiktoken/package.json" ]; then
  mkdir -p "$npm_dir"
  npm install --no-audit --no-fund --silent --prefix "$npm_dir" tokenizers@0.23.2 tiktoken@1
fi
node "$tests_dir/reference.js" "$npm_dir" "$data_dir" "$tests_dir" "$out_dir" "$lines"
/usr/bin/python3 "$tests_dir/spm_reference.py" "$data_dir" "$out_dir"

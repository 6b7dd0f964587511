#!/usr/bin/env bash
# Installs every Debian 12 package Foundry's build, tests and benchmarks need.
# Idempotent; run as root (or through sudo) on a fresh machine.
# Usage: scripts/install-deps.sh
set -euo pipefail
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
[[ $# -eq 0 ]] || { echo "install-deps.sh: error: it takes no arguments, got '$1' (see --help)" >&2; exit 2; }

packages=(
  # build
  cmake ninja-build g++ ccache pkg-config git
  # SIMD, GEMM, BLAS/LAPACK
  libhwy-dev libdnnl-dev libopenblas-openmp-dev
  # archives (.npz, .pt zips)
  libzip-dev
  # JSON, text, regex, unicode, CLI
  nlohmann-json3-dev libfmt-dev libpcre2-dev libutf8proc-dev libcli11-dev libtomlplusplus-dev
  # python bindings and parity references
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  # chat templates: jinja2 (what transformers renders them with) is the reference
  python3-jinja2
  # tokenizer references (HF tokenizers/tiktoken come from npm, see tests/text)
  sentencepiece python3-sentencepiece
  ocl-icd-opencl-dev opencl-headers  # libdnnl-dev's CMake config needs OpenCL to configure
  # experiment tracking: the run store, the dashboard's HTTP server and charts, PNG
  libsqlite3-dev libcpp-httplib-dev zlib1g-dev libjs-chart.js
  # tracking tests: TensorBoard's protos parsed with protobuf; the dashboard in headless Chromium
  python3-protobuf protobuf-compiler chromium
  # evaluation: task files (YAML); scikit-learn, SciPy and nltk are the metrics' references
  libyaml-dev python3-yaml python3-sklearn python3-scipy python3-nltk
  # tests
  libgtest-dev libgmock-dev libbenchmark-dev
  # the sanitizer tree (scripts/sanitize.sh, scripts/fuzz.sh): clang with its ASan/UBSan/libFuzzer
  # runtimes, clang's OpenMP, and llvm-symbolizer for readable reports
  clang libclang-rt-dev libomp-dev llvm
  # benchmarks: bench/decode_profile records the decode step with perf; bench/quant_decode reads
  # llama-bench's peak RSS through GNU time
  linux-perf time
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js runs the HF `tokenizers` reference in the tokenizer parity tests. Use the machine's
# node when present (Debian's nodejs 18 works too).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

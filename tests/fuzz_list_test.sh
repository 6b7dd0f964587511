#!/usr/bin/env bash
# scripts/fuzz.sh --list names one target per parser the hardening issue lists, each target has
# seeds, and an unknown target is refused with exit 2. Runs in the release tree (no clang needed).
set -u
cd "$(dirname "$0")/.."
list=$(bash scripts/fuzz.sh --list) || { echo "FAIL: fuzz.sh --list exited $?"; exit 1; }
fail=0
for t in safetensors gguf npy tokenizer_json sentencepiece tiktoken gpt2_bpe hf_config train_toml checkpoint jsonl \
         forward_inputs tokenizer_encode chat_template json_schema; do
  grep -qx "$t" <<<"$list" || { echo "FAIL: no fuzz target '$t'"; fail=1; }
  [ -f "tests/fuzz/$t.cpp" ] || { echo "FAIL: tests/fuzz/$t.cpp missing"; fail=1; }
  [ -n "$(ls tests/fuzz/seeds/$t 2>/dev/null)" ] || { echo "FAIL: no seeds for $t"; fail=1; }
done
bash scripts/fuzz.sh no_such_target 1 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown target is not refused with exit 2"; fail=1; }
[ $fail -eq 0 ] && echo "ok: $(wc -l <<<"$list") fuzz targets"
exit $fail

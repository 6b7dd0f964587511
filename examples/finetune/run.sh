#!/usr/bin/env bash
# The fine-tuning example: pretrain a small Llama on Tiny Shakespeare (a 512-token BPE trained
# first), then teach it to answer templated questions with a LoRA adapter (instructions.jsonl; the
# loss on the answers only), and show the loss drop and a before / after generation. About 2-3
# minutes on 2 cores after the build; re-running reuses the tokenizer and the base model.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/build.sh --target foundry_cli foundry_python
OUT=runs/finetune
FOUNDRY=build/bin/foundry
mkdir -p "$OUT"
if [ ! -f "$OUT/tokenizer.json" ]; then
  PYTHONPATH=build/python /usr/bin/python3 -c "
import foundry
foundry.train_bpe(['examples/data/tinyshakespeare.txt'], vocab_size=512,
                  special_tokens=['<|endoftext|>']).save('$OUT/tokenizer.json')"
fi
if [ ! -f "$OUT/base/model.safetensors" ]; then
  $FOUNDRY train --config examples/finetune/base.toml --export "$OUT/base"
fi
ask() {  # ask QUESTION [extra generate options]
  local q="$1"; shift
  printf '  Q: %s\n  A:' "$q"
  $FOUNDRY generate --model "$OUT/base" --prompt "### Question: $q"$'\n### Answer:' --max-new-tokens 16 "$@" 2>/dev/null |
    head -1
}
QUESTIONS=("How many legs does a spider have?" "What colour is snow?" "Greet Hamlet." "What is two plus three?")
echo "== before fine-tuning (the Shakespeare base model) =="
for q in "${QUESTIONS[@]}"; do ask "$q"; done
rm -rf "$OUT/adapter"
$FOUNDRY finetune --model "$OUT/base" --data examples/finetune/instructions.jsonl \
  --eval-data examples/finetune/eval.jsonl --out "$OUT/adapter" --target-modules all-linear \
  --lora-r 16 --lora-alpha 32 --lora-dropout 0.05 --lr 2e-3 --steps 300 --batch-size 8 --seq-len 64 --warmup 10 \
  --schedule cosine --seed 42
echo "== after fine-tuning (base + LoRA adapter, $OUT/adapter) =="
for q in "${QUESTIONS[@]}"; do ask "$q" --adapter "$OUT/adapter"; done
echo "(held-out questions are in examples/finetune/eval.jsonl; the adapter loads in PEFT, and"
echo " build/bin/foundry merge --model $OUT/base --adapter $OUT/adapter --out $OUT/merged writes a plain HF folder)"

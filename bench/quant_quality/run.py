#!/usr/bin/python3
"""bench/quant_quality: what quantization costs a trained model.

The model: the byte-level GPT of bench/quant_quality/wikitext_byte.toml (4 layers, n_embd 256,
trained by `foundry train` on WikiText-2's validation split and exported as an HF GPT-2 folder).
On the first --bytes bytes of WikiText-2's test split (windows of 128 tokens, every token after
the first of a window scored), for float32 and each format:
- perplexity and its change against float32;
- top-1 agreement with float32 over the same scored positions (teacher forced);
- greedy agreement: 32 tokens generated from each of 24 fixed 64-byte prompts, the share of
  positions where the quantized model emits float32's token, and how many prompts match entirely.
GGML formats and nf4 run through `--quantize` (every product on the quantized weights); the
`foundry quantize` folders (nf4, int8, int4) are written once and loaded like any folder.
Usage: /usr/bin/python3 bench/quant_quality/run.py [--model runs/wikitext_byte/hf] [--bytes 262144]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
DATA = os.path.join(ROOT, "..", "shared", "data", "corpora", "wikitext2.test.txt")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "runs", "wikitext_byte", "hf"))
    ap.add_argument("--bytes", type=int, default=262144)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import foundry

    cli = os.path.join(args.build, "bin", "foundry")
    text = open(DATA, "rb").read()
    ids = np.frombuffer(text[:args.bytes], np.uint8).astype(np.int64)
    ctx = 128
    windows = ids[: len(ids) // ctx * ctx].reshape(-1, ctx)
    starts = np.linspace(0, len(text) - 200, 24).astype(int)
    prompts = [[int(b) for b in text[s:s + 64]] for s in starts]

    def evaluate(model):
        nll, top1 = [], []
        for i in range(0, len(windows), 16):
            batch = windows[i:i + 16]
            logits = model(foundry.tensor(batch.tolist())).numpy().astype(np.float64)[:, :-1]
            m = logits.max(-1, keepdims=True)
            lse = m[..., 0] + np.log(np.exp(logits - m).sum(-1))
            target = batch[:, 1:]
            nll.append((lse - np.take_along_axis(logits, target[..., None], -1)[..., 0]).reshape(-1))
            top1.append(logits.argmax(-1).reshape(-1))
        greedy = [model.generate(p, max_new_tokens=32, ignore_eos=True)[0] for p in prompts]
        return float(np.exp(np.concatenate(nll).mean())), np.concatenate(top1), greedy

    quantized_folders = {}
    for kind, extra in (("nf4", []), ("int8", []), ("int4", ["--group-size", "128"]),
                        ("int4", ["--group-size", "32", "--asymmetric"])):
        name = kind + ("" if kind != "int4" else ("-g32-asym" if "--asymmetric" in extra else "-g128"))
        out = os.path.join("/tmp", "foundry_quant_quality", name)
        if not os.path.exists(os.path.join(out, "config.json")):
            subprocess.run([cli, "quantize", "--model", args.model, "--out", out, "--type", kind, *extra], check=True,
                           capture_output=True)
        quantized_folders[name + " (folder)"] = out

    base_ppl, base_top1, base_greedy = evaluate(foundry.models.from_pretrained(args.model))
    print(f"model {args.model}; {windows.size} test bytes in {len(windows)} windows of {ctx}\n")
    print("| weights | perplexity | vs float32 | top-1 agreement | greedy tokens agreeing | prompts identical |")
    print("|---|---|---|---|---|---|")
    print(f"| float32 | {base_ppl:.4f} | - | - | - | - |")
    runs = [(f, dict(quantize=f)) for f in ("f16", "bf16", "q8_0", "q6_K", "q5_K", "q5_0", "q4_K", "q4_0", "q4_1", "nf4")]
    runs += [(name, dict(path=path)) for name, path in quantized_folders.items()]
    for name, how in runs:
        model = foundry.models.from_pretrained(how.get("path", args.model), **({"quantize": how["quantize"]}
                                                                                  if "quantize" in how else {}))
        ppl, top1, greedy = evaluate(model)
        agree = np.mean([np.mean(np.array(a) == np.array(b)) for a, b in zip(greedy, base_greedy)])
        same = sum(a == b for a, b in zip(greedy, base_greedy))
        print(f"| {name} | {ppl:.4f} | {100 * (ppl / base_ppl - 1):+.2f}% | {np.mean(top1 == base_top1):.2%} | "
              f"{agree:.1%} | {same}/{len(prompts)} |", flush=True)


if __name__ == "__main__":
    main()

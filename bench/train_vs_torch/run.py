#!/usr/bin/python3
"""bench/train_vs_torch: one GPT-2-124M training step (batch 4 x seq 64, AdamW), Foundry vs
PyTorch 1.13 eager, 1 and 2 threads; Foundry also with bfloat16 autocast and with activation
checkpointing. Each configuration runs in its own process (peak RSS is per process).
Usage: /usr/bin/python3 bench/train_vs_torch/run.py [build/bin/bench_train_step]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "bin", "bench_train_step")


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# Each Foundry row is compared with PyTorch in the same precision (bf16 autocast against PyTorch's
# CPU bf16 autocast), and also with PyTorch float32.
rows = []
for threads in (1, 2):
    t32 = run(["/usr/bin/python3", os.path.join(HERE, "torch_step.py"), str(threads)], threads)
    t16 = run(["/usr/bin/python3", os.path.join(HERE, "torch_step.py"), str(threads), "bfloat16"], threads)
    rows.append(("PyTorch 1.13 float32", threads, t32, t32, t32))
    rows.append(("PyTorch 1.13 bfloat16 autocast", threads, t16, t16, t32))
    for label, extra, same in (("Foundry float32", [], t32), ("Foundry bfloat16 autocast", ["--precision", "bfloat16"], t16),
                               ("Foundry float32 + activation checkpointing", ["--checkpointing"], t32)):
        f = run([binary, "--threads", str(threads)] + extra, threads)
        rows.append((label, threads, f, same, t32))

print("| configuration | threads | ms/step | tokens/s | peak RSS MB | speed vs PyTorch, same precision | "
      "speed vs PyTorch float32 | RSS vs PyTorch, same precision |")
print("|---|---|---|---|---|---|---|---|")
for label, threads, f, same, t32 in rows:
    print("| %s | %d | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx |" % (
        label, threads, f["ms"], f["tokens_per_s"], f["peak_rss_mb"], same["ms"] / f["ms"], t32["ms"] / f["ms"],
        f["peak_rss_mb"] / same["peak_rss_mb"]))
sys.path.insert(0, os.path.join(HERE, ".."))
import torch_blas  # noqa: E402
print()
print(torch_blas.describe())

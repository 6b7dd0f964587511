#!/usr/bin/python3
"""bench/optim_vs_torch: AdamW step and clip_grad_norm_ on GPT-2 124M-sized parameters (148
tensors, 124.4M floats), Foundry vs PyTorch 1.13 (torch.optim.AdamW default single-tensor and
foreach), 1 and 2 threads, one table.

Usage: /usr/bin/python3 bench/optim_vs_torch/run.py [build/bin/bench_optim_vs_torch] [reps] [rounds]
Each side runs in its own process with OMP_NUM_THREADS set, `rounds` times, alternating. Times
are the best of all `reps` x `rounds` steps after a warm-up (in parentheses: the lowest median of a
round); on a shared machine other processes only ever add time. Ratio = PyTorch ms / Foundry ms, best against best
(> 1: Foundry is faster). GB/s counts the bytes an ideal single pass moves (AdamW: 28 per element,
clip_grad_norm_: 12).
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "bench_optim_vs_torch")
reps = sys.argv[2] if len(sys.argv) > 2 else "7"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return {r["case"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def merge(acc, res):
    for case, r in res.items():
        if case not in acc:
            acc[case] = dict(r)
        else:
            acc[case]["ms"] = min(acc[case]["ms"], r["ms"])
            acc[case]["median_ms"] = min(acc[case]["median_ms"], r["median_ms"])


def ms(r):
    return "%.1f (%.1f)" % (r["ms"], r["median_ms"])


print("| case | threads | Foundry ms | Foundry GB/s | torch default ms | ratio | torch foreach ms | ratio |")
print("|---|---|---|---|---|---|---|---|")
for threads in (1, 2):
    ours, theirs = {}, {}
    for _ in range(rounds):
        merge(ours, run([binary, "--threads", str(threads), "--reps", reps], threads))
        merge(theirs, run(["/usr/bin/python3", os.path.join(HERE, "torch_side.py"), str(threads), reps], threads))
    for case in ("adamw_fused", "adamw_fused_flat", "adamw_fused_flat_params", "adamw_reference"):
        f = ours[case]
        d, fe = theirs["adamw_default"], theirs["adamw_foreach"]
        print("| AdamW %s | %d | %s | %.1f | %s | %.2fx | %s | %.2fx |" % (
            case.replace("adamw_", ""), threads, ms(f), f["bytes"] / f["ms"] / 1e6, ms(d), d["ms"] / f["ms"], ms(fe),
            fe["ms"] / f["ms"]))
    f, t = ours["clip_grad_norm"], theirs["clip_grad_norm"]
    print("| clip_grad_norm_ | %d | %s | %.1f | %s | %.2fx | - | - |" % (
        threads, ms(f), f["bytes"] / f["ms"] / 1e6, ms(t), t["ms"] / f["ms"]))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_blas  # noqa: E402
print()
print(torch_blas.describe())

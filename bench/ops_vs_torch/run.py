#!/usr/bin/python3
"""bench/ops_vs_torch: Foundry vs PyTorch 1.13 on the same ops, 1 and 2 threads, one table.

Usage: /usr/bin/python3 bench/ops_vs_torch/run.py [build/bin/bench_ops_vs_torch]
Each side runs in its own process with OMP_NUM_THREADS set (one OpenMP pool per process) and
otherwise default settings. The two sides alternate for ROUNDS rounds and each keeps its best
median per case: on a shared machine, memory-bound rows swing by tens of percent from one
minute to the next, and alternating gives both sides the same chances.
Ratio = PyTorch time / Foundry time (> 1 means Foundry is faster).
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
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "bench_ops_vs_torch")


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return {r["case"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


ROUNDS = int(os.environ.get("ROUNDS", "3"))


def best(a, b):
    return {k: (v if k not in a or v["ms"] < a[k]["ms"] else a[k]) for k, v in b.items()}


rows = []
for threads in (1, 2):
    torch_res, ours = {}, {}
    for _ in range(ROUNDS):
        torch_res = best(torch_res, run(["/usr/bin/python3", os.path.join(HERE, "torch_side.py"), str(threads)], threads))
        ours = best(ours, run([binary, "--threads", str(threads)], threads))
    for case, t in torch_res.items():
        f = ours.get(case)
        if f is None:
            continue
        rows.append((case, threads, f, t))

print("| case | threads | Foundry ms | PyTorch ms | ratio (PyTorch/Foundry) | Foundry GB/s | Foundry GFLOP/s |")
print("|---|---|---|---|---|---|---|")
for case, threads, f, t in rows:
    gbs = f["bytes"] / f["ms"] / 1e6 if f["bytes"] else 0
    gflops = f["flops"] / f["ms"] / 1e6 if f["flops"] else 0
    print("| %s | %d | %.3f | %.3f | %.2fx | %s | %s |" % (
        case, threads, f["ms"], t["ms"], t["ms"] / f["ms"], "%.1f" % gbs if gbs else "-",
        "%.1f" % gflops if gflops else "-"))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_blas  # noqa: E402
print()
print(torch_blas.describe())

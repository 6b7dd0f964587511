"""PyTorch 1.13 side of bench/optim_vs_torch: the same parameters, the same timing (best and median
of `reps` steps after one warm-up), JSON lines."""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import gpt2_124m_shapes  # noqa: E402

threads = int(sys.argv[1])
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
only = sys.argv[3] if len(sys.argv) > 3 else None
torch.set_num_threads(threads)


def time_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[0], times[len(times) // 2]


def report(name, t, nbytes):
    print(json.dumps({"case": name, "ms": t[0], "median_ms": t[1], "bytes": nbytes}), flush=True)


def make_params(seed):
    g = torch.Generator().manual_seed(seed)
    ps = []
    for _, shape in gpt2_124m_shapes():
        p = (torch.randn(shape, generator=g) * 0.02).requires_grad_(True)
        p.grad = torch.randn(shape, generator=g) * 0.01
        ps.append(p)
    return ps


n = 0
for _, shape in gpt2_124m_shapes():
    n += torch.Size(shape).numel()
for name, foreach in (("adamw_default", False), ("adamw_foreach", True)):
    if only and only != name:
        continue
    ps = make_params(1)
    opt = torch.optim.AdamW(ps, lr=6e-4, weight_decay=0.1, foreach=foreach)
    report(name, time_ms(opt.step, reps), 28.0 * n)
    del opt, ps
if not only or only == "clip_grad_norm":
    ps = make_params(2)
    report("clip_grad_norm", time_ms(lambda: torch.nn.utils.clip_grad_norm_(ps, 1e-3), reps), 12.0 * n)

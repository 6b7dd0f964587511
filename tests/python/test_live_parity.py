"""Live parity: every registry op on fresh random samples (float32 and float64), Foundry through
the bindings next to PyTorch 1.13, forward values, output dtypes, and input gradients."""
import math
import re

import numpy as np
import pytest
import torch

import foundry
from torch_ref import call, documented_rejection, outputs_of, resolve

TOL = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2),
       torch.float16: (2e-3, 2e-3)}
OPS = foundry._C._op_names()


def to_torch(v, requires_grad=False):
    if isinstance(v, foundry.Tensor):
        dt = v.dtype
        arr = v.numpy()
        t = torch.from_numpy(np.array(arr, order="C", copy=True))
        if dt == foundry.bfloat16:
            t = t.to(torch.bfloat16)
        if requires_grad and t.dtype in (torch.float32, torch.float64) and t.numel() > 0:
            t.requires_grad_(True)
        return t
    if isinstance(v, list) and v and all(isinstance(x, (foundry.Tensor, type(None))) for x in v):
        return [None if x is None else to_torch(x, requires_grad) for x in v]
    if isinstance(v, foundry.dtype):
        return getattr(torch, v.name)
    return v


def check(a, b, ctx):
    a = a.detach().numpy() if isinstance(a, foundry.Tensor) else a
    expected = b.detach()
    rtol, atol = TOL.get(expected.dtype, (0, 0))
    if expected.dtype == torch.bfloat16:
        expected = expected.float()
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), expected.numpy().astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=ctx)


@pytest.mark.parametrize("name", OPS)
def test_op_matches_torch(name):
    info = foundry._C._op_info(name)
    if info["random"]:
        pytest.skip("random op: distribution checked by the fixture tests")
    op = {"name": name, "params": [{"name": p[0], "kwarg_only": p[2]} for p in info["params"]]}
    fn, positional = resolve(name, info["ref"])
    compared, skipped = 0, 0
    # Float ops on float32 and float64; ops without float samples (bitwise, ...) on their integers.
    for dtype in (foundry.float32, foundry.float64, foundry.int64, foundry.int32, foundry.bool):
        if dtype in (foundry.int64, foundry.int32, foundry.bool) and compared:
            break
        try:
            samples = foundry._C._samples(name, dtype)
        except Exception:
            continue
        for args, note, _ in samples:
            ctx = "%s %s %s" % (name, dtype, note)
            nondiff = set()
            while True:
                try:
                    t_args = [to_torch(a, requires_grad=info["differentiable"] and p[0] not in nondiff)
                              for a, p in zip(args, info["params"])]
                    expected = outputs_of(call(fn, positional, op, t_args))
                    break
                except Exception as e:
                    m = re.search(r"not differentiable with respect to argument '(\w+)'", str(e))
                    if m and m.group(1) not in nondiff:
                        nondiff.add(m.group(1))  # compared as a value, as PyTorch does not differentiate it
                        continue
                    # Only an error PyTorch documents may leave a sample uncompared.
                    assert documented_rejection(str(e)), "%s: PyTorch raised %s: %s" % (ctx, type(e).__name__, e)
                    expected = None
                    break
            if expected is None:
                skipped += 1
                continue
            f_args = [a.detach().clone().requires_grad_(True)
                      if info["differentiable"] and p[0] not in nondiff and isinstance(a, foundry.Tensor)
                      and a.is_floating_point() and a.dtype in (foundry.float32, foundry.float64) and a.numel() > 0
                      else a for a, p in zip(args, info["params"])]
            npos = sum(1 for p in info["params"] if not p[2])
            kw = {p[0]: v for p, v in zip(info["params"][npos:], f_args[npos:])}
            got = foundry._C._call(name, *f_args[:npos], **kw)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            assert len(got) == len(expected), ctx
            for g, e in zip(got, expected):
                assert g.dtype.name == str(e.dtype).split(".")[1], ctx + " dtype"
                check(g, e, ctx)
            compared += 1
            # Gradients for all-ones grad_outputs.
            t_leaves = [t for t in _flat(t_args) if isinstance(t, torch.Tensor) and t.requires_grad]
            f_leaves = [t for t in _flat(f_args) if isinstance(t, foundry.Tensor) and t.requires_grad]
            outs = [(g, e) for g, e in zip(got, expected) if e.requires_grad and g.requires_grad]
            if not t_leaves or not outs or len(t_leaves) != len(f_leaves):
                continue
            try:
                t_grads = torch.autograd.grad([e for _, e in outs], t_leaves, [torch.ones_like(e) for _, e in outs],
                                              allow_unused=True)
            except Exception:
                continue
            f_grads = foundry.autograd.grad([g for g, _ in outs], f_leaves,
                                            [foundry.ones_like(g) for g, _ in outs], allow_unused=True)
            for fg, tg, leaf in zip(f_grads, t_grads, t_leaves):
                tg = torch.zeros_like(leaf) if tg is None else tg
                fg = foundry.zeros_like(foundry.tensor(leaf.detach().numpy())) if fg is None else fg
                check(fg, tg, ctx + " gradient")
    print("%s: %d samples compared, %d skipped (PyTorch 1.13 rejects them)" % (name, compared, skipped))
    assert compared > 0, name + ": no sample could be compared with PyTorch"



def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from v
        else:
            yield v

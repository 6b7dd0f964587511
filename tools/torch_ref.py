"""PyTorch 1.13 references for Foundry's registry ops, shared by the fixture generator
(tools/gen_fixtures.py) and the live parity tests (tests/python/test_live_parity.py).

An op's reference is its OpDef `ref` string: empty means torch.<name>; "torch.a.b" names a
function; "lambda ..." is evaluated here; a few names map to helpers below.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float32": torch.float32, "float64": torch.float64,
}
NAMES = {v: k for k, v in DTYPES.items()}


def numpy_slice(input, dim=0, start=None, end=None, step=1):
    """NumPy slicing (negative steps too) through index_select, so PyTorch can differentiate it."""
    n = input.shape[dim]
    idx = list(range(*slice(start, end, step).indices(n)))
    return torch.index_select(input, dim, torch.tensor(idx, dtype=torch.long))


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    res = torch.unique(input, sorted=sorted, return_inverse=True, return_counts=True, dim=dim)
    vals, inv, cnt = res
    empty = torch.empty(0, dtype=torch.long)
    return vals, (inv if return_inverse else empty), (cnt if return_counts else empty)


def baddbmm(input, batch1, batch2, beta=1, alpha=1):
    """torch.baddbmm, except that beta == 0 is computed as alpha * bmm (+ 0 * input, for the zero
    gradient): PyTorch 1.13 on CPU then sometimes returns NaN from uninitialised memory, although
    the documentation says input is ignored (seen in the live tests, ~1 run in 10)."""
    if beta == 0:
        return alpha * torch.bmm(batch1, batch2) + 0 * input
    return torch.baddbmm(input, batch1, batch2, beta=beta, alpha=alpha)


SPECIAL = {"numpy_slice": numpy_slice, "unique": unique}
# Ops whose plain torch.<name> reference misbehaves in PyTorch 1.13.
OVERRIDES = {"baddbmm": baddbmm}


def resolve(name, ref):
    if name in OVERRIDES and (not ref or ref == "torch." + name):
        return OVERRIDES[name], False
    if not ref:
        return getattr(torch, name), False
    if ref in SPECIAL:
        return SPECIAL[ref], False
    if ref.startswith("lambda"):
        return eval(ref, {"torch": torch, "F": F, "np": np, "math": math}), False
    obj = None
    parts = ref.split(".")
    obj = {"torch": torch}[parts[0]]
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj, ref.startswith("torch.ops.")


def call(fn, positional_only, op, values):
    if positional_only:
        # torch.ops.aten.*: positional, except keyword-only parameters (aten calls `input` self).
        pos = [v for p, v in zip(op["params"], values) if not p["kwarg_only"]]
        kw = {("self" if p["name"] == "input" else p["name"]): v
              for p, v in zip(op["params"], values) if p["kwarg_only"]}
        return fn(*pos, **kw)
    kwargs = {p["name"]: v for p, v in zip(op["params"], values)}
    try:
        return fn(**kwargs)
    except TypeError as e:
        # Some builtins take their first arguments positionally only.
        npos = sum(1 for p in op["params"] if not p["kwarg_only"])
        pos = values[:npos]
        kw = {p["name"]: v for p, v in zip(op["params"][npos:], values[npos:])}
        try:
            return fn(*pos, **kw)
        except TypeError:
            raise e


def outputs_of(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [r if isinstance(r, torch.Tensor) else torch.tensor(r) for r in result]
    if isinstance(result, (bool, int, float)):
        return [torch.tensor(result)]
    raise TypeError("unexpected reference result %r" % type(result))



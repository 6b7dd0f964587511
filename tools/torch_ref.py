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


def index_put(input, indices, values, accumulate=False):
    """torch.index_put with None entries in `indices` (a whole dimension, as `:` in Python indexing),
    which torch.index_put itself does not take: each None becomes an arange placed where NumPy's
    advanced-indexing rules put that dimension in the result (index tensors adjacent: their
    broadcast dims replace them in place; separated by a None: they go first)."""
    indices = list(indices) + [None] * (input.dim() - len(indices))
    if all(i is not None for i in indices):
        return torch.index_put(input, tuple(indices), values, accumulate)
    adv = [k for k, i in enumerate(indices) if i is not None]
    if not adv:  # every dimension whole: x[...] = values
        return input + values if accumulate else input * 0 + values.expand_as(input)
    bshape = torch.broadcast_shapes(*[indices[k].shape for k in adv])
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    slices = [k for k, i in enumerate(indices) if i is None]
    # Result dims: ('slice', d) or the block of broadcast index dims.
    layout = ([("s", d) for d in slices if d < adv[0]] + [("a", None)] + [("s", d) for d in slices if d > adv[-1]]
              if adjacent else [("a", None)] + [("s", d) for d in slices])
    total = len(slices) + len(bshape)
    pos, at = {}, 0
    for kind, d in layout:
        pos[(kind, d)] = at
        at += len(bshape) if kind == "a" else 1
    full = []
    for k, i in enumerate(indices):
        if i is None:
            shape = [1] * total
            shape[pos[("s", k)]] = input.shape[k]
            full.append(torch.arange(input.shape[k]).reshape(shape))
        else:
            p = pos[("a", None)]
            full.append(i.expand(bshape).reshape([1] * p + list(bshape) + [1] * (total - p - len(bshape))))
    return torch.index_put(input, tuple(full), values, accumulate)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """F.conv_transpose2d; bfloat16 computed in float32 and rounded, because PyTorch 1.13's CPU
    bfloat16 transposed convolution mistakes the weight's layout ("expected input to have
    <out_channels> channels") where float32 runs the same call."""
    args = (stride, padding, output_padding, groups, dilation)
    if input.dtype == torch.bfloat16:
        f = [t if t is None else t.float() for t in (input, weight, bias)]
        return F.conv_transpose2d(f[0], f[1], f[2], *args).to(torch.bfloat16)
    return F.conv_transpose2d(input, weight, bias, *args)


def rwkv_linear_attention_cpu(time_decay, time_first, key, value, state=None):
    """transformers v4.40 rwkv_linear_attention_cpu: (output, [num, den, max] state), computing in
    float32 (float64 for float64 keys)."""
    ct = torch.float64 if key.dtype == torch.float64 else torch.float32
    _, seq_length, _ = key.size()
    output = torch.zeros_like(key)
    if state is None:
        num_state = torch.zeros_like(key[:, 0], dtype=ct)
        den_state = torch.zeros_like(key[:, 0], dtype=ct)
        max_state = torch.zeros_like(key[:, 0], dtype=ct) - 1e38
    else:
        num_state, den_state, max_state = state
    time_decay = -torch.exp(time_decay)
    for current_index in range(seq_length):
        current_key = key[:, current_index].to(ct)
        current_value = value[:, current_index]
        max_for_output = torch.maximum(max_state, current_key + time_first)
        e1 = torch.exp(max_state - max_for_output)
        e2 = torch.exp(current_key + time_first - max_for_output)
        numerator = e1 * num_state + e2 * current_value
        denominator = e1 * den_state + e2
        output[:, current_index] = (numerator / denominator).to(output.dtype)
        max_for_state = torch.maximum(max_state + time_decay, current_key)
        e1 = torch.exp(max_state + time_decay - max_for_state)
        e2 = torch.exp(current_key - max_for_state)
        num_state = e1 * num_state + e2 * current_value
        den_state = e1 * den_state + e2
        max_state = max_for_state
    return output, [num_state, den_state, max_state]


def rwkv_wkv(time_decay, time_first, key, value):
    return rwkv_linear_attention_cpu(time_decay, time_first, key, value)[0]


def selective_scan(u, delta, A, B, C, D):
    """The scan of transformers v4.40 MambaMixer.slow_forward (step 3) with u, delta as
    [batch, length, channels] (HF holds them transposed) and a zero initial state."""
    hidden_states, discrete_time_step = u.transpose(1, 2), delta.transpose(1, 2)
    ssm_state = torch.zeros(u.size(0), u.size(2), A.size(1), dtype=u.dtype)
    discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
    discrete_B = discrete_time_step[:, :, :, None] * B[:, None, :, :]
    deltaB_u = discrete_B * hidden_states[:, :, :, None]
    scan_outputs = []
    for i in range(u.size(1)):
        ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
        scan_output = torch.matmul(ssm_state, C[:, i, :].unsqueeze(-1))
        scan_outputs.append(scan_output[:, :, 0])
    scan_output = torch.stack(scan_outputs, dim=-1)
    scan_output = scan_output + (hidden_states * D[None, :, None])
    return scan_output.transpose(1, 2)


def _grads_of(fn, grad, *inputs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    grads = torch.autograd.grad(fn(*leaves), leaves, grad, allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads))


def rwkv_wkv_backward(grad, *inputs):
    return _grads_of(rwkv_wkv, grad, *inputs)


def selective_scan_backward(grad, *inputs):
    return _grads_of(selective_scan, grad, *inputs)


SPECIAL = {"numpy_slice": numpy_slice, "unique": unique, "rwkv_wkv": rwkv_wkv, "selective_scan": selective_scan,
           "_rwkv_wkv_backward": rwkv_wkv_backward, "_selective_scan_backward": selective_scan_backward}
# Ops whose plain torch.<name> reference misbehaves in PyTorch 1.13, or needs its call adapted.
OVERRIDES = {"baddbmm": baddbmm, "index_put": index_put, "conv_transpose2d": conv_transpose2d}

# Errors PyTorch 1.13 documents for inputs it does not support on CPU (a dtype without a kernel,
# an unsigned type with negative limits): the only reasons a sample may go uncompared.
DOCUMENTED_REJECTIONS = (
    "not implemented for '",                      # dtype without a CPU kernel
    "is not implemented for half on CPU",         # multinomial
    "cannot do hardtanh on an unsigned type",
)


def documented_rejection(message):
    return any(d in message for d in DOCUMENTED_REJECTIONS)


def resolve(name, ref):
    if name in OVERRIDES:
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


def _as_tensors(values):
    """Python numbers as 0-d tensors (for functions that take tensors only, where Foundry accepts a
    wrapped scalar: a 0-d tensor promotes as a Python scalar does)."""
    return [torch.tensor(v) if isinstance(v, (bool, int, float)) and not isinstance(v, torch.dtype) else v
            for v in values]


def call(fn, positional_only, op, values):
    try:
        return _call(fn, positional_only, op, values)
    except TypeError as e:
        if "must be Tensor, not" not in str(e):
            raise
        return _call(fn, positional_only, op, [values[0]] + _as_tensors(values[1:]))


def _call(fn, positional_only, op, values):
    if positional_only:
        # torch.ops.aten.*: positional, except keyword-only parameters (aten calls `input` self).
        pos = [v for p, v in zip(op["params"], values) if not p["kwarg_only"]]
        kw = {("self" if p["name"] == "input" else p["name"]): v
              for p, v in zip(op["params"], values) if p["kwarg_only"]}
        return fn(*pos, **kw)
    # An optional argument given as None is left out (PyTorch then uses its default; passing
    # dim=None by keyword selects the named-dimension overloads instead).
    kwargs = {p["name"]: v for p, v in zip(op["params"], values) if v is not None}
    if "dim" not in kwargs and kwargs.get("keepdim") is False:
        del kwargs["keepdim"]  # all(x, keepdim=False) has no overload; all(x) is the full reduction
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



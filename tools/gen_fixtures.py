#!/usr/bin/python3
"""Runs PyTorch 1.13 on the op registry's samples and writes the parity fixtures.

Usage (what tools/gen_fixtures.sh does):
    build/bin/foundry ops --dump-samples /tmp/samples
    /usr/bin/python3 tools/gen_fixtures.py /tmp/samples tests/parity/fixtures [op ...]

The samples come from Foundry (one generator per op, see OpDef::samples); this script only calls
the reference named by each op's `ref` (default torch.<name>) with the same arguments, by keyword
using the schema's parameter names, and records outputs, output dtypes, and the gradients of the
floating inputs for random grad_outputs. Cases PyTorch rejects are recorded as ref_error.
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
__import__("program").start(__doc__, __name__)
import json
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import torch
import torch.nn.functional as F

torch.set_grad_enabled(True)

import re  # noqa: E402

from torch_ref import DTYPES, NAMES, call, documented_rejection, outputs_of, resolve  # noqa: E402


def scalar_value(j):
    v = j["value"]
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(v, math.nan)
    if j["kind"] == "bool":
        return bool(v)
    if j["kind"] == "int":
        return int(v)
    return float(v)


def to_torch(arr, dtype_name):
    t = torch.from_numpy(np.array(arr, order="C", copy=True))  # keeps 0-d shape
    return t.to(DTYPES[dtype_name])


def build_args(op, sample, arrays, want_grad, nondiff_extra=()):
    """Returns (positional values, diff leaves {'3' or '3.1': tensor})."""
    values, leaves = [], {}
    nondiff = set(op.get("nondiff_params", [])) | set(nondiff_extra)
    for i, a in enumerate(sample["args"]):
        kind = a["kind"]
        pname = op["params"][i]["name"]
        diffable = want_grad and pname not in nondiff

        def leaf(t, key):
            if diffable and t.dtype in (torch.float32, torch.float64) and t.numel() > 0:
                t = t.detach().clone().requires_grad_(True)
                leaves[key] = t
            return t

        if kind == "none":
            values.append(None)
        elif kind == "tensor":
            t = to_torch(arrays[a["key"]], a["dtype"])
            if a.get("wrapped"):
                values.append(t.item())
            else:
                values.append(leaf(t, str(i)))
        elif kind == "tensor_list":
            ts = []
            for k, (key, dt) in enumerate(zip(a["keys"], a["dtypes"])):
                ts.append(None if key is None else leaf(to_torch(arrays[key], dt), "%d.%d" % (i, k)))
            values.append(ts)
        elif kind in ("scalar", "float"):
            values.append(scalar_value(a["scalar"]))
        elif kind in ("int", "bool", "str", "int_list", "float_list"):
            values.append(a["value"])
        elif kind == "dtype":
            values.append(DTYPES[a["value"]])
        else:
            raise ValueError("unknown arg kind " + kind)
    return values, leaves


def storable(t):
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)
    return t.contiguous().numpy()


def process(op, arrays):
    fn, positional = resolve(op["name"], op["ref"])
    out_arrays = dict(arrays)
    samples = []
    for si, sample in enumerate(op["samples"]):
        s = dict(sample)
        want_grad = op["differentiable"] and not op["random"]
        nondiff = []
        while True:
            try:
                values, leaves = build_args(op, sample, arrays, want_grad, nondiff)
                result = call(fn, positional, op, values)
                outs = outputs_of(result)
                break
            except Exception as e:
                msg = str(e)
                # PyTorch does not differentiate some arguments (a loss's class weights): they
                # are passed without requires_grad, and compared as values only.
                m = re.search(r"not differentiable with respect to argument '(\w+)'", msg)
                if m and m.group(1) not in nondiff and any(p["name"] == m.group(1) for p in op["params"]):
                    nondiff.append(m.group(1))
                    continue
                s["ref_error"] = "%s: %s" % (type(e).__name__, msg.splitlines()[0] if msg else "")
                if not documented_rejection(msg):
                    s["ref_error_undocumented"] = True
                outs = None
                break
        if outs is None:
            samples.append(s)
            continue
        s["outputs"] = []
        for k, o in enumerate(outs):
            key = "%s_o%d" % (sample["id"], k)
            out_arrays[key] = storable(o)
            s["outputs"].append({"key": key, "dtype": NAMES[o.dtype]})
        if want_grad and leaves:
            diff = [(k, o) for k, o in enumerate(outs) if o.requires_grad and o.dtype.is_floating_point]
            if diff:
                rng = np.random.default_rng(1000 + si)
                gos = []
                for k, o in diff:
                    go = torch.from_numpy(rng.standard_normal(tuple(o.shape))).to(o.dtype)
                    out_arrays["%s_go%d" % (sample["id"], k)] = storable(go)
                    gos.append(go)
                keys = list(leaves.keys())
                try:
                    grads = torch.autograd.grad([o for _, o in diff], [leaves[k] for k in keys], gos,
                                                allow_unused=True)
                    s["grads"] = {}
                    for gi, (k, g) in enumerate(zip(keys, grads)):
                        if g is None:
                            g = torch.zeros_like(leaves[k])
                        gk = "%s_g%d" % (sample["id"], gi)
                        out_arrays[gk] = storable(g)
                        s["grads"][k] = gk
                except Exception as e:
                    s["ref_grad_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        samples.append(s)
    rec = dict(op)
    rec["samples"] = samples
    return rec, out_arrays


def main():
    src, dst = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    with open(os.path.join(src, "samples.json")) as f:
        dumped = json.load(f)
    os.makedirs(dst, exist_ok=True)
    manifest_path = os.path.join(dst, "manifest.json")
    manifest = {"ops": []}
    if only and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    kept = [o for o in manifest["ops"] if o["name"] not in only] if only else []
    errors = 0
    for op in dumped["ops"]:
        if only and op["name"] not in only:
            continue
        with np.load(os.path.join(src, op["name"] + ".npz")) as z:
            arrays = {k: z[k] for k in z.files}
        try:
            rec, out_arrays = process(op, arrays)
        except Exception:
            print("FAILED", op["name"])
            traceback.print_exc()
            errors += 1
            continue
        n_err = sum(1 for s in rec["samples"] if "ref_error" in s)
        if n_err == len(rec["samples"]):
            print("%s: every case failed in PyTorch: %s" % (op["name"], rec["samples"][0].get("ref_error")))
            errors += 1
        for s in rec["samples"]:
            if s.get("ref_error_undocumented"):
                # A call mistake of this harness, or a sample PyTorch has no documented reason to refuse.
                print("%s %s: PyTorch raised %s" % (op["name"], s["id"], s["ref_error"]))
                errors += 1
        np.savez(os.path.join(dst, op["name"] + ".npz"), **out_arrays)
        kept.append(rec)
    kept.sort(key=lambda o: o["name"])
    with open(manifest_path + ".tmp", "w") as f:
        json.dump({"torch": torch.__version__, "ops": kept}, f, indent=0, sort_keys=True)
    os.replace(manifest_path + ".tmp", manifest_path)
    print("wrote %d op fixtures to %s (%d problems)" % (len(kept), dst, errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

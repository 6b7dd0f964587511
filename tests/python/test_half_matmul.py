"""16-bit float matrix products: one activation row (decode's linear layers, the 16-bit
matrix-vector kernels) and many (float32 copies of the operands in their own layouts where the CPU
has no 16-bit GEMM: float16 everywhere, bfloat16 under FOUNDRY_MAX_ISA=avx2), a [out, in] weight
read transposed (nn.Linear) and an [in, out] one (GPT-2's Conv1D), with and without a bias, against
PyTorch's float32 product of the same 16-bit values: float32 accumulation, one rounding."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import foundry

PYDIR = os.environ.get("FOUNDRY_PYTHON_DIR",
                       os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "build", "python"))
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def rounded(a, dtype):
    """a rounded to the 16-bit dtype, as float32 numpy."""
    return torch.from_numpy(a).to(TORCH[dtype]).float().numpy()


def as_foundry(a, dtype):
    return foundry.tensor(a).to(getattr(foundry, dtype))


def spacing(v, dtype):
    """The dtype's spacing at v (its subnormal spacing near zero)."""
    mant = 10 if dtype == "float16" else 7
    return np.exp2(np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - mant)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 5, 64])
@pytest.mark.parametrize("layout", ["linear", "conv1d"])
@pytest.mark.parametrize("bias", [False, True])
def test_product_matches_float32_rounded_once(dtype, rows, layout, bias):
    rng = np.random.default_rng(rows * 7 + len(layout) + bias)
    k, n = 96, 130
    x = rounded(rng.standard_normal((rows, k)).astype(np.float32), dtype)
    w = rounded((0.1 * rng.standard_normal((n, k) if layout == "linear" else (k, n))).astype(np.float32), dtype)
    b = rounded(rng.standard_normal(n).astype(np.float32), dtype) if bias else np.zeros(n, np.float32)
    w_kn = (w.T if layout == "linear" else w).astype(np.float64)
    fx, fw, fb = as_foundry(x, dtype), as_foundry(w, dtype), as_foundry(b, dtype)
    if layout == "linear":  # the bias inside the product: one rounding
        want = rounded((x.astype(np.float64) @ w_kn + b).astype(np.float32), dtype)
        got = foundry.linear(fx, fw, fb) if bias else foundry.linear(fx, fw)
    else:  # the bias added by its own op, as GPT-2's Conv1D does: two roundings
        product = rounded((x.astype(np.float64) @ w_kn).astype(np.float32), dtype)
        want = rounded(product + b, dtype) if bias else product
        got = foundry.matmul(fx, fw) + fb if bias else foundry.matmul(fx, fw)
    assert got.dtype == getattr(foundry, dtype)
    got = got.float().numpy()
    # An ulp at the result (and at the product before the bias's own rounding), and float32
    # accumulation in another order than the float64 reference (it shows where the sum cancels).
    tol = spacing(want, dtype) + 1e-6 * (np.abs(x).astype(np.float64) @ np.abs(w_kn))
    if layout == "conv1d" and bias:
        tol += spacing(product, dtype)
    assert (np.abs(got - want) <= tol).all(), np.abs(got - want).max()


SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import foundry
rng = np.random.default_rng(0)
x = foundry.tensor(rng.standard_normal((24, 200)).astype(np.float32)).to(foundry.bfloat16)
w = foundry.tensor((0.1 * rng.standard_normal((72, 200))).astype(np.float32)).to(foundry.bfloat16)
np.save(sys.argv[2], foundry.linear(x, w).float().numpy())
"""


def test_bfloat16_without_native_kernels_matches_native(tmp_path):
    """Under the AVX2 cap oneDNN has no bf16 GEMM: the float32-copies path gives what the native one does."""
    if "AVX" not in foundry.cpu_capability():
        pytest.skip("not an x86 CPU with AVX2")
    out = {}
    for cap in ("", "avx2"):
        env = dict(os.environ)
        env.pop("FOUNDRY_MAX_ISA", None)
        if cap:
            env["FOUNDRY_MAX_ISA"] = cap
        path = tmp_path / f"y{cap}.npy"
        p = subprocess.run([sys.executable, "-c", SCRIPT, PYDIR, str(path)], capture_output=True, text=True, env=env,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        out[cap] = np.load(path)
    assert (np.abs(out["avx2"] - out[""]) <= spacing(out[""], "bfloat16")).all()

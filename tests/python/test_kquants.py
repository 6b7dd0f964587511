"""GGML K-quants (q4_K, q5_K, q6_K, q8_K) and the 16-bit float rows of Foundry's format table.

The K-quant quantizers must give the same bytes as llama.cpp's quantize_row_q*_K_ref; llama.cpp is
not installable here, so the reference is ggml_kquants_ref.py, a float32-exact NumPy transcription
of that C code written separately from Foundry's C++. f16 / bf16 are checked against NumPy's and
PyTorch's round-to-nearest-even conversions.
"""
import numpy as np
import pytest

import foundry
import ggml_kquants_ref as ref

f32 = np.float32
QK_K = 256
K_FORMATS = {"q4_K": (12, 144), "q5_K": (13, 176), "q6_K": (14, 210), "q8_K": (15, 292)}


def special_blocks(rng):
    """One super-block per case that exercises a branch of the reference code."""
    blocks = []
    b = np.zeros(QK_K, np.float32)
    blocks.append(b)                                           # all zero: zero scales, no NaN
    blocks.append(np.full(QK_K, 1.0, np.float32))              # constant positive: min clamps to 0
    blocks.append(np.full(QK_K, -0.75, np.float32))            # constant negative
    b = (rng.standard_normal(QK_K) * 0.02).astype(np.float32)
    b[17] = 40.0                                               # one outlier: most sub-block scales round to 0
    blocks.append(b)
    b = rng.standard_normal(QK_K).astype(np.float32)
    b[32:64] = 0.0                                             # a zero sub-block inside a live block
    b[128:144] = 0.0
    blocks.append(b)
    blocks.append((rng.integers(-8, 8, QK_K) * f32(0.125)).astype(np.float32))  # values on a grid: ties
    blocks.append(np.full(QK_K, 1e-30, np.float32) * rng.standard_normal(QK_K).astype(np.float32))  # fp16 underflow
    blocks.append((rng.standard_normal(QK_K) * 30000).astype(np.float32))       # near fp16's range
    blocks.append(-np.abs(rng.standard_normal(QK_K)).astype(np.float32))        # all negative
    blocks.append(np.abs(rng.standard_normal(QK_K)).astype(np.float32) + 3)     # all positive, offset
    return np.concatenate(blocks)


def sample(seed):
    rng = np.random.default_rng(seed)
    scale = f32(10.0 ** rng.uniform(-3, 3))
    normal = (rng.standard_normal(4 * QK_K) * scale).astype(np.float32)
    heavy = (rng.standard_t(2, 2 * QK_K)).astype(np.float32)
    return np.concatenate([normal, heavy, special_blocks(rng)])


def quantize_ref(fmt, x):
    return getattr(ref, "quantize_" + fmt)(x)


@pytest.fixture(scope="module")
def rows():
    return [sample(seed) for seed in range(2)]


@pytest.mark.parametrize("fmt", sorted(K_FORMATS))
def test_k_quant_bytes_match_llama_cpp_reference(fmt, rows):
    info = {f[0]: f for f in foundry.quant.formats()}
    name, ggml_type, block, nbytes, dot_format = info[fmt]
    assert (ggml_type, nbytes) == K_FORMATS[fmt] and block == QK_K and dot_format == "q8_K"
    for seed, x in enumerate(rows):
        got = foundry.quant.quantize(x, fmt)
        want = quantize_ref(fmt, x)
        assert len(got) == len(want) == x.size // QK_K * nbytes
        if got != want:
            i = next(i for i in range(len(got)) if got[i] != want[i])
            pytest.fail(f"{fmt} seed {seed}: first differing byte {i} (block {i // nbytes}, offset {i % nbytes})")


@pytest.mark.parametrize("fmt", sorted(K_FORMATS))
def test_k_quant_dequantize_matches_reference_and_round_trips(fmt, rows):
    x = rows[0]
    data = foundry.quant.quantize(x, fmt)
    got = foundry.quant.dequantize(data, fmt, x.size)[0]
    want = getattr(ref, "dequantize_" + fmt)(data, x.size)
    assert np.array_equal(got, want)
    assert np.isfinite(got).all()
    # Round-trip error against each super-block's range: 4-bit ~1/15, 5-bit ~1/31, 6-bit ~1/63 of it.
    tol = {"q4_K": 0.12, "q5_K": 0.06, "q6_K": 0.03, "q8_K": 0.005}[fmt]
    for b in range(x.size // QK_K):
        xb, gb = x[b * QK_K:(b + 1) * QK_K], got[b * QK_K:(b + 1) * QK_K]
        span = float(xb.max() - min(xb.min(), 0)) if fmt in ("q4_K", "q5_K") else float(np.abs(xb).max())
        if (b == 9 and fmt != "q8_K") or span < 1e-20:
            continue  # the outlier block's sub-blocks whose scale rounds to zero, and fp16-underflowed scales,
                      # are meant to lose their values
        assert np.abs(gb - xb).max() <= tol * span + 1e-6, f"{fmt} block {b}"


@pytest.mark.parametrize("fmt", ["q4_K", "q5_K", "q6_K", "q8_K"])
def test_k_quant_dot_with_q8_K(fmt, rows):
    x = rows[1][:6 * QK_K]
    y = np.random.default_rng(3).standard_normal(x.size).astype(np.float32)
    xq, yq = foundry.quant.quantize(x, fmt), foundry.quant.quantize(y, "q8_K")
    assert yq == ref.quantize_q8_K(y)
    exact = float(ref.dequantize_q8_K(yq, y.size).astype(np.float64) @
                  getattr(ref, "dequantize_" + fmt)(xq, x.size).astype(np.float64))
    got = foundry.quant.dot(xq, yq, fmt, x.size)
    scale = float(np.abs(ref.dequantize_q8_K(yq, y.size)) @ np.abs(getattr(ref, "dequantize_" + fmt)(xq, x.size)))
    assert abs(got - exact) <= 1e-5 * scale + 1e-6
    assert abs(got - float(x @ y)) <= 0.1 * float(np.abs(x) @ np.abs(y))


def test_q8_K_block_sums():
    y = np.random.default_rng(5).standard_normal(2 * QK_K).astype(np.float32)
    data = foundry.quant.quantize(y, "q8_K")
    for b in range(2):
        blk = data[b * 292:(b + 1) * 292]
        qs = np.frombuffer(blk[4:260], np.int8).astype(np.int32)
        bsums = np.frombuffer(blk[260:292], np.int16)
        assert (bsums == qs.reshape(16, 16).sum(1)).all()


def test_f16_matches_numpy_rounding():
    x = np.concatenate([np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 100,
                        np.array([65504, 65520, 1e-8, -0.0, 2.0 ** -24, 3 * 2.0 ** -26, np.inf], np.float32)])
    got = foundry.quant.quantize(x, "f16")
    with np.errstate(over="ignore"):
        assert got == x.astype(np.float16).tobytes()
    back = foundry.quant.dequantize(got, "f16", x.size)[0]
    assert np.array_equal(back, np.frombuffer(got, np.float16).astype(np.float32))


def test_bf16_matches_torch_rounding():
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.random.default_rng(1).standard_normal(1000).astype(np.float32) * 1e5,
                        np.array([1.00390625, 1.01171875, -3.0e38, 1e-40, np.inf], np.float32)])
    got = foundry.quant.quantize(x, "bf16")
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    assert got == want
    y = np.random.default_rng(2).standard_normal(x.size).astype(np.float32)
    xb, yb = foundry.quant.quantize(x[:1000], "bf16"), foundry.quant.quantize(y[:1000], "bf16")
    exact = float(torch.from_numpy(x[:1000]).to(torch.bfloat16).double() @ torch.from_numpy(y[:1000]).to(torch.bfloat16).double())
    assert abs(foundry.quant.dot(xb, yb, "bf16", 1000) - exact) <= 1e-6 * abs(exact) + 1e-3


def test_k_quant_bad_arguments():
    with pytest.raises(ValueError, match="not a whole number of 256-value blocks"):
        foundry.quant.quantize(np.zeros(300, np.float32), "q4_K")
    with pytest.raises(ValueError, match="y holds .* a q8_K row"):
        foundry.quant.dot(b"\0" * 144, b"\0" * 34, "q4_K", 256)
    assert foundry.quant.formats()[0][0] == "f16"

"""Weight-only schemes: bitsandbytes' NF4 (with double quantization) and LLM.int8 rows must give
bitsandbytes' codes; the reference is bnb_ref.py, a NumPy transcription of bitsandbytes' CUDA
kernels and Python (bitsandbytes itself needs a GPU build and PyPI, neither reachable here). int4
groups are checked against the definition in docs/quantization.md written with PyTorch ops.
"""
import numpy as np
import pytest

import bnb_ref
import foundry

f32 = np.float32


def weights(seed, shape=(96, 256)):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    w[3, :64] = 0.0                     # an all-zero NF4 block (and part of an int4 group row)
    w[5, 64:128] = 0.7                  # a constant block
    w[7, 5] = 3.0                       # an outlier
    return w


def test_codebooks_are_bitsandbytes():
    assert np.array_equal(foundry.quant.nf4_codebook(), bnb_ref.NF4_CODE)
    assert np.array_equal(foundry.quant.dynamic_map_signed(), bnb_ref.DYNAMIC_MAP_SIGNED)


@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_codes_match_bitsandbytes(double_quant):
    for seed in range(3):
        w = weights(seed)
        got = foundry.quant.quantize_nf4(w, double_quant)
        ref = bnb_ref.quantize_nf4(w, double_quant, method="cuda")
        assert np.array_equal(got["packed"], ref["packed"]), seed
        if double_quant:
            assert got["offset"] == ref["offset"]
            assert np.array_equal(got["absmax_codes"], ref["absmax_q"])
            assert np.array_equal(got["nested_absmax"], ref["nested_absmax"])
        assert np.array_equal(got["absmax"], bnb_ref.dequantize_absmax(ref))
        deq = foundry.quant.dequantize_nf4(got["packed"], got["absmax"], w.size)
        assert np.array_equal(deq, bnb_ref.dequantize_nf4(ref).reshape(-1))
        assert np.abs(deq - w.reshape(-1)).mean() < 0.01


def test_nf4_values_on_decision_thresholds_and_odd_sizes():
    # Each value exactly on a threshold (block absmax 1): the kernel's strict ">" gives the lower code.
    block = np.concatenate([[1.0], bnb_ref.NF4_THRESHOLDS, -bnb_ref.NF4_THRESHOLDS, np.zeros(64 - 31)]).astype(np.float32)
    for x in (block, np.random.default_rng(1).standard_normal(101).astype(np.float32)):  # 101: odd, padded block
        got = foundry.quant.quantize_nf4(x, False)
        ref = bnb_ref.quantize_nf4(x, False, method="cuda")
        assert np.array_equal(got["packed"], ref["packed"]) and np.array_equal(got["absmax"], ref["absmax"])


def test_int8_rows_match_bitsandbytes():
    w = weights(4)
    w[9] = 0.0                          # a zero row: SCB 0, codes 0, no NaN
    w[10, :4] = [62.5 / 127, -62.5 / 127, 1.0, 0.5]  # a half-way tie once scaled
    codes, scb = foundry.quant.quantize_int8_rows(w)
    ref_codes, ref_scb = bnb_ref.quantize_int8_rows(w)
    assert np.array_equal(codes, ref_codes) and np.array_equal(scb, ref_scb)
    deq = foundry.quant.dequantize_int8_rows(codes, scb)
    assert np.array_equal(deq, bnb_ref.dequantize_int8_rows(ref_codes, ref_scb))
    assert np.isfinite(deq).all()


def int4_reference(w, group, symmetric):
    """docs/quantization.md's int4 groups in PyTorch: fp16 scale, round half to even."""
    import torch
    x = torch.from_numpy(w).reshape(-1, group)
    lo = torch.clamp(x.min(1, keepdim=True).values, max=0.0)
    hi = torch.clamp(x.max(1, keepdim=True).values, min=0.0)
    if symmetric:
        s = (torch.maximum(-lo, hi) / 7.0).half().float()
    else:
        s = ((hi - lo) / 15.0).half().float()
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    zero = torch.full_like(s, 8.0) if symmetric else torch.clamp(torch.round(-lo * inv), 0, 15)
    u = torch.clamp(torch.round(x * inv) + zero, 0, 15)
    return u.to(torch.uint8).reshape(-1).numpy(), ((u - zero) * s).reshape(w.shape).numpy(), s.half().reshape(-1).numpy()


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_groups_follow_their_definition(group, symmetric):
    pytest.importorskip("torch")
    w = weights(group)
    packed, scales, zeros, deq = foundry.quant.quantize_int4_groups(w, group, symmetric)
    u, want, s = int4_reference(w, group, symmetric)
    assert np.array_equal(packed & 0x0F, u[0::2]) and np.array_equal(packed >> 4, u[1::2])
    assert np.array_equal(scales, s.view(np.uint16))
    assert np.array_equal(deq, want)
    assert (len(zeros) == 0) == symmetric
    err = np.abs(deq - w).reshape(-1, group).max(1)
    step = s.astype(np.float32)
    assert (err <= step + 1e-6).all()  # a step at most: the clamped extreme level, or the rounded zero point


def test_nf4_table_row_is_blocks_of_absmax_and_codes():
    w = weights(7)
    data = foundry.quant.quantize(w, "nf4")
    ref = bnb_ref.quantize_nf4(w, False, method="cuda")
    blocks = np.frombuffer(data, np.uint8).reshape(-1, 36)
    assert np.array_equal(blocks[:, :4].copy().view(np.float32).reshape(-1), ref["absmax"])
    codes = np.stack([ref["packed"] >> 4, ref["packed"] & 0x0F], 1).reshape(-1, 64)  # bitsandbytes' order
    assert np.array_equal(blocks[:, 4:] & 0x0F, codes[:, :32]) and np.array_equal(blocks[:, 4:] >> 4, codes[:, 32:])
    assert np.array_equal(foundry.quant.dequantize(data, "nf4", 256).reshape(-1), bnb_ref.dequantize_nf4(ref).reshape(-1))
    y = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    yq = foundry.quant.quantize(y, "q8_0")
    row = data[:256 // 64 * 36]
    exact = float(bnb_ref.dequantize_nf4(ref).reshape(-1)[:256].astype(np.float64) @
                  foundry.quant.dequantize(yq, "q8_0", 256)[0].astype(np.float64))
    assert abs(foundry.quant.dot(row, yq, "nf4", 256) - exact) <= 1e-5 * (1 + abs(exact))


def test_bad_arguments():
    with pytest.raises(ValueError, match="group size 48"):
        foundry.quant.quantize_int4_groups(np.zeros((2, 96), np.float32), 48, True)
    with pytest.raises(ValueError, match="do not describe"):
        foundry.quant.dequantize_nf4(np.zeros(3, np.uint8), np.zeros(1, np.float32), 64)

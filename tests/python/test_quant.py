"""GGML block formats: Foundry's quantizers must give the same bytes as llama.cpp's reference
quantizers (ggml-quants.c quantize_row_*_ref). llama.cpp itself is not installable here, so the
reference is a float32-exact NumPy transcription of that C code (IEEE float32 arithmetic,
C's truncating float->int8 casts, roundf's half-away-from-zero, fp16 scales rounded to nearest
even), checked byte for byte; dequantization and the q8_0 dot products are checked against it too.
"""
import struct

import numpy as np
import pytest

import foundry

f32 = np.float32
QK = 32


def fp16_bytes(v):
    with np.errstate(over="ignore"):  # out-of-range scales become inf, as in C
        return np.array([v], dtype=np.float32).astype(np.float16).tobytes()


def fp16_val(v):
    return f32(np.array([v], dtype=np.float32).astype(np.float16)[0])


def c_int8(v):
    """(int8_t)float: truncation toward zero (the values stay in range in these formats)."""
    return int(np.trunc(v))


def roundf(v):
    r = np.trunc(v)
    return int(r + np.sign(v) * (abs(v - r) >= f32(0.5)))


def signed_absmax(x):
    amax, mx = f32(0), f32(0)
    for v in x:
        if amax < abs(v):
            amax, mx = abs(v), v
    return mx


def ref_q4_0(x):
    out = b""
    for b in x.reshape(-1, QK):
        d = f32(signed_absmax(b) / f32(-8))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        qs = bytearray(16)
        for j in range(16):
            q0 = min(15, c_int8(f32(f32(b[j] * idv) + f32(8.5))))
            q1 = min(15, c_int8(f32(f32(b[j + 16] * idv) + f32(8.5))))
            qs[j] = q0 | (q1 << 4)
        out += fp16_bytes(d) + bytes(qs)
    return out


def ref_q4_1(x):
    out = b""
    for b in x.reshape(-1, QK):
        mn, mx = f32(b.min()), f32(b.max())
        d = f32(f32(mx - mn) / f32(15))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        qs = bytearray(16)
        for j in range(16):
            q0 = min(15, c_int8(f32(f32(f32(b[j] - mn) * idv) + f32(0.5))))
            q1 = min(15, c_int8(f32(f32(f32(b[j + 16] - mn) * idv) + f32(0.5))))
            qs[j] = q0 | (q1 << 4)
        out += fp16_bytes(d) + fp16_bytes(mn) + bytes(qs)
    return out


def ref_q5(x, asym):
    out = b""
    for b in x.reshape(-1, QK):
        if asym:
            mn, mx = f32(b.min()), f32(b.max())
            d = f32(f32(mx - mn) / f32(31))
        else:
            d = f32(signed_absmax(b) / f32(-16))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        qs, qh = bytearray(16), 0
        for j in range(16):
            if asym:
                q0 = int(f32(f32(f32(b[j] - mn) * idv) + f32(0.5)))
                q1 = int(f32(f32(f32(b[j + 16] - mn) * idv) + f32(0.5)))
            else:
                q0 = min(31, c_int8(f32(f32(b[j] * idv) + f32(16.5))))
                q1 = min(31, c_int8(f32(f32(b[j + 16] * idv) + f32(16.5))))
            qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4)
            qh |= ((q0 & 0x10) >> 4) << j
            qh |= ((q1 & 0x10) >> 4) << (j + 16)
        out += fp16_bytes(d) + (fp16_bytes(mn) if asym else b"") + struct.pack("<I", qh) + bytes(qs)
    return out


def ref_q8_0(x):
    out = b""
    for b in x.reshape(-1, QK):
        amax = f32(np.abs(b).max())
        d = f32(amax / f32(127))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        out += fp16_bytes(d) + bytes(np.array([roundf(f32(v * idv)) for v in b], dtype=np.int8).tobytes())
    return out


REF = {"q4_0": ref_q4_0, "q4_1": ref_q4_1, "q5_0": lambda x: ref_q5(x, False), "q5_1": lambda x: ref_q5(x, True),
       "q8_0": ref_q8_0}


def ref_levels(data, fmt):
    """Per value: integer level q and per-block (d, m) so that value = q * d + m, from the bytes."""
    size = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q8_0": 34}[fmt]
    qs_all, ds, ms = [], [], []
    for o in range(0, len(data), size):
        blk = data[o:o + size]
        d = np.frombuffer(blk[:2], np.float16)[0].astype(np.float32)
        m = np.frombuffer(blk[2:4], np.float16)[0].astype(np.float32) if fmt in ("q4_1", "q5_1") else f32(0)
        rest = blk[4:] if fmt in ("q4_1", "q5_1") else blk[2:]
        if fmt == "q8_0":
            q = np.frombuffer(rest, np.int8).astype(np.int64)
        else:
            qh = 0
            if fmt.startswith("q5"):
                qh, rest = struct.unpack("<I", rest[:4])[0], rest[4:]
            nib = np.frombuffer(rest, np.uint8)
            lo, hi = (nib & 0x0F).astype(np.int64), (nib >> 4).astype(np.int64)
            if fmt.startswith("q5"):
                lo |= np.array([((qh >> j) & 1) << 4 for j in range(16)])
                hi |= np.array([((qh >> (j + 16)) & 1) << 4 for j in range(16)])
            q = np.concatenate([lo, hi])
            if fmt == "q4_0":
                q -= 8
            if fmt == "q5_0":
                q -= 16
        qs_all.append(q)
        ds.append(d)
        ms.append(m)
    return np.stack(qs_all), np.array(ds, np.float32), np.array(ms, np.float32)


def sample_rows(seed):
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal(256).astype(np.float32) * f32(rng.uniform(0.01, 10))]
    special = np.zeros(256, np.float32)
    special[32:64] = 1.0                    # a constant block: max == min for the asymmetric formats
    special[64:96] = -np.linspace(0, 3, 32)  # negative extreme: the symmetric scale is negative-of-negative
    special[96] = 5.0
    special[97] = -5.0                       # a tie of |max|: the first one wins
    special[128:160] = rng.integers(-8, 8, 32) * f32(0.25)  # values exactly on the grid (.5 ties)
    special[160:192] = 1e-30                 # tiny scales (fp16 underflow of d)
    special[192:224] = rng.standard_normal(32).astype(np.float32) * f32(60000)  # near fp16's range
    special[224:256] = np.arange(32) - f32(15.5)  # exact .5 ties once scaled (q8_0: d = 1) ...
    special[224] = 127.0                          # ... rounded away from zero, not to even
    rows.append(special)
    return np.stack(rows)


@pytest.mark.parametrize("fmt", sorted(REF))
def test_quantize_matches_llama_cpp_reference_bytes(fmt):
    names = {f[0]: f for f in foundry.quant.formats()}
    _, ggml_type, block, nbytes, dot_format = names[fmt]
    assert dot_format == "q8_0"
    assert (ggml_type, block) == ({"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}[fmt], 32)
    for seed in range(3):
        x = sample_rows(seed)
        got = foundry.quant.quantize(x, fmt)
        assert len(got) == x.size // 32 * nbytes
        want = b"".join(REF[fmt](row) for row in x)
        assert got == want, f"{fmt} seed {seed}: first differing byte {next(i for i in range(len(got)) if got[i] != want[i])}"


@pytest.mark.parametrize("fmt", sorted(REF))
def test_dequantize_and_dot_match_reference(fmt):
    x = sample_rows(7)[0:1]
    y = np.random.default_rng(8).standard_normal((1, 256)).astype(np.float32)
    data = foundry.quant.quantize(x, fmt)
    q, d, m = ref_levels(data, fmt)
    want = (q.astype(np.float32) * d[:, None] + m[:, None]).reshape(1, -1)
    got = foundry.quant.dequantize(data, fmt, 256)
    assert np.array_equal(got, want)
    # Round trip error within half a step per block (a whole step for the symmetric formats, whose
    # largest level on the side opposite the extreme is clamped), plus fp16 scale rounding.
    step = np.repeat(np.abs(d), 32) * (1.0 if fmt in ("q4_0", "q5_0") else 0.5)
    assert (np.abs(got[0] - x[0]) <= step + 1e-3 * np.abs(x[0]) + 1e-6).all()
    yq = foundry.quant.quantize(y, "q8_0")
    qy, dy, _ = ref_levels(yq, "q8_0")
    exact = float(sum((q[i] @ qy[i]) * float(d[i]) * float(dy[i]) + float(m[i]) * float(dy[i]) * qy[i].sum()
                      for i in range(len(d))))
    dot = foundry.quant.dot(data, yq, fmt, 256)
    assert abs(dot - exact) <= 1e-5 * (1 + abs(exact))
    # ... and it approximates the float dot product.
    assert abs(dot - float(x[0] @ y[0])) <= 0.1 * float(np.abs(x[0]) @ np.abs(y[0])) + 1e-6


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="unknown block format 'q3_0'"):
        foundry.quant.quantize(np.zeros(32, np.float32), "q3_0")
    with pytest.raises(ValueError, match="not a whole number of 32-value blocks"):
        foundry.quant.quantize(np.zeros(33, np.float32), "q8_0")
    with pytest.raises(ValueError, match="not whole rows"):
        foundry.quant.dequantize(b"\0" * 35, "q8_0", 32)
    with pytest.raises(ValueError, match="y holds"):
        foundry.quant.dot(b"\0" * 18, b"\0" * 10, "q4_0", 32)

"""Float32-exact NumPy transcription of llama.cpp's reference (scalar) K-quant code.

Transcribed from
    repository: ggml-org/llama.cpp
    path:       ggml/src/ggml-quants.c   (block layouts: ggml/src/ggml-common.h)
    commit:     01243c587feceaa5d6a6c2305535ef2f549c48b8
functions quantize_row_{q4_K,q5_K,q6_K,q8_K}_ref, dequantize_row_{q4_K,q5_K,q6_K,q8_K} and their
helpers nearest_int, make_qx_quants, make_qkx2_quants, get_scale_min_k4 and GROUP_MAX_EPS
(= 1e-15f), with QK_K = 256.  This is the version where quantize_row_q4_K_ref weights each
element by av_x + fabsf(x) (av_x = sqrtf(sum_x2/32)) and calls
make_qkx2_quants(32, 15, ..., -1.f, 0.1f, 20, false); q5_K uses (32, 31, ..., -0.5f, 0.1f, 15,
false); q6_K uses make_qx_quants(16, 32, x + 16*ib, L + 16*ib, 1, NULL); q8_K uses
iscale = -127.f/max.

Block layouts (little endian, no padding):
    q4_K: fp16 d, fp16 dmin, uint8 scales[12], uint8 qs[128]              = 144 bytes
    q5_K: fp16 d, fp16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128] = 176 bytes
    q6_K: uint8 ql[128], uint8 qh[64], int8 scales[16], fp16 d             = 210 bytes
    q8_K: float32 d, int8 qs[256], int16 bsums[16]                         = 292 bytes

Exactness conventions (the goal is byte-identical output to the C code compiled without FMA
contraction, with SSE float arithmetic, i.e. FLT_EVAL_METHOD == 0):
  * every float operation is an IEEE float32 operation, in the C evaluation order
    (``a*b*c`` is ``(a*b)*c``; ``a*b + c - d`` is ``((a*b)+c)-d``); constants are np.float32,
    never Python floats (NumPy 1.x promotes np.float32 (op) Python float to float64);
  * elementwise expressions are vectorised (each element gets exactly the roundings of the C
    expression); reductions are never done with np.sum (pairwise order) but with
    np.add.accumulate, which is a strictly sequential left-to-right float32 loop, i.e. the C
    ``for (...) s += t[i];`` order (see _seqsum for the handling of the starting 0);
  * nearest_int is the C bit trick (fval + 12582912.f, reinterpret, & 0x7fffff, - 0x400000),
    emulated bit for bit, so it rounds half to even for |x| < 2^22 and gives the same garbage as
    C beyond that (the C assert is compiled out in release builds);
  * first-occurrence semantics of ``if (x[i] < min)`` / ``if (ax > amax)`` are reproduced with
    np.argmin / np.argmax (which return the first index of the extreme value);
  * int -> uint8_t / int8_t / int16_t conversions wrap modulo 2^8 / 2^16 as on every target
    ggml supports;
  * GGML_FP32_TO_FP16 is round-to-nearest-even (F16C or ggml's generic bit version), done as
    float32 -> float16 by NumPy; overflow gives inf as in C.

Places where C leaves something unspecified / choices made here:
  * quantize_row_q8_K_ref leaves bsums[] unwritten for an all-zero block (it only sets d = 0 and
    zeroes qs); this transcription writes zeros there.  A byte-for-byte comparison must
    zero-initialise the C destination buffer (or ignore bsums of all-zero blocks).
  * NaN input is out of scope (argmin/argmax treat NaN differently from the C comparisons).
"""
import struct

import numpy as np

QK_K = 256
K_SCALE_SIZE = 12
BLOCK_BYTES = {"q4_K": 144, "q5_K": 176, "q6_K": 210, "q8_K": 292}

_f32 = np.float32
_ZERO = _f32(0.0)
_ONE = _f32(1.0)
_MAGIC = _f32(12582912.0)           # 1.5 * 2^23
GROUP_MAX_EPS = _f32(1e-15)         # #define GROUP_MAX_EPS 1e-15f


# ----------------------------------------------------------------------------------- helpers

def _as_f32_rows(x):
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(-1))
    if x.size % QK_K != 0:
        raise ValueError(f"length {x.size} is not a multiple of {QK_K}")
    return x


def _seqsum(t):
    """C: ``float s = 0; for (i = 0; i < n; ++i) s += t[i];`` in float32.

    np.add.accumulate is a sequential left-to-right float32 loop.  Starting from t[0] instead of
    0 only changes the sign of an all-zero result (C: 0 + -0 = +0); adding 0 at the end restores
    exactly the C value (x + 0 == x for every nonzero x, and +-0 + 0 == +0)."""
    return _ZERO + np.add.accumulate(t, dtype=np.float32)[-1]


def _seqsum_from_first(t):
    """C: ``float s = t[0]; for (i = 1; i < n; ++i) s += t[i];`` in float32."""
    return np.add.accumulate(t, dtype=np.float32)[-1]


def nearest_int(fval):
    """static inline int nearest_int(float fval), for one np.float32 value."""
    assert isinstance(fval, np.float32), type(fval)
    val = fval + _MAGIC
    i = int(val.view(np.int32))
    return (i & 0x007FFFFF) - 0x00400000


def _nearest_int_arr(a):
    """nearest_int applied elementwise to a float32 array; returns int64 array."""
    assert a.dtype == np.float32, a.dtype
    val = a + _MAGIC
    return (val.view(np.int32).astype(np.int64) & 0x007FFFFF) - 0x00400000


def _u8(v):
    return int(v) & 0xFF


def _i8(v):
    return ((int(v) + 128) & 0xFF) - 128


def _fp16_bits(v):
    """GGML_FP32_TO_FP16: float32 -> IEEE half, round to nearest even; returns the uint16 bits."""
    return int(np.array([v], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def _fp16_to_f32(bits):
    """GGML_FP16_TO_FP32 (exact)."""
    return _f32(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def make_qx_quants(n, nmax, x, rmse_type, qw=None):
    """static float make_qx_quants(int n, int nmax, const float * x, int8_t * L, int rmse_type,
    const float * qw).  Returns (scale, L) with L an int64 array of the int8 values (0..2*nmax-1).
    """
    assert x.dtype == np.float32 and x.size == n
    # float max = 0; float amax = 0; for: ax = fabsf(x[i]); if (ax > amax) { amax = ax; max = x[i]; }
    ax = np.abs(x)
    imax = int(np.argmax(ax))
    amax = ax[imax] if ax[imax] > _ZERO else _ZERO
    mx = x[imax] if ax[imax] > _ZERO else _ZERO
    if amax < GROUP_MAX_EPS:                      # all zero
        return _ZERO, np.zeros(n, dtype=np.int64)
    fnmax = _f32(nmax)
    iscale = _f32(-nmax) / mx                     # -nmax / max
    if rmse_type == 0:
        l = _nearest_int_arr(iscale * x)
        L = nmax + np.maximum(-nmax, np.minimum(nmax - 1, l))
        return _ONE / iscale, L
    return_early = False
    if rmse_type < 0:
        rmse_type = -rmse_type
        return_early = True
    if qw is not None:
        w = np.asarray(qw, dtype=np.float32)
    elif rmse_type == 1:
        w = x * x
    elif rmse_type == 2:
        w = np.ones(n, dtype=np.float32)
    elif rmse_type == 3:
        w = np.abs(x)
    else:
        w = np.sqrt(np.abs(x))

    l = _nearest_int_arr(iscale * x)
    l = np.maximum(-nmax, np.minimum(nmax - 1, l))
    L = l + nmax
    lf = l.astype(np.float32)
    sumlx = _seqsum(w * x * lf)                   # sumlx += w*x[i]*l
    suml2 = _seqsum(w * lf * lf)                  # suml2 += w*l*l
    scale = sumlx / suml2 if suml2 != _ZERO else _ZERO
    if return_early:
        if suml2 > _ZERO:
            return _f32(0.5) * (scale + _ONE / iscale), L
        return _ONE / iscale, L
    best = scale * sumlx
    for is_ in range(-9, 10):
        if is_ == 0:
            continue
        iscale = -(fnmax + _f32(0.1) * _f32(is_)) / mx     # -(nmax + 0.1f*is) / max
        l = _nearest_int_arr(iscale * x)
        l = np.maximum(-nmax, np.minimum(nmax - 1, l))
        lf = l.astype(np.float32)
        sumlx = _seqsum(w * x * lf)
        suml2 = _seqsum(w * lf * lf)
        if suml2 > _ZERO and sumlx * sumlx > best * suml2:
            L = nmax + l
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, L


def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep, use_mad):
    """static float make_qkx2_quants(int n, int nmax, const float * x, const float * weights,
    uint8_t * L, float * the_min, uint8_t * Laux, float rmin, float rdelta, int nstep,
    bool use_mad).  Returns (scale, the_min, L) with L an int64 array in [0, nmax]."""
    assert x.dtype == np.float32 and weights.dtype == np.float32 and x.size == n
    rmin = _f32(rmin)
    rdelta = _f32(rdelta)
    # min = x[0]; max = x[0]; if (x[i] < min) min = x[i]; if (x[i] > max) max = x[i];
    mn = x[int(np.argmin(x))]
    mx = x[int(np.argmax(x))]
    sum_w = _seqsum_from_first(weights)           # sum_w = weights[0]; sum_w += w
    sum_x = _seqsum_from_first(weights * x)       # sum_x = sum_w * x[0]; sum_x += w * x[i]
    if mn > _ZERO:
        mn = _ZERO
    if mx == mn:
        return _ZERO, -mn, np.zeros(n, dtype=np.int64)
    fnmax = _f32(nmax)
    iscale = fnmax / (mx - mn)
    scale = _ONE / iscale
    l = _nearest_int_arr(iscale * (x - mn))
    L = np.maximum(0, np.minimum(nmax, l))
    diff = scale * L.astype(np.float32) + mn - x
    diff = np.abs(diff) if use_mad else diff * diff
    best_error = _seqsum(weights * diff)
    if nstep < 1:
        return scale, -mn, L
    for is_ in range(nstep + 1):
        # NB: uses the current (possibly updated) min, exactly as the C loop does
        iscale = (rmin + rdelta * _f32(is_) + fnmax) / (mx - mn)
        l = _nearest_int_arr(iscale * (x - mn))
        Laux = np.maximum(0, np.minimum(nmax, l))
        lf = Laux.astype(np.float32)
        sum_l = _seqsum(weights * lf)             # sum_l  += w*l
        sum_l2 = _seqsum(weights * lf * lf)       # sum_l2 += w*l*l
        sum_xl = _seqsum(weights * lf * x)        # sum_xl += w*l*x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > _ZERO:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > _ZERO:
                this_min = _ZERO
                this_scale = sum_xl / sum_l2
            diff = this_scale * lf + this_min - x
            diff = np.abs(diff) if use_mad else diff * diff
            cur_error = _seqsum(weights * diff)
            if cur_error < best_error:
                L = Laux
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn, L


def get_scale_min_k4(j, q):
    """static inline void get_scale_min_k4(int j, const uint8_t * q, uint8_t * d, uint8_t * m)"""
    if j < 4:
        d = q[j] & 63
        m = q[j + 4] & 63
    else:
        d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)
        m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4)
    return d, m


# ------------------------------------------------------------------------------ Q4_K / Q5_K

def _quantize_block_qk_minmax(x, nmax, rmin, rdelta, nstep):
    """Shared part of quantize_row_q4_K_ref / quantize_row_q5_K_ref for one 256-value block.
    Returns (d_bits, dmin_bits, scales[12] bytearray, L[256] int64)."""
    L = np.zeros(QK_K, dtype=np.int64)
    scales = [None] * (QK_K // 32)
    mins = [None] * (QK_K // 32)
    max_scale = _ZERO
    max_min = _ZERO
    f32_32 = _f32(32)
    for j in range(QK_K // 32):
        xb = x[32 * j:32 * j + 32]
        sum_x2 = _seqsum(xb * xb)
        av_x = np.sqrt(sum_x2 / f32_32)            # sqrtf(sum_x2/32)
        weights = av_x + np.abs(xb)
        sc, mn, Lb = make_qkx2_quants(32, nmax, xb, weights, rmin, rdelta, nstep, False)
        L[32 * j:32 * j + 32] = Lb
        scales[j] = sc
        mins[j] = mn
        if sc > max_scale:
            max_scale = sc
        if mn > max_min:
            max_min = mn

    f63 = _f32(63)
    inv_scale = f63 / max_scale if max_scale > _ZERO else _ZERO
    inv_min = f63 / max_min if max_min > _ZERO else _ZERO
    sb = bytearray(K_SCALE_SIZE)
    for j in range(QK_K // 32):
        ls = _u8(nearest_int(inv_scale * scales[j]))    # uint8_t ls = nearest_int(...)
        lm = _u8(nearest_int(inv_min * mins[j]))
        ls = min(63, ls)
        lm = min(63, lm)
        if j < 4:
            sb[j] = ls
            sb[j + 4] = lm
        else:
            sb[j + 4] = ((ls & 0xF) | ((lm & 0xF) << 4)) & 0xFF
            sb[j - 4] |= ((ls >> 4) << 6) & 0xFF
            sb[j - 0] |= ((lm >> 4) << 6) & 0xFF
    d_bits = _fp16_bits(max_scale / f63)
    dmin_bits = _fp16_bits(max_min / f63)

    d_all = _fp16_to_f32(d_bits)
    dmin_all = _fp16_to_f32(dmin_bits)
    for j in range(QK_K // 32):
        sc, m = get_scale_min_k4(j, sb)
        d = d_all * _f32(sc)
        if d == _ZERO:                                 # if (!d) continue;  (L keeps make_qkx2's)
            continue
        dm = dmin_all * _f32(m)
        xb = x[32 * j:32 * j + 32]
        l = _nearest_int_arr((xb + dm) / d)
        L[32 * j:32 * j + 32] = np.maximum(0, np.minimum(nmax, l))
    return d_bits, dmin_bits, sb, L


def _quantize_blocks(x, quantize_block):
    """Every 256-value block of the row through `quantize_block`, concatenated."""
    x = _as_f32_rows(x)
    with np.errstate(all="ignore"):
        return b"".join(quantize_block(x[i * QK_K:(i + 1) * QK_K]) for i in range(x.size // QK_K))


def _quantize_block_q4_K(x):
    d_bits, dmin_bits, sb, L = _quantize_block_qk_minmax(x, 15, -1.0, 0.1, 20)
    qs = np.empty(QK_K // 2, dtype=np.uint8)
    for j in range(0, QK_K, 64):
        qs[j // 2:j // 2 + 32] = (L[j:j + 32] | (L[j + 32:j + 64] << 4)) & 0xFF
    return struct.pack("<HH", d_bits, dmin_bits) + bytes(sb) + qs.tobytes()


def _quantize_block_q5_K(x):
    d_bits, dmin_bits, sb, L = _quantize_block_qk_minmax(x, 31, -0.5, 0.1, 15)
    qh = np.zeros(QK_K // 8, dtype=np.int64)
    ql = np.empty(QK_K // 2, dtype=np.uint8)
    m1, m2 = 1, 2
    for n in range(0, QK_K, 64):
        l1 = L[n:n + 32].copy()
        hi1 = l1 > 15
        l1[hi1] -= 16
        qh[hi1] |= m1
        l2 = L[n + 32:n + 64].copy()
        hi2 = l2 > 15
        l2[hi2] -= 16
        qh[hi2] |= m2
        ql[n // 2:n // 2 + 32] = (l1 | (l2 << 4)) & 0xFF
        m1 = (m1 << 2) & 0xFF
        m2 = (m2 << 2) & 0xFF
    return (struct.pack("<HH", d_bits, dmin_bits) + bytes(sb)
            + qh.astype(np.uint8).tobytes() + ql.tobytes())


def quantize_q4_K(x):
    """quantize_row_q4_K_ref: float32[k] (k % 256 == 0) -> bytes (144 per block)."""
    return _quantize_blocks(x, _quantize_block_q4_K)


def quantize_q5_K(x):
    """quantize_row_q5_K_ref: float32[k] (k % 256 == 0) -> bytes (176 per block)."""
    return _quantize_blocks(x, _quantize_block_q5_K)


def _check_data(data, n, fmt):
    if n % QK_K != 0:
        raise ValueError(f"n={n} is not a multiple of {QK_K}")
    nb = n // QK_K
    if len(data) < nb * BLOCK_BYTES[fmt]:
        raise ValueError(f"{fmt}: need {nb * BLOCK_BYTES[fmt]} bytes, got {len(data)}")
    return np.frombuffer(bytes(data[:nb * BLOCK_BYTES[fmt]]), dtype=np.uint8).reshape(
        nb, BLOCK_BYTES[fmt])


def _scale_min_arrays(sb):
    sc = np.empty(8, dtype=np.float32)
    m = np.empty(8, dtype=np.float32)
    for j in range(8):
        a, b = get_scale_min_k4(j, sb)
        sc[j] = a
        m[j] = b
    return sc, m


def dequantize_q4_K(data, n):
    """dequantize_row_q4_K: bytes -> float32[n]."""
    blocks = _check_data(data, n, "q4_K")
    y = np.empty(n, dtype=np.float32)
    with np.errstate(all="ignore"):
        for i, blk in enumerate(blocks):
            d = _fp16_to_f32(int(blk[0]) | (int(blk[1]) << 8))
            mn = _fp16_to_f32(int(blk[2]) | (int(blk[3]) << 8))
            sb = [int(v) for v in blk[4:16]]
            qs = blk[16:144]
            sc, m = _scale_min_arrays(sb)
            dl = d * sc                               # d1 = d * sc   (per sub-block)
            ml = mn * m                               # m1 = min * m
            yb = y[i * QK_K:(i + 1) * QK_K]
            for c in range(4):                        # j = 0, 64, 128, 192; is = 2c
                q = qs[32 * c:32 * c + 32]
                lo = (q & 0xF).astype(np.float32)
                hi = (q >> 4).astype(np.float32)
                yb[64 * c:64 * c + 32] = dl[2 * c] * lo - ml[2 * c]
                yb[64 * c + 32:64 * c + 64] = dl[2 * c + 1] * hi - ml[2 * c + 1]
    return y


def dequantize_q5_K(data, n):
    """dequantize_row_q5_K: bytes -> float32[n]."""
    blocks = _check_data(data, n, "q5_K")
    y = np.empty(n, dtype=np.float32)
    with np.errstate(all="ignore"):
        for i, blk in enumerate(blocks):
            d = _fp16_to_f32(int(blk[0]) | (int(blk[1]) << 8))
            mn = _fp16_to_f32(int(blk[2]) | (int(blk[3]) << 8))
            sb = [int(v) for v in blk[4:16]]
            qh = blk[16:48]
            ql = blk[48:176]
            sc, m = _scale_min_arrays(sb)
            dl = d * sc
            ml = mn * m
            yb = y[i * QK_K:(i + 1) * QK_K]
            u1, u2 = 1, 2
            for c in range(4):
                q = ql[32 * c:32 * c + 32]
                lo = ((q & 0xF) + np.where(qh & u1, 16, 0)).astype(np.float32)
                hi = ((q >> 4) + np.where(qh & u2, 16, 0)).astype(np.float32)
                yb[64 * c:64 * c + 32] = dl[2 * c] * lo - ml[2 * c]
                yb[64 * c + 32:64 * c + 64] = dl[2 * c + 1] * hi - ml[2 * c + 1]
                u1 <<= 2
                u2 <<= 2
    return y


# ------------------------------------------------------------------------------------- Q6_K

def _quantize_block_q6_K(x):
    L = np.zeros(QK_K, dtype=np.int64)
    scales = [None] * (QK_K // 16)
    max_scale = _ZERO
    max_abs_scale = _ZERO
    for ib in range(QK_K // 16):
        scale, Lb = make_qx_quants(16, 32, x[16 * ib:16 * ib + 16], 1, None)
        L[16 * ib:16 * ib + 16] = Lb
        scales[ib] = scale
        abs_scale = abs(scale)
        if abs_scale > max_abs_scale:
            max_abs_scale = abs_scale
            max_scale = scale
    if max_abs_scale < GROUP_MAX_EPS:
        # memset(&y[i], 0, sizeof(block_q6_K)); y[i].d = GGML_FP32_TO_FP16(0.f);
        return bytes(BLOCK_BYTES["q6_K"])

    iscale = _f32(-128) / max_scale
    d_bits = _fp16_bits(_ONE / iscale)
    sc8 = [_i8(min(127, nearest_int(iscale * scales[ib]))) for ib in range(QK_K // 16)]

    d_all = _fp16_to_f32(d_bits)
    for j in range(QK_K // 16):
        d = d_all * _f32(sc8[j])
        if d == _ZERO:                                 # if (!d) continue;  (L keeps make_qx's)
            continue
        l = _nearest_int_arr(x[16 * j:16 * j + 16] / d)
        L[16 * j:16 * j + 16] = np.maximum(-32, np.minimum(31, l)) + 32

    ql = np.empty(QK_K // 2, dtype=np.int64)
    qh = np.empty(QK_K // 4, dtype=np.int64)
    for j in range(0, QK_K, 128):
        La = L[j:j + 32]
        Lb = L[j + 32:j + 64]
        Lc = L[j + 64:j + 96]
        Ld = L[j + 96:j + 128]
        o = j // 2
        ql[o:o + 32] = (La & 0xF) | ((Lc & 0xF) << 4)
        ql[o + 32:o + 64] = (Lb & 0xF) | ((Ld & 0xF) << 4)
        h = j // 4
        qh[h:h + 32] = (La >> 4) | ((Lb >> 4) << 2) | ((Lc >> 4) << 4) | ((Ld >> 4) << 6)
    return ((ql & 0xFF).astype(np.uint8).tobytes() + (qh & 0xFF).astype(np.uint8).tobytes()
            + np.array(sc8, dtype=np.int8).tobytes() + struct.pack("<H", d_bits))


def quantize_q6_K(x):
    """quantize_row_q6_K_ref: float32[k] (k % 256 == 0) -> bytes (210 per block)."""
    return _quantize_blocks(x, _quantize_block_q6_K)


def dequantize_q6_K(data, n):
    """dequantize_row_q6_K: bytes -> float32[n]."""
    blocks = _check_data(data, n, "q6_K")
    y = np.empty(n, dtype=np.float32)
    with np.errstate(all="ignore"):
        for i, blk in enumerate(blocks):
            ql = blk[0:128].astype(np.int64)
            qh = blk[128:192].astype(np.int64)
            sc = blk[192:208].view(np.int8).astype(np.float32)
            d = _fp16_to_f32(int(blk[208]) | (int(blk[209]) << 8))
            q = np.empty(QK_K, dtype=np.int64)
            for c in range(2):                         # n = 0, 128
                a = ql[64 * c:64 * c + 32]
                b = ql[64 * c + 32:64 * c + 64]
                h = qh[32 * c:32 * c + 32]
                o = 128 * c
                q[o:o + 32] = ((a & 0xF) | (((h >> 0) & 3) << 4)) - 32
                q[o + 32:o + 64] = ((b & 0xF) | (((h >> 2) & 3) << 4)) - 32
                q[o + 64:o + 96] = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32
                q[o + 96:o + 128] = ((b >> 4) | (((h >> 6) & 3) << 4)) - 32
            ds = np.repeat(d * sc, 16)                # value k uses sc[k/16]; d * sc[is]
            y[i * QK_K:(i + 1) * QK_K] = ds * q.astype(np.float32)   # (d*sc)*q
    return y


# ------------------------------------------------------------------------------------- Q8_K

def _quantize_block_q8_K(x):
    ax = np.abs(x)
    imax = int(np.argmax(ax))                          # first index with the largest |x|
    amax = ax[imax]
    if amax == _ZERO:                                  # if (!amax)
        # C sets d = 0 and zeroes qs, leaving bsums unwritten; zeros are written here.
        return bytes(BLOCK_BYTES["q8_K"])
    mx = x[imax]
    iscale = _f32(-127) / mx
    v = _nearest_int_arr(iscale * x)
    v = np.minimum(127, v)
    qs = ((v + 128) & 0xFF) - 128                      # int -> int8_t
    bsums = qs.reshape(QK_K // 16, 16).sum(axis=1)    # integer sums: order irrelevant
    bsums = ((bsums + 32768) & 0xFFFF) - 32768         # int -> int16_t
    d = _ONE / iscale
    return (np.array([d], dtype="<f4").tobytes() + qs.astype(np.int8).tobytes()
            + bsums.astype("<i2").tobytes())


def quantize_q8_K(x):
    """quantize_row_q8_K_ref: float32[k] (k % 256 == 0) -> bytes (292 per block)."""
    return _quantize_blocks(x, _quantize_block_q8_K)


def dequantize_q8_K(data, n):
    """dequantize_row_q8_K: bytes -> float32[n]."""
    blocks = _check_data(data, n, "q8_K")
    y = np.empty(n, dtype=np.float32)
    with np.errstate(all="ignore"):
        for i, blk in enumerate(blocks):
            d = blk[0:4].view("<f4")[0].astype(np.float32)
            qs = blk[4:260].view(np.int8).astype(np.float32)
            y[i * QK_K:(i + 1) * QK_K] = d * qs
    return y


__all__ = [
    "BLOCK_BYTES", "QK_K", "GROUP_MAX_EPS",
    "quantize_q4_K", "quantize_q5_K", "quantize_q6_K", "quantize_q8_K",
    "dequantize_q4_K", "dequantize_q5_K", "dequantize_q6_K", "dequantize_q8_K",
    "nearest_int", "make_qx_quants", "make_qkx2_quants", "get_scale_min_k4",
]

// GGML's K-quants (256-value super-blocks): reference quantizers written from llama.cpp's
// ggml-quants.c (quantize_row_q{4,5,6,8}_K_ref and their helpers make_qkx2_quants /
// make_qx_quants / nearest_int), block layouts from ggml-common.h. Every float operation keeps the
// C code's order and rounding (this file is compiled with -ffp-contract=off), so the bytes are the
// same as llama.cpp's for the same input. Also the 16-bit float rows (f16, bf16) of the table.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "foundry/core/numeric.h"
#include "kernels/cpu/unary.h"
#include "quant/formats_internal.h"

namespace foundry::quant::detail {

namespace {

constexpr int QK_K = int(kQK_K);
constexpr float kGroupMaxEps = 1e-15f;

float from_fp16(uint16_t h) { return Half::to_float(h); }
uint16_t to_fp16(float f) { return Half::from_float(f); }

#pragma pack(push, 1)
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 six-bit scales and 8 six-bit mins
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_K) == kQ4_KBytes && sizeof(BlockQ5_K) == kQ5_KBytes &&
              sizeof(BlockQ6_K) == kQ6_KBytes && sizeof(BlockQ8_K) == kQ8_KBytes);

// Round to nearest (ties to even) through the float's mantissa, as ggml does; |v| < 2^22.
int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// Levels 0..nmax with a scale and a (non-positive) minimum fitted by weighted least squares over
// nstep + 1 trial scales; returns the scale and stores -min in the_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *the_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Signed levels -nmax..nmax-1 (stored + nmax) with the scale chosen among 19 trials by weighted
// (x^2) least squares: ggml's make_qx_quants with rmse_type 1 and no importance weights.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  auto level = [&](float iscale, int i) { return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))); };
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// The shared first half of q4_K and q5_K: per 32-value sub-block a fitted scale and min, both
// quantized to 6 bits against the block's largest; then the levels recomputed against them.
void quantize_scales_mins_k(const float* x, int nmax, float rmin, int nstep, uint16_t& d_out, uint16_t& dmin_out,
                            uint8_t* scales, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[QK_K / 32], sub_scales[QK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    sub_scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    if (sub_scales[j] > max_scale) max_scale = sub_scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < QK_K / 32; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * sub_scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= uint8_t((ls >> 4) << 6);
      scales[j - 0] |= uint8_t((lm >> 4) << 6);
    }
  }
  d_out = to_fp16(max_scale / 63.f);
  dmin_out = to_fp16(max_min / 63.f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales, sc, m);
    const float d = from_fp16(d_out) * float(sc);
    if (d == 0.f) continue;  // keeps the fitted levels, as the reference does
    const float dm = from_fp16(dmin_out) * float(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

// ---- integer levels of a super-block: value = dsub[s] * q - msub[s] for sub-block s --------------

template <int kSub>
struct KLevels {
  static constexpr int sub = kSub;
  int8_t q[QK_K];
  float dsub[QK_K / kSub], msub[QK_K / kSub];
};

void unpack_scales_mins_k(const uint16_t d16, const uint16_t dmin16, const uint8_t* scales, KLevels<32>& out) {
  const float d = from_fp16(d16), min = from_fp16(dmin16);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales, sc, m);
    out.dsub[j] = d * float(sc);
    out.msub[j] = min * float(m);
  }
}

void unpack_q4_K(const uint8_t* p, KLevels<32>& out) {
  const auto* b = reinterpret_cast<const BlockQ4_K*>(p);
  unpack_scales_mins_k(b->d, b->dmin, b->scales, out);
  const uint8_t* q = b->qs;
  for (int j = 0; j < QK_K; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) {
      out.q[j + l] = int8_t(q[l] & 0xF);
      out.q[j + 32 + l] = int8_t(q[l] >> 4);
    }
}

void unpack_q5_K(const uint8_t* p, KLevels<32>& out) {
  const auto* b = reinterpret_cast<const BlockQ5_K*>(p);
  unpack_scales_mins_k(b->d, b->dmin, b->scales, out);
  const uint8_t* ql = b->qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < QK_K; j += 64, ql += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2))
    for (int l = 0; l < 32; ++l) {
      out.q[j + l] = int8_t((ql[l] & 0xF) + ((b->qh[l] & u1) ? 16 : 0));
      out.q[j + 32 + l] = int8_t((ql[l] >> 4) + ((b->qh[l] & u2) ? 16 : 0));
    }
}

void unpack_q6_K(const uint8_t* p, KLevels<16>& out) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(p);
  const float d = from_fp16(b->d);
  for (int s = 0; s < QK_K / 16; ++s) {
    out.dsub[s] = d * float(b->scales[s]);
    out.msub[s] = 0.f;
  }
  const uint8_t* ql = b->ql;
  const uint8_t* qh = b->qh;
  for (int n = 0; n < QK_K; n += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      out.q[n + l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out.q[n + l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out.q[n + l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out.q[n + l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
}

void unpack_q8_K(const uint8_t* p, KLevels<16>& out) {
  const auto* b = reinterpret_cast<const BlockQ8_K*>(p);
  std::memcpy(out.q, b->qs, QK_K);
  std::fill(std::begin(out.dsub), std::end(out.dsub), b->d);
  std::fill(std::begin(out.msub), std::end(out.msub), 0.f);
}

template <class Levels, void (*Unpack)(const uint8_t*, Levels&), int64_t kBytes>
void dequantize_k(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  Levels lv;
  for (int64_t i = 0; i < k / QK_K; ++i, y += QK_K) {
    Unpack(x + i * kBytes, lv);
    for (int j = 0; j < QK_K; ++j) y[j] = lv.dsub[j / Levels::sub] * float(lv.q[j]) - lv.msub[j / Levels::sub];
  }
}

// Per sub-block: the integer dot with the q8_K levels and the q8_K levels' sum (for the minimum),
// each scaled once.
template <class Levels, void (*Unpack)(const uint8_t*, Levels&), int64_t kBytes>
float dot_k(const void* vx, const void* vy, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  Levels lv;
  float sum = 0.f;
  for (int64_t i = 0; i < k / QK_K; ++i) {
    Unpack(x + i * kBytes, lv);
    float block = 0.f;
    for (int s = 0; s < QK_K / Levels::sub; ++s) {
      int32_t qy = 0, sy = 0;
      for (int j = s * Levels::sub; j < (s + 1) * Levels::sub; ++j) {
        qy += int32_t(lv.q[j]) * int32_t(y[i].qs[j]);
        sy += y[i].qs[j];
      }
      block += lv.dsub[s] * float(qy) - lv.msub[s] * float(sy);
    }
    sum += block * y[i].d;
  }
  return sum;
}

}  // namespace

// ---- Q4_K: 8 sub-blocks of 32, 4-bit levels, 6-bit scales and mins -----------------------------------

void quantize_q4_K(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ4_K*>(vy);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    quantize_scales_mins_k(x, 15, -1.f, 20, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void dequantize_q4_K(const void* x, float* y, int64_t k) { dequantize_k<KLevels<32>, unpack_q4_K, kQ4_KBytes>(x, y, k); }
float dot_q4_K(const void* x, const void* y, int64_t k) { return dot_k<KLevels<32>, unpack_q4_K, kQ4_KBytes>(x, y, k); }

// ---- Q5_K: as Q4_K with 5-bit levels (fifth bits in qh) -----------------------------------------------

void quantize_q5_K(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ5_K*>(vy);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    quantize_scales_mins_k(x, 31, -0.5f, 15, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK_K; n += 64, ql += 32, m1 = uint8_t(m1 << 2), m2 = uint8_t(m2 << 2))
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
  }
}

void dequantize_q5_K(const void* x, float* y, int64_t k) { dequantize_k<KLevels<32>, unpack_q5_K, kQ5_KBytes>(x, y, k); }
float dot_q5_K(const void* x, const void* y, int64_t k) { return dot_k<KLevels<32>, unpack_q5_K, kQ5_KBytes>(x, y, k); }

// ---- Q6_K: 16 sub-blocks of 16, signed 6-bit levels, int8 scales ----------------------------------------

void quantize_q6_K(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ6_K*>(vy);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = from_fp16(y[i].d) * float(y[i].scales[j]);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6));
      }
  }
}

void dequantize_q6_K(const void* x, float* y, int64_t k) { dequantize_k<KLevels<16>, unpack_q6_K, kQ6_KBytes>(x, y, k); }
float dot_q6_K(const void* x, const void* y, int64_t k) { return dot_k<KLevels<16>, unpack_q6_K, kQ6_KBytes>(x, y, k); }

// ---- Q8_K: the activation format of the K-quants: float scale, int8 levels, sums per 16 ------------------

void quantize_q8_K(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));  // the reference leaves bsums unwritten here
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q8_K(const void* x, float* y, int64_t k) { dequantize_k<KLevels<16>, unpack_q8_K, kQ8_KBytes>(x, y, k); }
float dot_q8_K(const void* x, const void* y, int64_t k) { return dot_k<KLevels<16>, unpack_q8_K, kQ8_KBytes>(x, y, k); }

// ---- F16 / BF16: one value per "block", rounded to nearest even; dots accumulate in double -------------

template <class Half16>
float dot_16(const void* vx, const void* vy, int64_t k) {
  const auto* x = static_cast<const uint16_t*>(vx);
  const auto* y = static_cast<const uint16_t*>(vy);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += double(float(Half16::from_bits(x[i]))) * double(float(Half16::from_bits(y[i])));
  return float(sum);
}

// The SIMD conversions round to nearest even as Half / BFloat16::from_float do, giving the same
// bits for every non-NaN value (HalfConversionsMatchScalar in simd_test.cpp); they run for every
// product of an f16 / bf16 decode step (the activation row) and for weights quantized at load.
void quantize_f16(const float* x, void* y, int64_t k) { kernels::convert_f32_to_f16(x, static_cast<uint16_t*>(y), k); }
// 16-bit to float32 is exact, so the SIMD conversions give the reference's values (tested in
// simd_test.cpp); decode reads f16 / bf16 KV caches through these a tile at a time.
void dequantize_f16(const void* x, float* y, int64_t k) { kernels::convert_f16_to_f32(static_cast<const uint16_t*>(x), y, k); }
float dot_f16(const void* x, const void* y, int64_t k) { return dot_16<Half>(x, y, k); }
void quantize_bf16(const float* x, void* y, int64_t k) { kernels::convert_f32_to_bf16(x, static_cast<uint16_t*>(y), k); }
void dequantize_bf16(const void* x, float* y, int64_t k) { kernels::convert_bf16_to_f32(static_cast<const uint16_t*>(x), y, k); }
float dot_bf16(const void* x, const void* y, int64_t k) { return dot_16<BFloat16>(x, y, k); }

}  // namespace foundry::quant::detail

// Q8_0 x Q8_0 dot products and the quantized matrix-vector product built on them (decode: one
// activation row, quantized to q8_0 per 32-value block as llama.cpp does, against weight rows in
// q8_0). Per block the 32 int8 pairs are widened to int16 and multiply-added into int32 lanes,
// converted to float and scaled by d_x * d_y into a float accumulator; one horizontal sum per row.
// The scalar reference is BlockFormatTraits::dot_q8_0 (block_formats.cpp); tests compare on every
// compiled target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/q8_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "foundry/core/numeric.h"
#include "foundry/core/parallel.h"
#include "foundry/quant/weight_only.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/unary.h"
#include "quant/bf16_packed.h"
#include "quant/formats_internal.h"
#include "quant/q8_kernels.h"
#include "quant/vnni_gemv.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::quant {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kBlock = 32, kBlockBytes = 34;

// y_scales: the activation's block scales already as floats; fp16_table: all 65536 fp16 values
// as floats (the weight scales are looked up, a software conversion per block costs more than the
// block's arithmetic).
float DotQ8Q8Scaled(const uint8_t* x, const uint8_t* y, const float* y_scales, const float* fp16_table, int64_t k) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<float, decltype(d16)> df;
  const int64_t N16 = int64_t(hn::Lanes(d16));
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < k / kBlock; ++b, x += kBlockBytes, y += kBlockBytes) {
    uint16_t hx;
    std::memcpy(&hx, x, 2);
    const auto* qx = reinterpret_cast<const int8_t*>(x + 2);
    const auto* qy = reinterpret_cast<const int8_t*>(y + 2);
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (int64_t o = 0; o < kBlock; o += N16) {
      const auto a = hn::PromoteTo(d16, hn::LoadU(d8, qx + o));
      const auto c = hn::PromoteTo(d16, hn::LoadU(d8, qy + o));
      sum0 = hn::ReorderWidenMulAccumulate(d32, a, c, sum0, sum1);
    }
    const auto sumi = hn::RearrangeToOddPlusEven(sum0, sum1);
    acc = hn::MulAdd(hn::ConvertTo(df, sumi), hn::Set(df, fp16_table[hx] * y_scales[b]), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// q4_0 weights (fp16 d, 16 bytes: value j in the low nibble of byte j, value j + 16 in its high
// nibble, level - 8) against a q8_0 activation row. At most 16 int16 lanes, so a block's low and
// high halves line up with y[0..16) and y[16..32).
float DotQ4Q8Scaled(const uint8_t* x, const uint8_t* y, const float* y_scales, const float* fp16_table, int64_t k) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<float, decltype(d16)> df;
  const int64_t N16 = int64_t(hn::Lanes(d16));
  const auto low_mask = hn::Set(d16, int16_t(0x0F));
  const auto eight = hn::Set(d16, int16_t(8));
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < k / kBlock; ++b, x += 18, y += kBlockBytes) {
    uint16_t hx;
    std::memcpy(&hx, x, 2);
    const uint8_t* qs = x + 2;
    const auto* qy = reinterpret_cast<const int8_t*>(y + 2);
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (int64_t o = 0; o < 16; o += N16) {
      const auto packed = hn::PromoteTo(d16, hn::LoadU(du8, qs + o));
      const auto lo = hn::Sub(hn::And(packed, low_mask), eight);
      const auto hi = hn::Sub(hn::ShiftRight<4>(packed), eight);
      sum0 = hn::ReorderWidenMulAccumulate(d32, lo, hn::PromoteTo(d16, hn::LoadU(d8, qy + o)), sum0, sum1);
      sum0 = hn::ReorderWidenMulAccumulate(d32, hi, hn::PromoteTo(d16, hn::LoadU(d8, qy + 16 + o)), sum0, sum1);
    }
    const auto sumi = hn::RearrangeToOddPlusEven(sum0, sum1);
    acc = hn::MulAdd(hn::ConvertTo(df, sumi), hn::Set(df, fp16_table[hx] * y_scales[b]), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// q4_1, q5_0, q5_1 (fp16 d, [fp16 m], [32 fifth bits], 16 bytes of nibbles: value j low, j + 16
// high) against q8_0, as DotQ4Q8Scaled: fifth bits enter through a per-lane bit test; formats with
// a minimum add m * dy * sum(y) from the activation levels' integer sums.
template <bool kFifthBit, bool kMin>
float DotQ4Q5Blocks(const uint8_t* x, const uint8_t* y, const float* y_scales, const float* fp16_table, int64_t k) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::RebindToUnsigned<decltype(d16)> du16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<float, decltype(d16)> df;
  const int64_t N16 = int64_t(hn::Lanes(d16));
  constexpr int64_t kBytes = 2 + (kMin ? 2 : 0) + (kFifthBit ? 4 : 0) + 16;
  alignas(32) static constexpr uint16_t kBit[16] = {1,     2,     4,     8,      16,     32,     64,     128,
                                                    256,   512,   1024,  2048,   4096,   8192,   16384,  32768};
  const auto low_mask = hn::Set(d16, int16_t(0x0F)), sixteen = hn::Set(d16, int16_t(16)), ones = hn::Set(d16, int16_t(1));
  const auto offset = hn::Set(d16, int16_t(kFifthBit ? 16 : 8));
  auto acc = hn::Zero(df);
  for (int64_t b = 0; b < k / kBlock; ++b, x += kBytes, y += kBlockBytes) {
    uint16_t hd, hm = 0;
    std::memcpy(&hd, x, 2);
    if constexpr (kMin) std::memcpy(&hm, x + 2, 2);
    uint32_t qh = 0;
    if constexpr (kFifthBit) std::memcpy(&qh, x + 2 + (kMin ? 2 : 0), 4);
    const uint8_t* qs = x + kBytes - 16;
    const auto* qy = reinterpret_cast<const int8_t*>(y + 2);
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32), ys0 = hn::Zero(d32), ys1 = hn::Zero(d32);
    for (int64_t o = 0; o < 16; o += N16) {
      const auto packed = hn::PromoteTo(d16, hn::LoadU(du8, qs + o));
      auto lo = hn::And(packed, low_mask);
      auto hi = hn::ShiftRight<4>(packed);
      if constexpr (kFifthBit) {
        const auto bit = hn::LoadU(du16, kBit + o);
        lo = hn::IfThenElse(hn::RebindMask(d16, hn::TestBit(hn::Set(du16, uint16_t(qh & 0xFFFF)), bit)),
                            hn::Or(lo, sixteen), lo);
        hi = hn::IfThenElse(hn::RebindMask(d16, hn::TestBit(hn::Set(du16, uint16_t(qh >> 16)), bit)),
                            hn::Or(hi, sixteen), hi);
      }
      if constexpr (!kMin) {
        lo = hn::Sub(lo, offset);
        hi = hn::Sub(hi, offset);
      }
      const auto ya = hn::PromoteTo(d16, hn::LoadU(d8, qy + o));
      const auto yb = hn::PromoteTo(d16, hn::LoadU(d8, qy + 16 + o));
      sum0 = hn::ReorderWidenMulAccumulate(d32, lo, ya, sum0, sum1);
      sum0 = hn::ReorderWidenMulAccumulate(d32, hi, yb, sum0, sum1);
      if constexpr (kMin) {
        ys0 = hn::ReorderWidenMulAccumulate(d32, ya, ones, ys0, ys1);
        ys0 = hn::ReorderWidenMulAccumulate(d32, yb, ones, ys0, ys1);
      }
    }
    acc = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(sum0, sum1)),
                     hn::Set(df, fp16_table[hd] * y_scales[b]), acc);
    if constexpr (kMin)
      acc = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(ys0, ys1)),
                       hn::Set(df, fp16_table[hm] * y_scales[b]), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

float DotQ41Q8(const uint8_t* x, const uint8_t* y, const float* s, const float* t, int64_t k) {
  return DotQ4Q5Blocks<false, true>(x, y, s, t, k);
}
float DotQ50Q8(const uint8_t* x, const uint8_t* y, const float* s, const float* t, int64_t k) {
  return DotQ4Q5Blocks<true, false>(x, y, s, t, k);
}
float DotQ51Q8(const uint8_t* x, const uint8_t* y, const float* s, const float* t, int64_t k) {
  return DotQ4Q5Blocks<true, true>(x, y, s, t, k);
}

// The 8 six-bit scales and mins of a q4_K / q5_K super-block (ggml's get_scale_min_k4).
inline void unpack_k_scales(const uint8_t* sc, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 8; ++j) detail::get_scale_min_k4(j, sc, scales[j], mins[j]);
}

// q4_K super-blocks (fp16 d / dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles:
// chunk c of 64 values holds sub-block 2c in the low and 2c + 1 in the high nibbles of 32 bytes)
// against a q8_K activation row; q5_K adds 32 bytes of fifth bits before the nibbles (bit 2c of
// byte l: value l of chunk c's low nibbles, bit 2c + 1: of its high nibbles). Each 32-value
// sub-block's int32 lanes are scaled by its integer scale and summed into one int32 vector; one
// horizontal sum per super-block; the minimum uses the activation's 16-value sums (bsums).
template <bool kFifthBit>
float DotQ45KQ8K(const uint8_t* x, const uint8_t* y, const float* fp16_table, int64_t k) {
  const hn::CappedTag<int16_t, 32> d16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const int64_t N16 = int64_t(hn::Lanes(d16));
  const auto low_mask = hn::Set(d16, int16_t(0x0F)), one = hn::Set(d16, int16_t(1));
  constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  float sum = 0.f;
  for (int64_t b = 0; b < k / 256; ++b, x += kBytes, y += 292) {
    uint16_t hd, hm;
    std::memcpy(&hd, x, 2);
    std::memcpy(&hm, x + 2, 2);
    uint8_t scales[8], mins[8];
    unpack_k_scales(x + 4, scales, mins);
    float dy;
    std::memcpy(&dy, y, 4);
    const auto* qy = reinterpret_cast<const int8_t*>(y + 4);
    int16_t bsums[16];
    std::memcpy(bsums, y + 260, 32);
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) msum += int32_t(mins[j]) * (bsums[2 * j] + bsums[2 * j + 1]);
    auto acc = hn::Zero(d32);
    const uint8_t* qh = x + 16;
    const uint8_t* qs = x + (kFifthBit ? 48 : 16);
    for (int c = 0; c < 4; ++c, qs += 32, qy += 64) {
      auto lo0 = hn::Zero(d32), lo1 = hn::Zero(d32), hi0 = hn::Zero(d32), hi1 = hn::Zero(d32);
      for (int64_t o = 0; o < 32; o += N16) {
        const auto packed = hn::PromoteTo(d16, hn::LoadU(du8, qs + o));
        auto lo = hn::And(packed, low_mask);
        auto hi = hn::ShiftRight<4>(packed);
        if constexpr (kFifthBit) {
          const auto h = hn::PromoteTo(d16, hn::LoadU(du8, qh + o));
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c), one)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c + 1), one)));
        }
        lo0 = hn::ReorderWidenMulAccumulate(d32, lo, hn::PromoteTo(d16, hn::LoadU(d8, qy + o)), lo0, lo1);
        hi0 = hn::ReorderWidenMulAccumulate(d32, hi, hn::PromoteTo(d16, hn::LoadU(d8, qy + 32 + o)), hi0, hi1);
      }
      acc = hn::Add(acc, hn::Mul(hn::RearrangeToOddPlusEven(lo0, lo1), hn::Set(d32, int32_t(scales[2 * c]))));
      acc = hn::Add(acc, hn::Mul(hn::RearrangeToOddPlusEven(hi0, hi1), hn::Set(d32, int32_t(scales[2 * c + 1]))));
    }
    const int32_t isum = hn::GetLane(hn::SumOfLanes(d32, acc));
    sum += fp16_table[hd] * dy * float(isum) - fp16_table[hm] * dy * float(msum);
  }
  return sum;
}

float DotQ4KQ8K(const uint8_t* x, const uint8_t* y, const float* fp16_table, int64_t k) {
  return DotQ45KQ8K<false>(x, y, fp16_table, k);
}

float DotQ5KQ8K(const uint8_t* x, const uint8_t* y, const float* fp16_table, int64_t k) {
  return DotQ45KQ8K<true>(x, y, fp16_table, k);
}

// q6_K super-blocks (ql[128], qh[64], int8 scales[16], fp16 d) against q8_K. Vectors of at most
// 16 int16 lanes stay inside one 16-value sub-block, so its int8 scale multiplies the activation
// levels in int16 (|y s| <= 16129) before the multiply-add with the 6-bit levels (-32..31); int32
// sums; one horizontal sum and one float multiply per super-block.
float DotQ6KQ8K(const uint8_t* x, const uint8_t* y, const float* fp16_table, int64_t k) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const int64_t N16 = int64_t(hn::Lanes(d16));
  const auto m4 = hn::Set(d16, int16_t(0x0F)), m3 = hn::Set(d16, int16_t(3)), offset = hn::Set(d16, int16_t(32));
  float sum = 0.f;
  for (int64_t b = 0; b < k / 256; ++b, x += 210, y += 292) {
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
    uint16_t hd;
    std::memcpy(&hd, x + 208, 2);
    float dy;
    std::memcpy(&dy, y, 4);
    const auto* qy = reinterpret_cast<const int8_t*>(y + 4);
    auto acc0 = hn::Zero(d32), acc1 = hn::Zero(d32);
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, qy += 128) {
      for (int64_t o = 0; o < 32; o += N16) {
        const auto a = hn::PromoteTo(d16, hn::LoadU(du8, ql + o));
        const auto c = hn::PromoteTo(d16, hn::LoadU(du8, ql + 32 + o));
        const auto h = hn::PromoteTo(d16, hn::LoadU(du8, qh + o));
        const int is = int(o / 16);
        auto scaled_y = [&](int64_t at, int s) {
          return hn::Mul(hn::PromoteTo(d16, hn::LoadU(d8, qy + at + o)), hn::Set(d16, int16_t(sc[is + s])));
        };
        const auto q1 = hn::Sub(hn::Or(hn::And(a, m4), hn::ShiftLeft<4>(hn::And(h, m3))), offset);
        const auto q2 = hn::Sub(hn::Or(hn::And(c, m4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), m3))), offset);
        const auto q3 = hn::Sub(hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), m3))), offset);
        const auto q4 = hn::Sub(hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(h))), offset);
        acc0 = hn::ReorderWidenMulAccumulate(d32, q1, scaled_y(0, 0), acc0, acc1);
        acc0 = hn::ReorderWidenMulAccumulate(d32, q2, scaled_y(32, 2), acc0, acc1);
        acc0 = hn::ReorderWidenMulAccumulate(d32, q3, scaled_y(64, 4), acc0, acc1);
        acc0 = hn::ReorderWidenMulAccumulate(d32, q4, scaled_y(96, 6), acc0, acc1);
      }
    }
    const int32_t isum = hn::GetLane(hn::SumOfLanes(d32, hn::RearrangeToOddPlusEven(acc0, acc1)));
    sum += fp16_table[hd] * dy * float(isum);
  }
  return sum;
}

// nf4 blocks (float absmax, 32 bytes: value j in the low nibble of byte j, j + 32 in the high)
// against a q8_0 activation row (two blocks per nf4 block). Codes become floats through a
// 16-entry table lookup (one permute of 16 lanes, or two of 8 and a select) of the Q15 codebook
// (nf4_codebook_q15 as floats: products and the first sums exact, as the scalar reference's
// integers); targets with fewer float lanes use the scalar reference. x86 CPUs with AVX2 run
// nf4_gemv_x86.cpp's integer kernels instead.
float DotNF4Q8(const uint8_t* x, const uint8_t* y, const float* y_scales, const float* codebook, int64_t k) {
  const hn::ScalableTag<float> df;
  constexpr size_t N = hn::MaxLanes(df);
  if constexpr (N < 8 || N > 16) {
    (void)y_scales;
    (void)codebook;
    return detail::dot_nf4(x, y, k);
  } else {
    const hn::Rebind<int32_t, decltype(df)> di;
    const hn::Rebind<uint8_t, decltype(df)> du8;
    const hn::Rebind<int8_t, decltype(df)> d8;
    const auto table_lo = hn::LoadU(df, codebook);
    const auto table_hi = hn::LoadU(df, codebook + (N == 16 ? 0 : 8));
    const auto fifteen = hn::Set(di, 15), seven = hn::Set(di, 7);
    auto lookup = [&](hn::Vec<decltype(di)> idx) {
      if constexpr (N == 16) {
        return hn::TableLookupLanes(table_lo, hn::IndicesFromVec(df, idx));
      } else {
        const auto lo = hn::TableLookupLanes(table_lo, hn::IndicesFromVec(df, hn::And(idx, seven)));
        const auto hi = hn::TableLookupLanes(table_hi, hn::IndicesFromVec(df, hn::And(idx, seven)));
        return hn::IfThenElse(hn::RebindMask(df, hn::Gt(idx, seven)), hi, lo);
      }
    };
    auto acc = hn::Zero(df);
    for (int64_t b = 0; b < k / 64; ++b, x += 36, y += 2 * kBlockBytes) {
      float amax;
      std::memcpy(&amax, x, 4);
      const uint8_t* qs = x + 4;
      const auto* y0 = reinterpret_cast<const int8_t*>(y + 2);
      const auto* y1 = reinterpret_cast<const int8_t*>(y + kBlockBytes + 2);
      auto s0 = hn::Zero(df), s1 = hn::Zero(df);
      for (size_t o = 0; o < 32; o += N) {
        const auto packed = hn::PromoteTo(di, hn::LoadU(du8, qs + o));
        s0 = hn::MulAdd(lookup(hn::And(packed, fifteen)), hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, y0 + o))), s0);
        s1 = hn::MulAdd(lookup(hn::ShiftRight<4>(packed)), hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, y1 + o))),
                        s1);
      }
      const float unit_amax = amax / kNF4Q15Unit;
      acc = hn::MulAdd(s0, hn::Set(df, unit_amax * y_scales[2 * b]), acc);
      acc = hn::MulAdd(s1, hn::Set(df, unit_amax * y_scales[2 * b + 1]), acc);
    }
    return hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

// A float row to q8_0: d = amax / 127 per block, levels x / d rounded. kTiesToEven: llama.cpp's
// SIMD quantize_row_q8_0 (activations: every product of every decode step), x times 127 / amax
// rounded to nearest even; otherwise its reference (weights quantized at load: the same bytes as
// the table's quantizer), x times 1 / d rounded half away from zero. The two multipliers differ in
// the last bit for about a quarter of amax values, which moves about two levels in a million
// (where x / d lies within an ulp of a half); with 127 / amax the activations are llama.cpp's.
template <bool kTiesToEven>
void QuantizeRowQ8_0Rounding(const float* x, uint8_t* y, int64_t k) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> d32;
  const hn::Rebind<int16_t, decltype(df)> d16;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f);
  for (int64_t b = 0; b < k / kBlock; ++b, x += kBlock, y += kBlockBytes) {
    auto amax = hn::Zero(df);
    for (int64_t o = 0; o < kBlock; o += N) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, x + o)));
    const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
    const float d = m / 127.f;
    const uint16_t h = Half::from_float(d);
    std::memcpy(y, &h, 2);
    const auto id = hn::Set(df, kTiesToEven ? (m != 0.f ? 127.f / m : 0.0f) : (d != 0.f ? 1.0f / d : 0.0f));
    auto* q = reinterpret_cast<int8_t*>(y + 2);
    for (int64_t o = 0; o < kBlock; o += N) {
      const auto v = hn::Mul(hn::LoadU(df, x + o), id);
      hn::Vec<decltype(d32)> level;
      if constexpr (kTiesToEven) {
        level = hn::NearestInt(v);
      } else {
        // std::round: away from zero where |v| >= |trunc(v)| + 0.5 (exact for |v| <= 127). Written
        // as a comparison, not v - trunc(v): GCC would fuse that subtraction with the product
        // into one FMA (-ffp-contract=fast), rounding differently from the reference's v.
        const auto t = hn::Trunc(v);
        const auto away = hn::Ge(hn::Abs(v), hn::Add(hn::Abs(t), half));
        level = hn::ConvertTo(d32, hn::IfThenElse(away, hn::Add(t, hn::CopySign(one, v)), t));
      }
      hn::StoreU(hn::DemoteTo(d8, hn::DemoteTo(d16, level)), d8, q + o);
    }
  }
}

void QuantizeRowQ8_0(const float* x, uint8_t* y, int64_t k) { QuantizeRowQ8_0Rounding<true>(x, y, k); }
void QuantizeRowQ8_0Exact(const float* x, uint8_t* y, int64_t k) { QuantizeRowQ8_0Rounding<false>(x, y, k); }

// A float row to q8_K (the K-quants' activation format: float d, 256 int8 levels, int16 sums of
// each 16), with the reference's bytes: its scale comes from the first value of largest magnitude
// (sign included), levels are iscale x rounded to nearest even (nearest_int's magic-number
// rounding, the same for |v| <= 127) and capped at 127, d = 1 / iscale. An all-zero block is all
// zeros. The same bytes as the table's quantizer for every block without NaNs.
void QuantizeRowQ8K(const float* x, uint8_t* y, int64_t k) {
  constexpr int64_t kQK = 256, kBytes = 4 + kQK + 2 * kQK / 16;
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> d32;
  const hn::Rebind<int16_t, decltype(df)> d16;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK, y += kBytes) {
    auto vmax = hn::Zero(df);
    for (int64_t j = 0; j < kQK; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (!(amax > 0.f)) {  // zero block (or NaNs, which the reference's > comparisons also skip)
      std::memset(y, 0, size_t(kBytes));
      continue;
    }
    int64_t first = 0;
    while (first < kQK - 1 && std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.f / x[first];
    const auto vs = hn::Set(df, iscale);
    const auto cap = hn::Set(d32, 127);
    auto* q = reinterpret_cast<int8_t*>(y + 4);
    for (int64_t j = 0; j < kQK; j += N) {
      const auto level = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, x + j), vs)), cap);
      hn::StoreU(hn::DemoteTo(d8, hn::DemoteTo(d16, level)), d8, q + j);
    }
    int16_t sums[kQK / 16];
    for (int64_t j = 0; j < kQK / 16; ++j) {
      int sum = 0;
      for (int64_t i = 0; i < 16; ++i) sum += q[j * 16 + i];
      sums[j] = int16_t(sum);
    }
    std::memcpy(y + 4 + kQK, sums, sizeof(sums));
    const float d = 1 / iscale;
    std::memcpy(y, &d, 4);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::quant
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::quant {

HWY_EXPORT(DotQ8Q8Scaled);
HWY_EXPORT(DotQ4Q8Scaled);
HWY_EXPORT(DotQ4KQ8K);
HWY_EXPORT(DotQ41Q8);
HWY_EXPORT(DotQ50Q8);
HWY_EXPORT(DotQ51Q8);
HWY_EXPORT(DotQ5KQ8K);
HWY_EXPORT(DotQ6KQ8K);
HWY_EXPORT(DotNF4Q8);
HWY_EXPORT(QuantizeRowQ8_0);
HWY_EXPORT(QuantizeRowQ8_0Exact);
HWY_EXPORT(QuantizeRowQ8K);

namespace {

// nf4_codebook_q15 as float32 (exactly), the Highway nf4 kernel's table.
const float* nf4_q15_floats() {
  static const auto table = [] {
    std::array<float, 16> t{};
    for (int c = 0; c < 16; ++c) t[size_t(c)] = float(nf4_codebook_q15()[c]);
    return t;
  }();
  return table.data();
}

}  // namespace

void quantize_row_q8_0_exact(const float* x, void* y, int64_t k) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowQ8_0Exact)(x, static_cast<uint8_t*>(y), k);
}

void quantize_row_q8_K_simd(const float* x, void* y, int64_t k) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowQ8K)(x, static_cast<uint8_t*>(y), k);
}

RowQuantizer exact_quantizer(const BlockFormatTraits& t) {
  if (t.format == BlockFormat::Q8_0) return quantize_row_q8_0_exact;
  if (t.format == BlockFormat::Q8_K) return quantize_row_q8_K_simd;
  return t.quantize;
}

void quantize_row_q8_0_fast(const float* x, void* y, int64_t k) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowQ8_0)(x, static_cast<uint8_t*>(y), k);
}

namespace {

const float* fp16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = Half::to_float(uint16_t(h));
    return t;
  }();
  return table.data();
}

void block_scales_into(const uint8_t* q, int64_t k, std::vector<float>& s) {
  s.resize(static_cast<size_t>(k / 32));
  for (int64_t b = 0; b < k / 32; ++b) {
    uint16_t h;
    std::memcpy(&h, q + b * 34, 2);
    s[size_t(b)] = fp16_table()[h];
  }
}

std::vector<float> block_scales(const uint8_t* q, int64_t k) {
  std::vector<float> s;
  block_scales_into(q, k, s);
  return s;
}

}  // namespace

float dot_q8_0_q8_0(const void* x, const void* y, int64_t k) {
  const auto* yb = static_cast<const uint8_t*>(y);
  const std::vector<float> ys = block_scales(yb, k);
  return HWY_DYNAMIC_DISPATCH(DotQ8Q8Scaled)(static_cast<const uint8_t*>(x), yb, ys.data(), fp16_table(), k);
}

float dot_q4_0_q8_0(const void* x, const void* y, int64_t k) {
  const auto* yb = static_cast<const uint8_t*>(y);
  const std::vector<float> ys = block_scales(yb, k);
  return HWY_DYNAMIC_DISPATCH(DotQ4Q8Scaled)(static_cast<const uint8_t*>(x), yb, ys.data(), fp16_table(), k);
}

namespace {

// Every SIMD row kernel behind one signature: (weight row, activation row, the activation's q8_0
// block scales as floats, the fp16 table, k); kernels ignore what they do not use.
using RowDot = float (*)(const uint8_t*, const uint8_t*, const float*, const float*, int64_t);

RowDot simd_row_dot(BlockFormat f) {
  switch (f) {
    case BlockFormat::Q8_0: return [](const uint8_t* a, const uint8_t* b, const float* s, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ8Q8Scaled)(a, b, s, t, n);
    };
    case BlockFormat::Q4_0: return [](const uint8_t* a, const uint8_t* b, const float* s, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ4Q8Scaled)(a, b, s, t, n);
    };
    case BlockFormat::Q4_1: return [](const uint8_t* a, const uint8_t* b, const float* s, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ41Q8)(a, b, s, t, n);
    };
    case BlockFormat::Q5_0: return [](const uint8_t* a, const uint8_t* b, const float* s, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ50Q8)(a, b, s, t, n);
    };
    case BlockFormat::Q5_1: return [](const uint8_t* a, const uint8_t* b, const float* s, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ51Q8)(a, b, s, t, n);
    };
    case BlockFormat::Q4_K: return [](const uint8_t* a, const uint8_t* b, const float*, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ4KQ8K)(a, b, t, n);
    };
    case BlockFormat::Q5_K: return [](const uint8_t* a, const uint8_t* b, const float*, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ5KQ8K)(a, b, t, n);
    };
    case BlockFormat::Q6_K: return [](const uint8_t* a, const uint8_t* b, const float*, const float* t, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotQ6KQ8K)(a, b, t, n);
    };
    case BlockFormat::NF4: return [](const uint8_t* a, const uint8_t* b, const float* s, const float*, int64_t n) {
      return HWY_DYNAMIC_DISPATCH(DotNF4Q8)(a, b, s, nf4_q15_floats(), n);
    };
    default: return nullptr;
  }
}

}  // namespace

float dot_q4_K_q8_K(const void* x, const void* y, int64_t k) {
  return HWY_DYNAMIC_DISPATCH(DotQ4KQ8K)(static_cast<const uint8_t*>(x), static_cast<const uint8_t*>(y), fp16_table(), k);
}

namespace {

bool use_vnni() {
  static const bool on = vnni_available() && std::getenv("FOUNDRY_DISABLE_VNNI") == nullptr;
  return on;
}

bool use_avx2() {
  static const bool on = avx2_available() && std::getenv("FOUNDRY_DISABLE_AVX2_KERNELS") == nullptr;
  return on;
}

}  // namespace

// gemv's kernel for one row, so that both give the same sum.
float dot_nf4_q8_0(const void* x, const void* y, int64_t k) {
  if (use_avx2()) {
    float out;
    gemv_nf4_x86_rows(use_vnni(), y, k)(static_cast<const uint8_t*>(x), 1, 0, 1, &out);
    return out;
  }
  const auto* yb = static_cast<const uint8_t*>(y);
  const std::vector<float> ys = block_scales(yb, k);
  return HWY_DYNAMIC_DISPATCH(DotNF4Q8)(static_cast<const uint8_t*>(x), yb, ys.data(), nf4_q15_floats(), k);
}

// Fewer activation rows than this go through decode's matrix-vector kernel one row at a time:
// the panel GEMM unpacks every weight panel once per call.
constexpr int64_t kPanelGemmMinRows = 8;

bool has_integer_gemm(const BlockFormatTraits& t) {
  const BlockFormat f = t.format;
  const bool kernels = f == BlockFormat::Q4_0 || f == BlockFormat::Q4_1 || f == BlockFormat::Q5_0 || f == BlockFormat::Q5_1 ||
                       f == BlockFormat::Q8_0 || f == BlockFormat::Q4_K || f == BlockFormat::Q5_K || f == BlockFormat::Q6_K;
  return kernels && (use_vnni() || use_avx2());
}

bool integer_gemm_preferred(const BlockFormatTraits& t) {
  return has_integer_gemm(t) && use_vnni();
}

WeightLayout preferred_layout(const BlockFormatTraits& t, int64_t rows, int64_t k) {
  if (t.format == BlockFormat::BF16)
    return k % kPackedBF16Block == 0 && packed_bf16_preferred() ? WeightLayout::PackedBF16 : WeightLayout::Rows;
  // FOUNDRY_ROW_LAYOUT=1 keeps every matrix in its rows (to compare the two).
  static const bool groups = use_avx2() && std::getenv("FOUNDRY_ROW_LAYOUT") == nullptr;
  // Groups win everywhere the AVX2 kernels run, for every format but q8_0 on AVX-512 VNNI CPUs. There
  // the group kernels are AVX-512 too (two 32-byte runs a vector; row_groups.cpp), and `bench_infer
  // --products` with both layouts and both group kernels alternating in one process (Zen 5, 1
  // thread, GB/s: AVX-512 groups / VNNI rows / AVX2 groups) read q4_0 24.1 / 19.1 / 20.8, q4_1 28.6 /
  // 24.0 / 24.3, q5_0 22.4 / 17.2 / 14.4, q5_1 34.0 / 24.4 / 19.4, q4_K 30.4 / 18.7 / 23.9, q5_K
  // 32.2 / 19.9 / 29.2, q6_K 32.0 / 27.7 / 28.9 and q8_0 37.9 / 31.3 / 40.9; but Llama-110M's q8_0
  // decode ran 0.91x (median of 10 alternating process pairs; 0.93x at 2 threads) in groups, its
  // prefill 1.05x: q8_0 keeps its rows there. q5_0 in groups: prefill 1.21x / 1.26x (1 / 2
  // threads), decode 1.03x / 1.00x; q5_1 1.27x and 1.09x at 1 thread (docs/quantization.md).
  const bool vnni_reads_rows = use_vnni() && t.format == BlockFormat::Q8_0;
  const bool chosen = groups && has_row_groups(t.format) && !vnni_reads_rows;
  return chosen && rows >= 8 ? WeightLayout::Groups8 : WeightLayout::Rows;
}

bool gemm_integer(const BlockFormatTraits& t, const void* w, int64_t rows, int64_t k, const void* xq, int64_t m, float* y,
                  WeightLayout layout) {
  if (!has_integer_gemm(t)) return false;
  if (m >= kPanelGemmMinRows) {
    const BlockGemmIsa isa = !use_vnni() ? BlockGemmIsa::AVX2 : amx_int8_available() ? BlockGemmIsa::AMX : BlockGemmIsa::VNNI;
    const int64_t grouped = rows_in_groups(layout, rows);
    if (grouped > 0) gemm_blocks_x86(t.format, isa, w, grouped, k, xq, m, y, true, rows);
    if (grouped < rows)  // the rows past the groups, in the row layout
      gemm_blocks_x86(t.format, isa, static_cast<const uint8_t*>(w) + grouped * quantized_bytes(t, 1, k), rows - grouped, k,
                      xq, m, y + grouped, false, rows);
  } else {
    const int64_t act_bytes = quantized_bytes(traits(t.dot_format), 1, k);
    for (int64_t i = 0; i < m; ++i) gemv(t, w, rows, k, static_cast<const uint8_t*>(xq) + i * act_bytes, y + i * rows, layout);
  }
  return true;
}

namespace {

// A format's matrix-vector kernel with the activation row prepared for it: `rows` runs rows
// [r0, r1) of one matrix on the calling thread (r0 a multiple of `group`). xq must outlive it.
struct RowKernel {
  GemvRowRange rows;
  int64_t group = 1;            // the kernel's row group: chunks start at multiples of it
  int64_t chunk_bytes = 65536;  // weight bytes per chunk (below kMinParallelBytes, one chunk)
  // Many chunks a thread: the threads then end a product within one 64 KB chunk of each other (4 a
  // thread left the LM head's chunks at 1.7 MB; 2-thread q4_0 decode's caller waited for the worker
  // in 10.7% of its samples with 4, 6.1-6.9% with 64).
  int chunks_per_thread = 64;
  // Where set (a kernel of single rows), a matrix of kGemvFourStreamsBytes or more is cut in
  // quarters: chunk unit j is its rows j, Q + j, 2Q + j and 3Q + j, run by one call for a run of j,
  // so a thread's run of chunks reads four long streams (kernels::gemv_quarters_16).
  std::function<void(const uint8_t* w, int64_t first, int64_t stride, int64_t count, float* y)> quarters;
};

// What a product's row ranges read, one per thread and reused (a product is prepared and run to its
// end before its thread prepares the next): the kernels' std::functions capture one pointer to it,
// which they hold without allocating.
struct PreparedRow {
  const BlockFormatTraits* t = nullptr;
  RowDot dot = nullptr;
  const uint8_t* xb = nullptr;
  std::vector<float> xs;  // a q8_0 row's block scales as float32; the f16 / bf16 row widened
  int64_t k = 0, row_bytes = 0;
};

PreparedRow& prepared_row(const BlockFormatTraits& t, int64_t k, const void* xq) {
  thread_local PreparedRow p;
  p.t = &t;
  p.dot = nullptr;
  p.xb = static_cast<const uint8_t*>(xq);
  p.k = k;
  p.row_bytes = quantized_bytes(t, 1, k);
  p.xs.clear();
  return p;
}

// The Highway kernel for t's format (simd_row_dot), or the table's scalar dot where it has none.
RowKernel highway_row_kernel(const BlockFormatTraits& t, int64_t k, const void* xq) {
  PreparedRow& p = prepared_row(t, k, xq);
  const PreparedRow* pp = &p;
  if ((p.dot = simd_row_dot(t.format))) {
    // The K-quants' q8_K rows carry float scales; a q8_0 row's are converted once here.
    if (t.dot_format == BlockFormat::Q8_0) block_scales_into(p.xb, k, p.xs);
    return {[pp](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
      for (int64_t r = r0; r < r1; ++r) y[r] = pp->dot(w + r * pp->row_bytes, pp->xb, pp->xs.data(), fp16_table(), pp->k);
    }};
  }
  return {[pp](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    for (int64_t r = r0; r < r1; ++r) y[r] = pp->t->dot(w + r * pp->row_bytes, pp->xb, pp->k);
  }};
}

RowKernel row_kernel(const BlockFormatTraits& t, int64_t k, const void* xq, WeightLayout layout = WeightLayout::Rows,
                     bool rows_past_groups = false);

// The kernel for a matrix in groups: the group kernel, and where a matrix has rows past its whole
// groups (`rows_past_groups`), the row layout's kernel for those.
RowKernel group_kernel(const BlockFormatTraits& t, int64_t k, const void* xq, bool rows_past_groups) {
  FOUNDRY_CHECK(has_row_groups(t.format) && use_avx2(), "gemv: {} in groups of 8 rows needs the AVX2 kernels", t.name);
  GemvRowRange groups = gemv_group_rows(use_vnni(), t.format, xq, k);
  if (!rows_past_groups) return {std::move(groups), 8};
  GemvRowRange rows = row_kernel(t, k, xq).rows;
  return {[groups = std::move(groups), rows = std::move(rows)](const uint8_t* w, int64_t n, int64_t r0, int64_t r1, float* y) {
            const int64_t grouped = rows_in_groups(WeightLayout::Groups8, n);
            if (r0 < grouped) groups(w, n, r0, std::min(r1, grouped), y);
            if (r1 > grouped) rows(w, n, std::max(r0, grouped), r1, y);
          },
          8};
}

// The fastest kernel this CPU has for t (in `layout`: Groups8 where preferred_layout chose it).
// A bf16 row widened to float32 once per product (the 16-bit kernels' activation).
const PreparedRow& widened_row(const BlockFormatTraits& t, int64_t k, const void* xq) {
  PreparedRow& p = prepared_row(t, k, xq);
  p.xs.resize(static_cast<size_t>(k));
  (t.format == BlockFormat::BF16 ? kernels::convert_bf16_to_f32 : kernels::convert_f16_to_f32)(
      static_cast<const uint16_t*>(xq), p.xs.data(), k);
  return p;
}

RowKernel row_kernel(const BlockFormatTraits& t, int64_t k, const void* xq, WeightLayout layout, bool rows_past_groups) {
  if (layout == WeightLayout::Groups8) return group_kernel(t, k, xq, rows_past_groups);
  if (layout == WeightLayout::PackedBF16) {
    FOUNDRY_CHECK(t.format == BlockFormat::BF16, "gemv: {} rows cannot be packed as bf16", t.name);
    const PreparedRow* pp = &widened_row(t, k, xq);
    RowKernel kernel{[pp](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
      gemv_packed_bf16_rows(w, pp->k, pp->xs.data(), r0, r1, y);
    }};
    kernel.quarters = [pp](const uint8_t* w, int64_t first, int64_t stride, int64_t count, float* y) {
      gemv_packed_bf16_quarters(w, pp->k, pp->xs.data(), first, stride, count, y);
    };
    return kernel;
  }
  // q8_0 and the 32-value nibble formats: VNNI steps, else AVX2 ones.
  const bool byte_blocks = t.format == BlockFormat::Q8_0 || t.format == BlockFormat::Q4_0 ||
                           t.format == BlockFormat::Q4_1 || t.format == BlockFormat::Q5_0 ||
                           t.format == BlockFormat::Q5_1;
  if (byte_blocks && use_vnni()) return {gemv_vnni_rows(t.format, xq, k), 4};
  if (byte_blocks && use_avx2()) return {gemv_avx2_rows(t.format, xq, k), 4};
  if (use_avx2()) {  // the other x86 byte kernels (nf4 with AVX-512 steps where use_vnni())
    switch (t.format) {
      case BlockFormat::NF4: return {gemv_nf4_x86_rows(use_vnni(), xq, k)};
      case BlockFormat::Q5_K:
      case BlockFormat::Q6_K: {
        const bool q6 = t.format == BlockFormat::Q6_K;
        return {[q6, xq, k](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
          gemv_q56_K_x86_rows(use_vnni(), q6, w, k, xq, r0, r1, y);
        }};
      }
      default: break;
    }
  }
  // The x86 q4_K kernels (VNNI or AVX2).
  if (t.format == BlockFormat::Q4_K && has_integer_gemm(t)) {
    return {[xq, k](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
              gemv_q4_K_rows(use_vnni(), w, k, xq, r0, r1, y);
            },
            4};
  }
  if (t.format == BlockFormat::F16 || t.format == BlockFormat::BF16) {
    // The activation row widened to float32 once per product, then one stream per row.
    const bool bf16 = t.format == BlockFormat::BF16;
    const PreparedRow* pp = &widened_row(t, k, xq);
    const auto rows16 = bf16 ? kernels::gemv_rows_bf16_range : kernels::gemv_rows_f16_range;
    RowKernel kernel{[pp, rows16](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
      rows16(reinterpret_cast<const uint16_t*>(w), pp->k, r0, r1, pp->k, pp->xs.data(), y);
    }};
    kernel.quarters = [pp, bf16](const uint8_t* w, int64_t first, int64_t stride, int64_t count, float* y) {
      kernels::gemv_quarters_16(bf16, reinterpret_cast<const uint16_t*>(w), pp->k, first, stride, count, pp->k,
                                pp->xs.data(), y);
    };
    return kernel;
  }
  return highway_row_kernel(t, k, xq);
}

// The targets' rows (`row_bytes` each) split over the threads as one job, in chunks of whole row
// groups, or of quarters' rows (RowKernel::quarters).
void run_rows(const RowKernel& kernel, int64_t row_bytes, std::span<const GemvTarget> targets) {
  // The targets' chunk units numbered one after the other: first[i] is target i's first, and
  // quartered[i] its units that are four rows (the rest are row groups). Reused: decode runs several
  // products a layer; the chunks capture the caller's vectors (a thread_local is never captured).
  thread_local std::vector<int64_t> firsts, quarter_units;
  std::vector<int64_t>& first = firsts;
  std::vector<int64_t>& quartered = quarter_units;
  first.assign(targets.size() + 1, 0);
  quartered.assign(targets.size(), 0);
  int64_t unit_rows = kernel.group, rows_total = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const int64_t rows = targets[i].rows;
    rows_total += rows;
    if (kernel.quarters && rows * row_bytes >= kernels::kGemvFourStreamsBytes) {
      quartered[i] = rows / 4;
      unit_rows = 4;
      first[i + 1] = first[i] + quartered[i] + rows % 4;
    } else {
      first[i + 1] = first[i] + (rows + kernel.group - 1) / kernel.group;
    }
  }
  const int64_t grain = rows_total * row_bytes < kMinParallelBytes  // one chunk, on this thread
                            ? first.back()
                            : std::max<int64_t>(1, kernel.chunk_bytes / std::max<int64_t>(unit_rows * row_bytes, 1));
  parallel_for(0, first.back(), grain, kernel.chunks_per_thread, [&](int64_t b, int64_t e) {
    size_t i = size_t(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    for (; b < e; ++i) {
      const int64_t stop = std::min(e, first[i + 1]), u0 = b - first[i], u1 = stop - first[i];
      const GemvTarget& g = targets[i];
      const uint8_t* w = static_cast<const uint8_t*>(g.w);
      if (const int64_t q = quartered[i]; q > 0) {
        if (u0 < q) kernel.quarters(w, u0, q, std::min(u1, q) - u0, g.y);
        if (u1 > q) kernel.rows(w, g.rows, 3 * q + std::max(u0, q), 3 * q + u1, g.y);  // the last rows % 4 rows
      } else if (stop > b) {
        kernel.rows(w, g.rows, u0 * kernel.group, std::min(g.rows, u1 * kernel.group), g.y);
      }
      b = stop;
    }
  });
}

void run_one(const RowKernel& kernel, const BlockFormatTraits& t, const void* w, int64_t rows, int64_t k, float* y,
             WeightLayout layout = WeightLayout::Rows) {
  const GemvTarget one{w, rows, y};
  run_rows(kernel, layout_row_bytes(t, layout, k), std::span<const GemvTarget>(&one, 1));
}

}  // namespace

void gemv_q8_0(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  const BlockFormatTraits& t = traits(BlockFormat::Q8_0);
  run_one(highway_row_kernel(t, k, xq), t, w, rows, k, y);
}

void gemv_q4_0(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  const BlockFormatTraits& t = traits(BlockFormat::Q4_0);
  run_one(highway_row_kernel(t, k, xq), t, w, rows, k, y);
}

void gemv_q8_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  run_one({gemv_vnni_rows(BlockFormat::Q8_0, xq, k), 4}, traits(BlockFormat::Q8_0), w, rows, k, y);
}

void gemv_q4_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  run_one({gemv_vnni_rows(BlockFormat::Q4_0, xq, k), 4}, traits(BlockFormat::Q4_0), w, rows, k, y);
}

void gemv(const BlockFormatTraits& t, const void* w, int64_t rows, int64_t k, const void* xq, float* y,
          WeightLayout layout) {
  run_one(row_kernel(t, k, xq, layout, rows % 8 != 0), t, w, rows, k, y, layout);
}

void gemv_many(const BlockFormatTraits& t, int64_t k, const void* xq, std::span<const GemvTarget> targets,
               WeightLayout layout) {
  const bool rows_past_groups = std::any_of(targets.begin(), targets.end(), [](const GemvTarget& g) { return g.rows % 8 != 0; });
  run_rows(row_kernel(t, k, xq, layout, rows_past_groups), layout_row_bytes(t, layout, k), targets);
}

}  // namespace foundry::quant
#endif  // HWY_ONCE

// SIMD dequantization of the most used block formats (q8_0, q4_0, q4_K, nf4) to float32, for the
// prefill's weight tiles, QLoRA's frozen bases and quantized KV caches. Each value is computed
// exactly as the table's scalar dequantize computes it (same operations in the same order, on the
// same floats: this file is compiled with -ffp-contract=off so no multiply and add are fused), so
// the two are interchangeable bit for bit; tests compare them on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/dequant_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "foundry/core/numeric.h"
#include "foundry/quant/weight_only.h"
#include "kernels/cpu/simd_math-inl.h"
#include "quant/formats_internal.h"
#include "quant/q8_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::quant {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// An fp16 scale (exact either way; one vcvtph2ps where the target has F16C).
HWY_INLINE float fp16_at(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Values out as float32, or rounded to bfloat16 (the prefill's weight tiles) exactly as
// convert_f32_to_bf16 would round the float32 row.
template <bool kBF16, class V>
HWY_INLINE void Put(V v, void* out, int64_t i) {
  const DF df;
  if constexpr (kBF16) foundry::kernels::HWY_NAMESPACE::StoreBF16(df, v, static_cast<uint16_t*>(out) + i);
  else hn::StoreU(v, df, static_cast<float*>(out) + i);
}

// y[j] = float(level_j - offset) * d + m for 32 unsigned levels (the block formats' q d + m).
template <bool kBF16>
HWY_INLINE void ScaleLevels(const uint8_t* levels, int32_t offset, float d, float m, void* y, int64_t at) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto vd = hn::Set(df, d), vm = hn::Set(df, m);
  const auto off = hn::Set(d32, offset);
  for (int64_t j = 0; j < 32; j += N) {
    const auto q = hn::Sub(hn::PromoteTo(d32, hn::LoadU(d8, levels + j)), off);
    Put<kBF16>(hn::Add(hn::Mul(hn::ConvertTo(df, q), vd), vm), y, at + j);
  }
}

// The nibbles of kN packed bytes: the low ones into `low`, the high ones into `high` (vectors of
// at most kN bytes, so nothing past either is read or written).
template <size_t kN>
HWY_INLINE void Nibbles(const uint8_t* packed, uint8_t* low, uint8_t* high) {
  const hn::CappedTag<uint8_t, kN> d8;
  const int64_t N = int64_t(hn::Lanes(d8));
  const auto mask = hn::Set(d8, uint8_t(0x0F));
  for (int64_t j = 0; j < int64_t(kN); j += N) {
    const auto b = hn::LoadU(d8, packed + j);
    hn::StoreU(hn::And(b, mask), d8, low + j);
    hn::StoreU(hn::ShiftRight<4>(b), d8, high + j);
  }
}

template <bool kBF16>
void DequantizeQ8_0(const uint8_t* x, void* y, int64_t k) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto zero = hn::Zero(df);
  for (int64_t b = 0; b < k / 32; ++b, x += 34) {
    const auto vd = hn::Set(df, fp16_at(x));
    const auto* q = reinterpret_cast<const int8_t*>(x + 2);
    for (int64_t j = 0; j < 32; j += N)
      Put<kBF16>(hn::Add(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, q + j))), vd), zero), y, b * 32 + j);
  }
}

template <bool kBF16>
void DequantizeQ4_0(const uint8_t* x, void* y, int64_t k) {
  HWY_ALIGN uint8_t levels[32];
  for (int64_t b = 0; b < k / 32; ++b, x += 18) {
    Nibbles<16>(x + 2, levels, levels + 16);
    ScaleLevels<kBF16>(levels, 8, fp16_at(x), 0.f, y, b * 32);
  }
}

// q4_K: 144-byte super-blocks of 256 (d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
// nibbles: chunk c's 32 bytes hold sub-block 2c low and 2c + 1 high). Value = d sc q - dmin m.
template <bool kBF16>
void DequantizeQ4K(const uint8_t* x, void* y, int64_t k) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = int64_t(hn::Lanes(df));
  HWY_ALIGN uint8_t low[32], high[32];
  int64_t at = 0;
  for (int64_t b = 0; b < k / 256; ++b, x += 144) {
    const float d = fp16_at(x), dmin = fp16_at(x + 2);
    const uint8_t* s = x + 4;
    for (int c = 0; c < 4; ++c, at += 64) {
      Nibbles<32>(x + 16 + 32 * c, low, high);
      for (int half = 0; half < 2; ++half) {
        uint8_t sc, mn;
        detail::get_scale_min_k4(2 * c + half, s, sc, mn);
        const auto vd = hn::Set(df, d * float(sc)), vm = hn::Set(df, dmin * float(mn));
        const uint8_t* levels = half ? high : low;
        for (int64_t i = 0; i < 32; i += N) {
          const auto q = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, levels + i)));
          Put<kBF16>(hn::Sub(hn::Mul(vd, q), vm), y, at + 32 * half + i);
        }
      }
    }
  }
}

// nf4: 36-byte blocks of 64 (float absmax; value j in the low nibble of byte j, j + 32 in the
// high). Value = codebook[code] * absmax, the codebook looked up in registers (one 16-lane permute,
// or two 8-lane permutes and a select), through memory on narrower targets.
template <bool kBF16>
void DequantizeNF4(const uint8_t* x, void* y, int64_t k) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<uint8_t, DF> d8;
  constexpr size_t N = hn::MaxLanes(df);
  const float* codebook = nf4_codebook();
  HWY_ALIGN uint8_t codes[64];
  for (int64_t b = 0; b < k / 64; ++b, x += 36) {
    float amax;
    std::memcpy(&amax, x, 4);
    const auto scale = hn::Set(df, amax);
    Nibbles<32>(x + 4, codes, codes + 32);
    for (int64_t j = 0; j < 64; j += int64_t(hn::Lanes(df))) {
      const auto idx = hn::PromoteTo(d32, hn::LoadU(d8, codes + j));
      hn::Vec<DF> values;
      if constexpr (N == 16) {
        values = hn::TableLookupLanes(hn::LoadU(df, codebook), hn::IndicesFromVec(df, idx));
      } else if constexpr (N == 8) {
        const auto seven = hn::Set(d32, 7);
        const auto low = hn::IndicesFromVec(df, hn::And(idx, seven));
        values = hn::IfThenElse(hn::RebindMask(df, hn::Gt(idx, seven)), hn::TableLookupLanes(hn::LoadU(df, codebook + 8), low),
                                hn::TableLookupLanes(hn::LoadU(df, codebook), low));
      } else {
        HWY_ALIGN float picked[hn::MaxLanes(df)];
        for (size_t i = 0; i < hn::Lanes(df); ++i) picked[i] = codebook[codes[size_t(j) + i]];
        values = hn::Load(df, picked);
      }
      Put<kBF16>(hn::Mul(values, scale), y, b * 64 + j);
    }
  }
}

void DequantizeQ8_0F32(const uint8_t* x, void* y, int64_t k) { DequantizeQ8_0<false>(x, y, k); }
void DequantizeNF4F32(const uint8_t* x, void* y, int64_t k) { DequantizeNF4<false>(x, y, k); }
void DequantizeNF4BF16(const uint8_t* x, void* y, int64_t k) { DequantizeNF4<true>(x, y, k); }
void DequantizeQ4_0F32(const uint8_t* x, void* y, int64_t k) { DequantizeQ4_0<false>(x, y, k); }
void DequantizeQ4KF32(const uint8_t* x, void* y, int64_t k) { DequantizeQ4K<false>(x, y, k); }
void DequantizeQ8_0BF16(const uint8_t* x, void* y, int64_t k) { DequantizeQ8_0<true>(x, y, k); }
void DequantizeQ4_0BF16(const uint8_t* x, void* y, int64_t k) { DequantizeQ4_0<true>(x, y, k); }
void DequantizeQ4KBF16(const uint8_t* x, void* y, int64_t k) { DequantizeQ4K<true>(x, y, k); }

}  // namespace HWY_NAMESPACE
}  // namespace foundry::quant
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::quant {
HWY_EXPORT(DequantizeQ8_0F32);
HWY_EXPORT(DequantizeQ4_0F32);
HWY_EXPORT(DequantizeQ4KF32);
HWY_EXPORT(DequantizeQ8_0BF16);
HWY_EXPORT(DequantizeQ4_0BF16);
HWY_EXPORT(DequantizeQ4KBF16);
HWY_EXPORT(DequantizeNF4F32);
HWY_EXPORT(DequantizeNF4BF16);

namespace {
#define FOUNDRY_DEQUANTIZER(name, kernel, out_type)                               \
  void name(const void* x, out_type* y, int64_t k) {                               \
    HWY_DYNAMIC_DISPATCH(kernel)(static_cast<const uint8_t*>(x), y, k);           \
  }
FOUNDRY_DEQUANTIZER(dequantize_q8_0_simd, DequantizeQ8_0F32, float)
FOUNDRY_DEQUANTIZER(dequantize_q4_0_simd, DequantizeQ4_0F32, float)
FOUNDRY_DEQUANTIZER(dequantize_q4_K_simd, DequantizeQ4KF32, float)
FOUNDRY_DEQUANTIZER(dequantize_q8_0_bf16, DequantizeQ8_0BF16, uint16_t)
FOUNDRY_DEQUANTIZER(dequantize_q4_0_bf16, DequantizeQ4_0BF16, uint16_t)
FOUNDRY_DEQUANTIZER(dequantize_q4_K_bf16, DequantizeQ4KBF16, uint16_t)
FOUNDRY_DEQUANTIZER(dequantize_nf4_simd, DequantizeNF4F32, float)
FOUNDRY_DEQUANTIZER(dequantize_nf4_bf16, DequantizeNF4BF16, uint16_t)
#undef FOUNDRY_DEQUANTIZER
}  // namespace

RowDequantizer fast_dequantizer(const BlockFormatTraits& t) {
  switch (t.format) {
    case BlockFormat::Q8_0: return dequantize_q8_0_simd;
    case BlockFormat::Q4_0: return dequantize_q4_0_simd;
    case BlockFormat::Q4_K: return dequantize_q4_K_simd;
    case BlockFormat::NF4: return dequantize_nf4_simd;
    default: return t.dequantize;
  }
}

BF16RowDequantizer bf16_dequantizer(const BlockFormatTraits& t) {
  switch (t.format) {
    case BlockFormat::Q8_0: return dequantize_q8_0_bf16;
    case BlockFormat::Q4_0: return dequantize_q4_0_bf16;
    case BlockFormat::Q4_K: return dequantize_q4_K_bf16;
    case BlockFormat::NF4: return dequantize_nf4_bf16;
    default: return nullptr;
  }
}
}  // namespace foundry::quant
#endif

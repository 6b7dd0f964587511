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

#include <cstring>
#include <vector>

#include "foundry/core/numeric.h"
#include "foundry/core/parallel.h"
#include "quant/q8_kernels.h"

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

}  // namespace HWY_NAMESPACE
}  // namespace foundry::quant
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::quant {

HWY_EXPORT(DotQ8Q8Scaled);

namespace {

const float* fp16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = Half::to_float(uint16_t(h));
    return t;
  }();
  return table.data();
}

std::vector<float> block_scales(const uint8_t* q, int64_t k) {
  std::vector<float> s(static_cast<size_t>(k / 32));
  for (int64_t b = 0; b < k / 32; ++b) {
    uint16_t h;
    std::memcpy(&h, q + b * 34, 2);
    s[size_t(b)] = fp16_table()[h];
  }
  return s;
}

}  // namespace

float dot_q8_0_q8_0(const void* x, const void* y, int64_t k) {
  const auto* yb = static_cast<const uint8_t*>(y);
  const std::vector<float> ys = block_scales(yb, k);
  return HWY_DYNAMIC_DISPATCH(DotQ8Q8Scaled)(static_cast<const uint8_t*>(x), yb, ys.data(), fp16_table(), k);
}

void gemv_q8_0(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  const std::vector<float> xs = block_scales(xb, k);
  const float* table = fp16_table();
  const int64_t row_bytes = k / 32 * 34;
  // ~64K weight bytes per chunk, so small products stay on one thread.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      y[r] = HWY_DYNAMIC_DISPATCH(DotQ8Q8Scaled)(base + r * row_bytes, xb, xs.data(), table, k);
  });
}

}  // namespace foundry::quant
#endif  // HWY_ONCE

// SIMD decode attention (see decode_attention.h). Highway, compiled per x86 target, chosen at run
// time. Scores go four positions at a time (four independent multiply-add chains over D), the
// value sum four vectors of D at a time over every position of the tile, each cached row widened
// from its stored type as it is loaded. Head dims that are not whole vectors finish in scalar code.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/decode_attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "foundry/core/numeric.h"
#include "kernels/cpu/decode_attention.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

template <KVRowType kType>
HWY_INLINE hn::Vec<DF> LoadRow(const uint8_t* row, int64_t i) {
  const DF d;
  if constexpr (kType == KVRowType::F32) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == KVRowType::F16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du32;
    const auto bits = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(row) + i));
    return hn::BitCast(d, hn::ShiftLeft<16>(bits));
  }
}

template <KVRowType kType>
HWY_INLINE float LoadScalar(const uint8_t* row, int64_t i) {
  return kv_value(row, i, kType);
}

constexpr int64_t kChunk = 64;  // positions scored before their values are summed

// The cached rows come from memory, not the caches: between a layer's attention at one token and at
// the next, the step streams every weight of the model, which evicts them. A head's rows are a few
// KB to a few hundred KB of consecutive memory, too short a run for the hardware prefetcher to
// reach full speed before it ends, so the key rows are fetched kAhead bytes before they are scored
// and each value row while its key is scored (its sum comes after the tile's scores).
constexpr int64_t kAhead = 2048;
HWY_INLINE void PrefetchBytes(const uint8_t* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
}

template <KVRowType kType>
void Tile(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale, const float* bias,
          int64_t bias_stride, float* m, float* l, float* acc) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t Dv = D / N * N;
  const auto* kb = static_cast<const uint8_t*>(tile.k);
  const auto* vb = static_cast<const uint8_t*>(tile.v);
  const int64_t stride = tile.stride;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  HWY_ALIGN float s[kChunk + 16];
  PrefetchBytes(kb, std::min(kAhead, tile.n * stride));
  for (int64_t j0 = 0; j0 < tile.n; j0 += kChunk) {
    const int64_t n = std::min(kChunk, tile.n - j0);
    for (int64_t r = 0; r < rep; ++r) {
      const float* qr = q + r * D;
      const float* br = bias ? bias + r * bias_stride + j0 : nullptr;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {
        const uint8_t* k0 = kb + (j0 + j) * stride;
        if (r == 0) {  // the other rows of a group meet the same rows in the cache
          PrefetchBytes(k0 + kAhead, 4 * stride);
          PrefetchBytes(vb + (j0 + j) * stride, 4 * stride);
        }
        auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
        for (int64_t i = 0; i < Dv; i += N) {
          const auto qv = hn::LoadU(d, qr + i);
          a0 = hn::MulAdd(LoadRow<kType>(k0, i), qv, a0);
          a1 = hn::MulAdd(LoadRow<kType>(k0 + stride, i), qv, a1);
          a2 = hn::MulAdd(LoadRow<kType>(k0 + 2 * stride, i), qv, a2);
          a3 = hn::MulAdd(LoadRow<kType>(k0 + 3 * stride, i), qv, a3);
        }
        float t[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), hn::GetLane(hn::SumOfLanes(d, a1)),
                      hn::GetLane(hn::SumOfLanes(d, a2)), hn::GetLane(hn::SumOfLanes(d, a3))};
        for (int64_t i = Dv; i < D; ++i)
          for (int u = 0; u < 4; ++u) t[u] += LoadScalar<kType>(k0 + u * stride, i) * qr[i];
        for (int u = 0; u < 4; ++u) s[j + u] = t[u] * scale + (br ? br[j + u] : 0.f);
      }
      for (; j < n; ++j) {
        const uint8_t* kr = kb + (j0 + j) * stride;
        auto a = hn::Zero(d);
        for (int64_t i = 0; i < Dv; i += N) a = hn::MulAdd(LoadRow<kType>(kr, i), hn::LoadU(d, qr + i), a);
        float t = hn::GetLane(hn::SumOfLanes(d, a));
        for (int64_t i = Dv; i < D; ++i) t += LoadScalar<kType>(kr, i) * qr[i];
        s[j] = t * scale + (br ? br[j] : 0.f);
      }
      float tile_max = kNegInf;
      for (j = 0; j < n; ++j) tile_max = std::max(tile_max, s[j]);
      const float m_new = std::max(m[r], tile_max);
      if (m_new == kNegInf) continue;  // nothing visible yet
      const float correction = std::exp(m[r] - m_new);
      // exp(s - m_new) a vector at a time; masked (-inf) positions and padding lanes give 0.
      for (j = n; j < (n + N - 1) / N * N; ++j) s[j] = kNegInf;
      const auto vm = hn::Set(d, m_new), floor = hn::Set(d, -87.0f);
      auto vsum = hn::Zero(d);
      for (j = 0; j < n; j += N) {
        const auto x = hn::Sub(hn::Load(d, s + j), vm);
        const auto e = hn::IfThenZeroElse(hn::Lt(x, floor), hn::Exp(d, hn::Max(x, floor)));
        hn::Store(e, d, s + j);
        vsum = hn::Add(vsum, e);
      }
      l[r] = l[r] * correction + hn::GetLane(hn::SumOfLanes(d, vsum));
      m[r] = m_new;
      float* ar = acc + r * D;
      const auto vc = hn::Set(d, correction);
      int64_t i = 0;
      for (; i + 4 * N <= Dv; i += 4 * N) {
        auto o0 = hn::Mul(hn::LoadU(d, ar + i), vc), o1 = hn::Mul(hn::LoadU(d, ar + i + N), vc);
        auto o2 = hn::Mul(hn::LoadU(d, ar + i + 2 * N), vc), o3 = hn::Mul(hn::LoadU(d, ar + i + 3 * N), vc);
        for (j = 0; j < n; ++j) {
          const uint8_t* vr = vb + (j0 + j) * stride;
          const auto p = hn::Set(d, s[j]);
          o0 = hn::MulAdd(p, LoadRow<kType>(vr, i), o0);
          o1 = hn::MulAdd(p, LoadRow<kType>(vr, i + N), o1);
          o2 = hn::MulAdd(p, LoadRow<kType>(vr, i + 2 * N), o2);
          o3 = hn::MulAdd(p, LoadRow<kType>(vr, i + 3 * N), o3);
        }
        hn::StoreU(o0, d, ar + i);
        hn::StoreU(o1, d, ar + i + N);
        hn::StoreU(o2, d, ar + i + 2 * N);
        hn::StoreU(o3, d, ar + i + 3 * N);
      }
      for (; i < Dv; i += N) {
        auto o = hn::Mul(hn::LoadU(d, ar + i), vc);
        for (j = 0; j < n; ++j) o = hn::MulAdd(hn::Set(d, s[j]), LoadRow<kType>(vb + (j0 + j) * stride, i), o);
        hn::StoreU(o, d, ar + i);
      }
      for (; i < D; ++i) {
        float o = ar[i] * correction;
        for (j = 0; j < n; ++j) o += s[j] * LoadScalar<kType>(vb + (j0 + j) * stride, i);
        ar[i] = o;
      }
    }
  }
}

void DecodeAttentionTile(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale,
                         const float* bias, int64_t bias_stride, float* m, float* l, float* acc) {
  switch (tile.type) {
    case KVRowType::F32: return Tile<KVRowType::F32>(q, rep, D, tile, scale, bias, bias_stride, m, l, acc);
    case KVRowType::F16: return Tile<KVRowType::F16>(q, rep, D, tile, scale, bias, bias_stride, m, l, acc);
    case KVRowType::BF16: return Tile<KVRowType::BF16>(q, rep, D, tile, scale, bias, bias_stride, m, l, acc);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(DecodeAttentionTile);

void decode_attention_tile(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale,
                           const float* bias, int64_t bias_stride, float* m, float* l, float* acc) {
  HWY_DYNAMIC_DISPATCH(DecodeAttentionTile)(q, rep, D, tile, scale, bias, bias_stride, m, l, acc);
}

void decode_attention_tile_ref(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale,
                               const float* bias, int64_t bias_stride, float* m, float* l, float* acc) {
  auto value = [&](const void* base, int64_t j, int64_t i) -> double {
    return kv_value(static_cast<const uint8_t*>(base) + j * tile.stride, i, tile.type);
  };
  std::vector<double> s(static_cast<size_t>(tile.n));
  for (int64_t r = 0; r < rep; ++r) {
    double tile_max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < tile.n; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double(q[r * D + i]) * value(tile.k, j, i);
      s[size_t(j)] = dot * scale + (bias ? bias[r * bias_stride + j] : 0.0);
      tile_max = std::max(tile_max, s[size_t(j)]);
    }
    const double m_new = std::max(double(m[r]), tile_max);
    if (m_new == -std::numeric_limits<double>::infinity()) continue;
    const double correction = std::exp(double(m[r]) - m_new);
    double sum = 0;
    for (int64_t j = 0; j < tile.n; ++j) sum += s[size_t(j)] = std::exp(s[size_t(j)] - m_new);
    l[r] = float(l[r] * correction + sum);
    m[r] = float(m_new);
    for (int64_t i = 0; i < D; ++i) {
      double o = acc[r * D + i] * correction;
      for (int64_t j = 0; j < tile.n; ++j) o += s[size_t(j)] * value(tile.v, j, i);
      acc[r * D + i] = float(o);
    }
  }
}
}  // namespace foundry::kernels
#endif

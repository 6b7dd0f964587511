// KVCache::append_and_attend: single-query attention over the cache for decoding, flash-decoding
// style. For each (batch row, kv head) the group of query heads that share it is scored against
// tiles of cached keys; a running maximum and sum rescale the partial softmax and the weighted sum
// of the value rows, so nothing of length S is materialised but one tile of scores. Quantized
// caches are read a tile at a time through the format's dequantize (no full dequantized copy).
#include <cmath>
#include <limits>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/gemm.h"
#include "models/hf/common.h"

namespace foundry::models {

namespace {
constexpr int64_t kTile = 64;
}  // namespace

Tensor KVCache::append_and_attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  FOUNDRY_CHECK_AS(ValueError, streams_attention(), "KVCache: streaming attention needs a float32 or block-format cache");
  FOUNDRY_CHECK_AS(ValueError, q.dim() == 4 && q.size(2) == 1 && k.size(2) == 1,
                   "KVCache::append_and_attend: one query position, got q {} and k {}", shape_str(q.sizes()),
                   shape_str(k.sizes()));
  store(layer, k, v);
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), Hkv = k.size(1), S = length_ + 1;
  const int64_t rep = H / Hkv;
  FOUNDRY_CHECK_AS(ValueError, D == head_dim_ && H % Hkv == 0 && k.size(0) == batch_,
                   "KVCache::append_and_attend: q {} does not match the cache (batch {}, head_dim {})",
                   shape_str(q.sizes()), batch_, head_dim_);
  Tensor qc = q.to(DType::Float32).contiguous();
  Tensor bc = bias.to(DType::Float32).contiguous();
  const bool per_head = bc.size(1) == H;
  FOUNDRY_CHECK_AS(ValueError, bc.size(-1) == S, "KVCache::append_and_attend: bias covers {} positions, the cache {}",
                   bc.size(-1), S);
  Tensor out = empty({B, 1, H * D}, DType::Float32);
  const quant::BlockFormatTraits* fmt = format_.empty() ? nullptr : &quant::traits(format_);
  const Tensor& ks = k_[size_t(layer)];
  const Tensor& vs = v_[size_t(layer)];
  const int64_t cap = capacity_, row = ks.size(3);
  const float scale = float(1.0 / std::sqrt(double(D)));
  parallel_for(0, B * Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> ktile(static_cast<size_t>(kTile * D)), vtile(static_cast<size_t>(kTile * D));
    std::vector<float> s(static_cast<size_t>(kTile)), acc(static_cast<size_t>(rep * D));
    std::vector<float> m(static_cast<size_t>(rep)), l(static_cast<size_t>(rep));
    for (int64_t bg = lo; bg < hi; ++bg) {
      const int64_t b = bg / Hkv;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.f);
      for (int64_t t0 = 0; t0 < S; t0 += kTile) {
        const int64_t n = std::min(kTile, S - t0);
        const float *kt, *vt;
        if (fmt) {
          const auto* kb = static_cast<const uint8_t*>(ks.data_ptr()) + (bg * cap + t0) * row;
          const auto* vb = static_cast<const uint8_t*>(vs.data_ptr()) + (bg * cap + t0) * row;
          for (int64_t j = 0; j < n; ++j) {
            fmt->dequantize(kb + j * row, ktile.data() + j * D, D);
            fmt->dequantize(vb + j * row, vtile.data() + j * D, D);
          }
          kt = ktile.data();
          vt = vtile.data();
        } else {
          kt = ks.data<float>() + (bg * cap + t0) * D;
          vt = vs.data<float>() + (bg * cap + t0) * D;
        }
        for (int64_t r = 0; r < rep; ++r) {
          const int64_t h = (bg % Hkv) * rep + r;
          const float* qr = qc.data<float>() + (b * H + h) * D;
          const float* br = bc.data<float>() + (b * (per_head ? H : 1) + (per_head ? h : 0)) * S + t0;
          kernels::gemv_rows_f32(kt, D, n, D, qr, s.data(), scale, 0.f, nullptr);
          float tile_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            s[size_t(j)] += br[j];
            tile_max = std::max(tile_max, s[size_t(j)]);
          }
          const float m_new = std::max(m[size_t(r)], tile_max);
          if (m_new == -std::numeric_limits<float>::infinity()) continue;  // nothing visible yet
          const float correction = std::exp(m[size_t(r)] - m_new);
          float sum = 0.f;
          for (int64_t j = 0; j < n; ++j) {
            s[size_t(j)] = std::exp(s[size_t(j)] - m_new);
            sum += s[size_t(j)];
          }
          l[size_t(r)] = l[size_t(r)] * correction + sum;
          m[size_t(r)] = m_new;
          float* a = acc.data() + r * D;
          kernels::gemv_cols_f32(vt, D, n, D, s.data(), a, 1.f, correction, nullptr);
        }
      }
      for (int64_t r = 0; r < rep; ++r) {
        const int64_t h = (bg % Hkv) * rep + r;
        float* o = out.data<float>() + b * H * D + h * D;
        const float inv = l[size_t(r)] > 0.f ? 1.f / l[size_t(r)] : 0.f;
        for (int64_t d = 0; d < D; ++d) o[d] = acc[size_t(r * D + d)] * inv;
      }
    }
  });
  return out.dtype() == q.dtype() ? out : out.to(q.dtype());
}

}  // namespace foundry::models

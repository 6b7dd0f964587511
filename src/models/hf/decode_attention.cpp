// KVCache::append_and_attend: single-query attention over the cache for decoding, flash-decoding
// style. For each (batch row, kv head) the group of query heads that share it is scored against
// tiles of cached keys; a running maximum and sum rescale the partial softmax and the weighted sum
// of the value rows, so nothing of length S is materialised but one tile of scores
// (kernels/cpu/decode_attention.h). float32 / f16 / bf16 caches are read in place; other formats a
// tile at a time through the format's dequantize (no full dequantized copy).
// Contiguous and paged caches differ only in where a row's positions live.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/unary.h"
#include "models/hf/common.h"
#include "quant/q8_kernels.h"

namespace foundry::models {

namespace {

constexpr int64_t kTile = 64;
// Cached positions a chunk of decode attention covers (see streaming_attention).
constexpr int64_t kSegment = 256;

// Where row b's cached positions live: `visible` positions, the first at bias column `offset`, and
// locate(b, kv_head, j) -> (key row pointer, value row pointer, positions contiguous from j).
struct RowLayout {
  std::function<int64_t(int64_t)> visible, offset;
  std::function<std::tuple<const uint8_t*, const uint8_t*, int64_t>(int64_t, int64_t, int64_t)> locate;
};

// fmt: the cache's block format, null for a cache of plain `stored` values (float32, bf16, f16).
// new_rows, where set, are stored inside the job (one new position: each row's last visible one).
Tensor streaming_attention(const Tensor& q, const Tensor& bias, int64_t Hkv, int64_t row_bytes,
                           const quant::BlockFormatTraits* fmt, DType stored, const RowLayout& layout,
                           const KVCacheRows* new_rows) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), rep = H / Hkv;
  Tensor qc = kernels::cast_rows(q, DType::Float32).contiguous();
  Tensor bc = kernels::cast_rows(bias, DType::Float32).contiguous();
  const bool per_head = bc.size(1) == H;
  const int64_t S = bc.size(-1);
  Tensor out = empty({B, 1, H * D}, DType::Float32);
  const float scale = float(1.0 / std::sqrt(double(D)));
  // float32 and 16-bit float caches (plain, or the f16 / bf16 formats) are read in place; other
  // formats a tile at a time through their dequantize.
  const bool f16 = fmt ? fmt->format == quant::BlockFormat::F16 : stored == DType::Float16;
  const bool bf16 = fmt ? fmt->format == quant::BlockFormat::BF16 : stored == DType::BFloat16;
  const bool in_place = !fmt || f16 || bf16;
  const kernels::KVRowType type = f16 ? kernels::KVRowType::F16 : bf16 ? kernels::KVRowType::BF16 : kernels::KVRowType::F32;
  const quant::RowDequantizer dequantize = in_place ? nullptr : quant::fast_dequantizer(*fmt);
  // Raw pointers for the chunks: a worker reading the tensors' headers would share their cache
  // lines with the caller, whose reference counting then waits for them to come back.
  const float* qdata = qc.data<float>();
  const float* bdata = bc.data<float>();
  float* odata = out.data<float>();
  // A chunk is one (row, kv head) over one segment of kSegment cached positions: each leaves its
  // partial running maximum, sum and weighted values, merged per query row below (flash decoding's
  // split over the sequence). With a whole (row, kv head) a chunk, a model with one kv head ran its
  // decode attention on one thread (Llama-110M's shape with 1 kv head, 2 threads, 2000 tokens after
  // a 32-token prompt: 456 -> 560 tokens/s, medians of 5 alternating runs), and with Llama-110M's
  // 12 the caller waited for the worker's last head at every layer (bench/decode_profile, 2
  // threads, 3 paired runs: the caller's pool share 8.4-9.2% -> 6.7-8.4%). The segments are fixed
  // by position, not by the thread count: the sums are the same bits however many threads run.
  const int64_t groups = B * Hkv;
  int64_t longest = 0, cached_rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    longest = std::max(longest, layout.visible(b));
    cached_rows += layout.visible(b);
  }
  const int64_t segments = std::max<int64_t>(1, (longest + kSegment - 1) / kSegment);
  thread_local std::vector<float> part_m, part_l, part_acc;  // the caller's, one slot a chunk
  part_m.resize(size_t(groups * segments * rep));
  part_l.resize(size_t(groups * segments * rep));
  part_acc.resize(size_t(groups * segments * rep * D));
  float* pm = part_m.data();
  float* pl = part_l.data();
  float* pacc = part_acc.data();
  // Query rows of (row, kv head) bg: its segments rescaled to their largest maximum, summed and
  // normalised. With one segment the chunk that ran it does this itself (the caller then runs
  // nothing serial between the job and the output projection); else the caller, after the job.
  const auto merge_group = [&](int64_t bg) {
    const int64_t b = bg / Hkv, g = bg % Hkv;
    for (int64_t r = 0; r < rep; ++r) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t seg = 0; seg < segments; ++seg) top = std::max(top, pm[(bg * segments + seg) * rep + r]);
      float* o = odata + b * H * D + (g * rep + r) * D;
      float sum = 0.f;
      std::fill(o, o + D, 0.f);
      for (int64_t seg = 0; seg < segments; ++seg) {
        const int64_t c = bg * segments + seg;
        const float lc = pl[c * rep + r];
        if (lc == 0.f) continue;  // no finite score in this segment
        const float w = segments == 1 ? 1.f : std::exp(pm[c * rep + r] - top);
        sum += lc * w;
        const float* a = pacc + (c * rep + r) * D;
        for (int64_t d = 0; d < D; ++d) o[d] += a[d] * w;
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    }
  };
  // The keys and values it reads: below kMinParallelBytes, one chunk on this thread.
  const int64_t grain = cached_rows * Hkv * 2 * row_bytes < kMinParallelBytes ? groups * segments : 1;
  parallel_for(0, groups * segments, grain, 64, [&](int64_t lo, int64_t hi) {
    // The running thread's scratch, reused from chunk to chunk (each is filled before it is read).
    thread_local std::vector<float> ktile, vtile;
    if (!in_place) ktile.resize(size_t(kTile * D)), vtile.resize(size_t(kTile * D));
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t bg = c / segments, seg = c % segments;
      const int64_t b = bg / Hkv, g = bg % Hkv, L = layout.visible(b), off = layout.offset(b);
      float* m = pm + c * rep;
      float* l = pl + c * rep;
      float* acc = pacc + c * rep * D;
      std::fill(acc, acc + rep * D, 0.f);
      std::fill(m, m + rep, -std::numeric_limits<float>::infinity());
      std::fill(l, l + rep, 0.f);
      const float* qg = qdata + (b * H + g * rep) * D;
      const float* bg_bias = bdata + (b * (per_head ? H : 1) + (per_head ? g * rep : 0)) * S + off;
      const int64_t stop = std::min(L, (seg + 1) * kSegment);
      if (new_rows && L > 0 && seg == (L - 1) / kSegment) new_rows->store(b, g);
      for (int64_t t0 = seg * kSegment; t0 < stop;) {
        auto [kb, vb, run] = layout.locate(b, g, t0);
        kernels::DecodeAttnTile tile;
        tile.n = std::min({kTile, stop - t0, run});
        if (in_place) {
          tile.k = kb, tile.v = vb, tile.stride = row_bytes, tile.type = type;
        } else {
          for (int64_t j = 0; j < tile.n; ++j) {
            dequantize(kb + j * row_bytes, ktile.data() + j * D, D);
            dequantize(vb + j * row_bytes, vtile.data() + j * D, D);
          }
          tile.k = ktile.data(), tile.v = vtile.data(), tile.stride = D * int64_t(sizeof(float));
        }
        kernels::decode_attention_tile(qg, rep, D, tile, scale, bg_bias + t0, per_head ? S : 0, m, l, acc);
        t0 += tile.n;
      }
      if (segments == 1) merge_group(bg);
    }
  });
  if (segments > 1)
    for (int64_t bg = 0; bg < groups; ++bg) merge_group(bg);
  return kernels::cast_rows(out, q.dtype());
}

}  // namespace

Tensor KVCache::append_and_attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  FOUNDRY_CHECK_AS(ValueError, streams_attention(),
                   "KVCache: streaming attention needs a float32, bfloat16, float16 or block-format cache");
  FOUNDRY_CHECK_AS(ValueError, q.dim() == 4 && q.size(2) == 1 && k.size(2) == 1,
                   "KVCache::append_and_attend: one query position, got q {} and k {}", shape_str(q.sizes()),
                   shape_str(k.sizes()));
  const int64_t H = q.size(1), D = q.size(3), Hkv = k.size(1);
  FOUNDRY_CHECK_AS(ValueError, D == head_dim_ && H % Hkv == 0 && k.size(0) == batch_,
                   "KVCache::append_and_attend: q {} does not match the cache (batch {}, head_dim {})",
                   shape_str(q.sizes()), batch_, head_dim_);
  FOUNDRY_CHECK_AS(ValueError, bias.size(-1) == length_ + 1,
                   "KVCache::append_and_attend: bias covers {} positions, the cache {}", bias.size(-1), length_ + 1);
  const quant::BlockFormatTraits* fmt = format_traits_;
  // The new rows stored inside the attention job (the store was serial between the products job
  // and this one) where the cache is contiguous and they need no conversion but the SIMD narrowing;
  // else (paged, or another dtype) store() first.
  KVCacheRows incoming;
  bool in_job = false;
  if (!paged()) {
    check_new_rows(layer, k, v);
    in_job = new_rows(layer, k, v, incoming);
  }
  if (!in_job) store(layer, k, v);
  const Tensor& ks = k_[size_t(layer)];
  const Tensor& vs = v_[size_t(layer)];
  const int64_t row = fmt ? ks.size(3) : D * int64_t(itemsize(ks.dtype()));
  const auto* kbase = static_cast<const uint8_t*>(ks.data_ptr());
  const auto* vbase = static_cast<const uint8_t*>(vs.data_ptr());
  RowLayout layout;
  if (!paged()) {
    const int64_t S = length_ + 1, cap = capacity_;
    layout.visible = [S](int64_t) { return S; };
    layout.offset = [](int64_t) { return int64_t(0); };
    layout.locate = [=](int64_t b, int64_t g, int64_t j) {
      const int64_t at = ((b * Hkv + g) * cap + j) * row;
      return std::make_tuple(kbase + at, vbase + at, S - j);
    };
  } else {
    // Row b: its sequence's positions (this token's included), right-aligned to the bias columns.
    std::vector<const Sequence*> rows;
    for (int64_t id : bound_) rows.push_back(&sequence(id));
    const int64_t S = length_ + 1, bs = block_size_;
    layout.visible = [rows](int64_t b) { return rows[size_t(b)]->length + 1; };
    layout.offset = [rows, S](int64_t b) { return S - (rows[size_t(b)]->length + 1); };
    layout.locate = [=](int64_t b, int64_t g, int64_t j) {
      const int64_t block = rows[size_t(b)]->blocks[size_t(j / bs)];
      const int64_t at = ((block * Hkv + g) * bs + j % bs) * row;
      return std::make_tuple(kbase + at, vbase + at, bs - j % bs);
    };
  }
  return streaming_attention(q, bias, Hkv, row, fmt, ks.dtype(), layout, in_job ? &incoming : nullptr);
}

}  // namespace foundry::models

// One step of single-query attention over cached keys and values, as decoding runs it: the query
// rows that share a kv head are scored against a tile of cached positions read in the cache's own
// element type (float32, float16 or bfloat16: no converted copy of the tile), and an online softmax
// (running maximum and sum) folds the tile into each row's unnormalised weighted sum of values.
#pragma once

#include <cstdint>
#include <cstring>

#include "foundry/core/numeric.h"

namespace foundry::kernels {

enum class KVRowType { F32, F16, BF16 };

/// Value i of a cached row stored as `type` (exact: 16-bit floats widen without rounding).
inline float kv_value(const uint8_t* row, int64_t i, KVRowType type) {
  if (type == KVRowType::F32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return type == KVRowType::F16 ? Half::to_float(h) : float(BFloat16::from_bits(h));
}

struct DecodeAttnTile {
  const void* k = nullptr;  // n key rows of D values, `stride` bytes apart
  const void* v = nullptr;  // n value rows, the same stride
  int64_t n = 0, stride = 0;
  KVRowType type = KVRowType::F32;
};

/// For each query row r < rep (q [rep, D]): scores s_j = scale * q_r . k_j + bias[r * bias_stride + j]
/// over the tile's n positions, then with m_r / l_r the running maximum / sum of exp(s - m_r) and
/// acc [rep, D] the running sum of exp(s_j - m_r) v_j: m_r = max(m_r, max_j s_j), l and acc rescaled
/// by exp(m_old - m_new), the tile's terms added. Positions scored -inf add nothing; a row with no
/// finite score yet is left as it was. Start with m = -inf, l = 0, acc = 0; the output is acc / l.
void decode_attention_tile(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale,
                           const float* bias, int64_t bias_stride, float* m, float* l, float* acc);
/// Scalar twin (double accumulation of the dot products, std::exp) for tests.
void decode_attention_tile_ref(const float* q, int64_t rep, int64_t D, const DecodeAttnTile& tile, float scale,
                               const float* bias, int64_t bias_stride, float* m, float* l, float* acc);

}  // namespace foundry::kernels

// The decode attention kernel (kernels/cpu/decode_attention_simd.cpp) against its scalar twin on
// every compiled Highway target the machine supports: float32, float16 and bfloat16 rows, head
// dims with and without a scalar tail, tiles that are not whole groups of four or one chunk,
// grouped queries with per-row biases (masked positions included), and a tile folded into a
// state carried over from an earlier one.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "foundry/core/numeric.h"
#include "kernels/cpu/decode_attention.h"
#include "each_target.h"

using namespace foundry;
using kernels::KVRowType;

namespace {

class DecodeAttentionEachTarget : public foundry_test::PerTarget {};
using foundry_test::target_name;

std::vector<float> values(size_t n, uint32_t seed) { return foundry_test::lcg_values(n, seed, 500.0f); }

// Rows of `src` stored as `type`, `stride` bytes apart.
std::vector<uint8_t> stored(const std::vector<float>& src, int64_t n, int64_t D, KVRowType type, int64_t stride) {
  std::vector<uint8_t> out(size_t(n * stride), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < D; ++i) {
      const float x = src[size_t(j * D + i)];
      uint8_t* at = out.data() + j * stride;
      if (type == KVRowType::F32) {
        std::memcpy(at + 4 * i, &x, 4);
      } else if (type == KVRowType::F16) {
        const uint16_t h = Half::from_float(x);
        std::memcpy(at + 2 * i, &h, 2);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        const auto h = uint16_t(bits >> 16);
        std::memcpy(at + 2 * i, &h, 2);
      }
    }
  return out;
}

}  // namespace

TEST_P(DecodeAttentionEachTarget, MatchesScalarTwin) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (KVRowType type : {KVRowType::F32, KVRowType::F16, KVRowType::BF16}) {
    const int64_t elem = type == KVRowType::F32 ? 4 : 2;
    for (int64_t D : {8, 40, 64, 80, 128}) {
      for (int64_t n : {1, 3, 4, 7, 64, 67, 130}) {
        for (int64_t rep : {1, 3}) {
          const int64_t stride = D * elem + 2 * elem;  // rows apart, as a cache's positions
          auto q = values(size_t(rep * D), uint32_t(D * 31 + n));
          auto k = values(size_t(n * D), uint32_t(n * 7 + D)), v = values(size_t(n * D), uint32_t(n * 13 + D + 1));
          auto kb = stored(k, n, D, type, stride), vb = stored(v, n, D, type, stride);
          auto bias = values(size_t(rep * n), 5);
          for (int64_t j = 1; j < n; j += 5) bias[size_t(j)] = ninf;  // row 0: masked positions
          kernels::DecodeAttnTile tile;
          tile.k = kb.data(), tile.v = vb.data(), tile.n = n, tile.stride = stride, tile.type = type;
          // State carried over from an earlier tile (row 1 has seen nothing yet).
          std::vector<float> m(size_t(rep), 1.5f), l(size_t(rep), 2.0f), acc = values(size_t(rep * D), 3);
          if (rep > 1) m[1] = ninf, l[1] = 0.f, std::fill(acc.begin() + D, acc.begin() + 2 * D, 0.f);
          auto m2 = m, l2 = l, acc2 = acc;
          const float scale = 1.f / std::sqrt(float(D));
          kernels::decode_attention_tile(q.data(), rep, D, tile, scale, bias.data(), n, m.data(), l.data(), acc.data());
          kernels::decode_attention_tile_ref(q.data(), rep, D, tile, scale, bias.data(), n, m2.data(), l2.data(),
                                             acc2.data());
          for (int64_t r = 0; r < rep; ++r) {
            ASSERT_NEAR(m[size_t(r)], m2[size_t(r)], 1e-4f * (1 + std::fabs(m2[size_t(r)])));
            ASSERT_NEAR(l[size_t(r)], l2[size_t(r)], 1e-4f * (1 + l2[size_t(r)]));
            for (int64_t i = 0; i < D; ++i)
              ASSERT_NEAR(acc[size_t(r * D + i)], acc2[size_t(r * D + i)], 1e-4f * (1 + std::fabs(acc2[size_t(r * D + i)])))
                  << "type " << int(type) << " D " << D << " n " << n << " rep " << rep << " r " << r << " i " << i;
          }
        }
      }
    }
  }
}

// A tile whose every score is -inf leaves the state as it was (nothing visible yet stays nothing).
TEST_P(DecodeAttentionEachTarget, FullyMaskedTileChangesNothing) {
  const int64_t D = 64, n = 5;
  auto q = values(size_t(D), 1), k = values(size_t(n * D), 2), v = values(size_t(n * D), 3);
  std::vector<float> bias(size_t(n), -std::numeric_limits<float>::infinity());
  kernels::DecodeAttnTile tile;
  tile.k = k.data(), tile.v = v.data(), tile.n = n, tile.stride = D * 4;
  float m = -std::numeric_limits<float>::infinity(), l = 0.f;
  std::vector<float> acc(size_t(D), 0.f);
  kernels::decode_attention_tile(q.data(), 1, D, tile, 0.125f, bias.data(), 0, &m, &l, acc.data());
  EXPECT_TRUE(std::isinf(m));
  EXPECT_EQ(l, 0.f);
  for (float a : acc) EXPECT_EQ(a, 0.f);
}

INSTANTIATE_TEST_SUITE_P(Targets, DecodeAttentionEachTarget, ::testing::ValuesIn(foundry::compiled_simd_targets()),
                         target_name);

// bf16 rows packed without loss (quant/bf16_packed.h, quant::WeightLayout::PackedBF16): every bit
// pattern unpacks to itself, and decode's products over the packed rows give the plain bf16 rows'
// sums. Named QuantKernels.* so that they also run as AVX2-only and SSE4 CPUs run them
// (tests/CMakeLists.txt, quant_kernels_under_max_isa_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/gemm.h"
#include "quant/bf16_packed.h"
#include "quant/q8_kernels.h"

using namespace foundry;
namespace q = foundry::quant;

namespace {

uint16_t bf16_of(float f) { return uint16_t(std::bit_cast<uint32_t>(f) >> 16); }
float float_of(uint16_t v) { return std::bit_cast<float>(uint32_t(v) << 16); }

// Normal weights (std 0.02, as initialised models hold), with blocks that cannot be packed mixed
// in: a block of zeros, one of subnormals, one spanning 2^-40..1, and one with an infinity.
std::vector<uint16_t> weights(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<uint16_t> w(size_t(rows * k));
  for (uint16_t& v : w) v = bf16_of(normal(rng));
  const int64_t blocks = rows * k / 64;
  std::fill_n(w.begin() + (blocks / 3) * 64, 64, uint16_t(0));
  for (int i = 0; i < 64; ++i) w[size_t((blocks / 2) * 64 + i)] = uint16_t(i + 1);  // exponent 0: subnormals
  w[size_t((blocks / 5) * 64 + 7)] = bf16_of(std::ldexp(1.f, -40));
  w[size_t((blocks / 7) * 64 + 3)] = bf16_of(INFINITY);
  return w;
}

std::vector<uint8_t> packed(const std::vector<uint16_t>& w, int64_t rows, int64_t k) {
  const q::PackedBF16Plan plan = q::plan_packed_bf16(w.data(), rows, k);
  std::vector<uint8_t> out(size_t(plan.bytes()));
  q::pack_bf16(w.data(), plan, out.data(), int64_t(out.size()));
  return out;
}

}  // namespace

TEST(QuantKernels, PackedBF16RowsUnpackToEveryBitPattern) {
  // All 65536 patterns (NaNs, infinities, zeros of both signs, subnormals), shuffled so blocks mix
  // them, then the same patterns sorted, so most blocks hold near exponents and pack.
  const int64_t rows = 64, k = 1024;
  std::vector<uint16_t> w(65536);
  std::iota(w.begin(), w.end(), uint16_t(0));
  for (bool sorted : {false, true}) {
    if (!sorted) std::shuffle(w.begin(), w.end(), std::mt19937(1));
    else std::sort(w.begin(), w.end());
    const std::vector<uint8_t> p = packed(w, rows, k);
    const int64_t escapes = q::plan_packed_bf16(w.data(), rows, k).escapes();
    EXPECT_GT(escapes, 0);
    if (sorted) EXPECT_LT(escapes, rows * k / 64 / 2);  // a block of sorted patterns mostly fits
    std::vector<uint16_t> back(static_cast<size_t>(k)), via_row_of(static_cast<size_t>(k));
    const auto& t = q::traits(q::BlockFormat::BF16);
    for (int64_t r = 0; r < rows; ++r) {
      q::unpack_bf16_row(p.data() + r * q::packed_bf16_row_bytes(k), k, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), w.data() + r * k, size_t(k) * 2)) << "sorted " << sorted << " row " << r;
      const uint8_t* row = q::row_of(t, q::WeightLayout::PackedBF16, p.data(), rows, k, r,
                                     reinterpret_cast<uint8_t*>(via_row_of.data()));
      ASSERT_EQ(0, std::memcmp(row, w.data() + r * k, size_t(k) * 2)) << r;
    }
  }
}

TEST(QuantKernels, PackedBF16TakesAQuarterLessMemory) {
  const int64_t rows = 256, k = 768;
  const std::vector<uint16_t> w = weights(rows, k, 2);
  const q::PackedBF16Plan plan = q::plan_packed_bf16(w.data(), rows, k);
  const int64_t escapes = plan.escapes();
  EXPECT_GE(escapes, 4);  // the planted blocks
  EXPECT_LT(escapes, rows * k / 64 / 50);  // normal weights pack (~0.5% of blocks do not)
  const double bits = 8.0 * double(plan.bytes()) / double(rows * k);
  EXPECT_LT(bits, 12.5);
  EXPECT_GT(bits, 12.0);
}

// gemv_many over packed rows against the plain bf16 rows: the same sums (the same order and
// vector width) where the AVX-512 kernel runs, the double-precision sum within float rounding
// elsewhere (the scalar form). Small matrices run one row at a time, large ones in four streams (quarters).
TEST(QuantKernels, PackedBF16ProductsEqualThePlainRows) {
  const auto& t = q::traits(q::BlockFormat::BF16);
  for (int64_t k : {int64_t(64), int64_t(768), int64_t(2048)}) {
    for (int64_t rows : {int64_t(3), int64_t(21), int64_t(301)}) {
      const std::vector<uint16_t> w = weights(rows, k, uint32_t(k + rows));
      const std::vector<uint8_t> p = packed(w, rows, k);
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.f, 1.f);
      std::vector<uint16_t> xq(static_cast<size_t>(k));
      for (uint16_t& v : xq) v = bf16_of(normal(rng));
      std::vector<float> plain(static_cast<size_t>(rows)), from_packed(static_cast<size_t>(rows));
      const q::GemvTarget plain_target{w.data(), rows, plain.data()}, packed_target{p.data(), rows, from_packed.data()};
      q::gemv_many(t, k, xq.data(), std::span<const q::GemvTarget>(&plain_target, 1), q::WeightLayout::Rows);
      q::gemv_many(t, k, xq.data(), std::span<const q::GemvTarget>(&packed_target, 1), q::WeightLayout::PackedBF16);
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0, scale = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double term = double(float_of(w[size_t(r * k + i)])) * double(float_of(xq[size_t(i)]));
          want += term;
          scale += std::fabs(term);
        }
        if (std::isinf(want) || std::isnan(want)) {  // the planted infinity
          EXPECT_TRUE(std::isinf(from_packed[size_t(r)]) || std::isnan(from_packed[size_t(r)])) << k << " " << r;
          continue;
        }
        EXPECT_NEAR(from_packed[size_t(r)], want, 1e-5 * scale + 1e-30) << "k " << k << " rows " << rows << " row " << r;
        if (q::packed_bf16_preferred())
          EXPECT_EQ(std::bit_cast<uint32_t>(from_packed[size_t(r)]), std::bit_cast<uint32_t>(plain[size_t(r)]))
              << "k " << k << " rows " << rows << " row " << r;
      }
    }
  }
}

TEST(QuantKernels, PackedBF16RefusesWhatItCannotHold) {
  const int64_t rows = 8, k = 128;
  std::vector<uint16_t> w = weights(rows, k, 3);
  w[5] = 0;  // block 0 of row 0 holds a zero among normal values: stored whole
  std::vector<uint8_t> p = packed(w, rows, k);
  ASSERT_EQ(p[0], 0) << "block 0 of row 0 is stored whole";
  // Its first nibble bytes (after the row's 32 header bytes) point at the tail, past the 8 rows.
  int64_t offset;
  std::memcpy(&offset, p.data() + 32, sizeof offset);
  EXPECT_EQ(32 + offset, 8 * q::packed_bf16_row_bytes(k));
  EXPECT_THROW(q::pack_bf16(w.data(), q::plan_packed_bf16(w.data(), rows, k), p.data(), int64_t(p.size()) - 1), ValueError);
  EXPECT_THROW(q::packed_bf16_row_bytes(100), ValueError);
}

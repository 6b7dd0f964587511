// The float32 matrix-vector kernels (kernels/cpu/gemv_simd.cpp) against their scalar twins, on
// every compiled Highway target the machine supports.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/parallel_testing.h"
#include "foundry/core/parallel.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/gemm.h"
#include "quant/q8_kernels.h"
#include "each_target.h"

using namespace foundry;

namespace {

class GemvEachTarget : public foundry_test::PerTarget {};
using foundry_test::target_name;

std::vector<float> values(size_t n, uint32_t seed) { return foundry_test::lcg_values(n, seed, 1000.0f); }

// v / 1000 as bf16 or f16 bits (bf16 by truncation).
std::vector<uint16_t> sixteen_bit(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = bf16 ? uint16_t(std::bit_cast<uint32_t>(v[i] / 1000.0f) >> 16) : Half(v[i] / 1000.0f).bits;
  return out;
}

// The double sum of x[k] * w[k * step] over the exactly widened 16-bit w, and the sum of the terms'
// magnitudes (the tolerance's scale).
std::pair<double, double> double_dot(const uint16_t* w, int64_t step, const float* x, int64_t K, bool bf16) {
  double want = 0, mag = 0;
  for (int64_t k = 0; k < K; ++k) {
    const uint16_t bits = w[k * step];
    const double v = bf16 ? double(std::bit_cast<float>(uint32_t(bits) << 16)) : double(Half::to_float(bits));
    want += double(x[k]) * v;
    mag += std::fabs(double(x[k]) * v);
  }
  return {want, mag};
}

}  // namespace

TEST_P(GemvEachTarget, MatchesScalarTwins) {
  for (int64_t R : {1, 3, 4, 5, 9, 64, 131}) {
    for (int64_t K : {1, 5, 15, 16, 17, 31, 33, 64, 100, 257}) {
      const int64_t lda = K + 5;
      auto A = values(size_t(R * lda), uint32_t(R * 977 + K));
      auto x = values(size_t(std::max(R, K)), 7);
      auto bias = values(size_t(std::max(R, K)), 11);
      auto y0 = values(size_t(std::max(R, K)) + 8, 13);
      for (float beta : {0.f, -0.75f}) {
        const float* b = beta != 0 ? bias.data() : nullptr;
        auto y1 = y0, y2 = y0;
        kernels::gemv_rows_f32(A.data(), lda, R, K, x.data(), y1.data(), 1.25f, beta, b);
        kernels::gemv_rows_f32_ref(A.data(), lda, R, K, x.data(), y2.data(), 1.25f, beta, b);
        for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 2e-6 * double(K) + 1e-6) << "rows R=" << R << " K=" << K;
        y1 = y0;
        y2 = y0;
        // cols form over the same memory: R rows of length K are now [K_rows = R, N = K]
        kernels::gemv_cols_f32(A.data(), lda, R, K, x.data(), y1.data(), 1.25f, beta, b);
        kernels::gemv_cols_f32_ref(A.data(), lda, R, K, x.data(), y2.data(), 1.25f, beta, b);
        for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 2e-6 * double(R) + 1e-6) << "cols R=" << R << " K=" << K;
      }
    }
  }
  // Products large enough to be cut into chunks across threads (chunk edges off the four-row
  // step, the prefetch running into the next chunk and stopping at the matrix's last rows).
  const int threads = get_num_threads();
  for (int t : {2, 3}) {
    set_num_threads(t);
    for (int64_t R : {1001, 4099}) {
      const int64_t K = 300, lda = K + 3;
      auto A = values(size_t(R * lda), uint32_t(R));
      auto x = values(size_t(K), 17);
      auto bias = values(size_t(R), 19);
      std::vector<float> y1(size_t(R), 0.5f), y2 = y1;
      kernels::gemv_rows_f32(A.data(), lda, R, K, x.data(), y1.data(), 0.5f, 2.f, bias.data());
      kernels::gemv_rows_f32_ref(A.data(), lda, R, K, x.data(), y2.data(), 0.5f, 2.f, bias.data());
      for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 2e-6 * double(K) + 1e-6) << "threads " << t << " R=" << R;
    }
  }
  set_num_threads(threads);
  // NaN and infinity propagate (no skipped zero terms).
  std::vector<float> A = {0.f, 1.f, 2.f, 3.f}, x = {INFINITY, 1.f}, y(2);
  kernels::gemv_rows_f32(A.data(), 2, 2, 2, x.data(), y.data(), 1.f, 0.f, nullptr);
  EXPECT_TRUE(std::isnan(y[0]));  // 0 * inf
  EXPECT_TRUE(std::isinf(y[1]));
}

// The bf16 and f16 columns form (GPT-2's Conv1D weights in a 16-bit checkpoint) against a double
// sum over the exactly widened weights: strips' vector and tail columns, row counts off the
// four-row step.
TEST_P(GemvEachTarget, SixteenBitColumnsMatchDoubleSums) {
  for (const bool bf16 : {true, false})
  for (int64_t K : {1, 3, 4, 7, 64, 301}) {
    for (int64_t N : {1, 15, 16, 17, 100, 1030, 2304}) {
      const int64_t lda = N + 3;
      const std::vector<uint16_t> A = sixteen_bit(values(size_t(K * lda), uint32_t(K * 31 + N)), bf16);
      auto x = values(size_t(K), 5);
      std::vector<float> y(size_t(N), -1.0f);
      kernels::gemv_cols_16(bf16, A.data(), lda, K, N, x.data(), y.data());
      for (int64_t n = 0; n < N; ++n) {
        const auto [want, mag] = double_dot(A.data() + n, lda, x.data(), K, bf16);
        ASSERT_NEAR(y[size_t(n)], want, 1e-6 * mag + 1e-6) << "bf16 " << bf16 << " K=" << K << " N=" << N << " n=" << n;
      }
    }
  }
}

// Ranges of 128 KB and more are read as four streams at once (GemvRows): every row's sum is the
// same bits as the row computed alone, so results do not depend on how threads cut the rows, and
// they match a double sum. Row counts off the four-stream step, rows with vector and scalar tails,
// padded rows; float32 through gemv_rows_f32 on one thread (one range), the 16-bit forms directly.
TEST_P(GemvEachTarget, FourStreamRangesMatchRowsComputedAlone) {
  const int threads = get_num_threads();
  set_num_threads(1);
  for (auto [R, K] : {std::pair<int64_t, int64_t>{131, 513}, {1027, 768}, {403, 171}}) {
    const int64_t lda = K + 3;
    auto A = values(size_t(R * lda), uint32_t(R + K));
    auto x = values(size_t(K), 23);
    auto bias = values(size_t(R), 29);
    ASSERT_GE(R * K * 2, kernels::kGemvFourStreamsBytes);  // the 16-bit ranges too
    std::vector<float> whole(size_t(R), 0.25f), alone = whole, ref = whole;
    kernels::gemv_rows_f32(A.data(), lda, R, K, x.data(), whole.data(), 0.5f, 2.f, bias.data());
    for (int64_t r = 0; r < R; ++r)
      kernels::gemv_rows_f32(A.data() + r * lda, lda, 1, K, x.data(), alone.data() + r, 0.5f, 2.f, bias.data() + r);
    kernels::gemv_rows_f32_ref(A.data(), lda, R, K, x.data(), ref.data(), 0.5f, 2.f, bias.data());
    for (int64_t r = 0; r < R; ++r) {
      ASSERT_EQ(std::bit_cast<uint32_t>(whole[size_t(r)]), std::bit_cast<uint32_t>(alone[size_t(r)])) << "f32 R=" << R << " row " << r;
      ASSERT_NEAR(whole[size_t(r)], ref[size_t(r)], 2e-6 * double(K) + 1e-6) << "f32 R=" << R << " row " << r;
    }
    for (const bool bf16 : {true, false}) {
      const std::vector<uint16_t> A16 = sixteen_bit(A, bf16);
      auto rows = bf16 ? kernels::gemv_rows_bf16_range : kernels::gemv_rows_f16_range;
      std::vector<float> y(size_t(R), -1.f), y1(size_t(R), -1.f);
      rows(A16.data(), lda, 0, R, K, x.data(), y.data());
      for (int64_t r = 0; r < R; ++r) rows(A16.data(), lda, r, r + 1, K, x.data(), y1.data());
      for (int64_t r = 0; r < R; ++r) {
        const auto [want, mag] = double_dot(A16.data() + r * lda, 1, x.data(), K, bf16);
        ASSERT_EQ(std::bit_cast<uint32_t>(y[size_t(r)]), std::bit_cast<uint32_t>(y1[size_t(r)]))
            << "bf16 " << bf16 << " R=" << R << " row " << r;
        ASSERT_NEAR(y[size_t(r)], want, 1e-6 * mag + 1e-6) << "bf16 " << bf16 << " R=" << R << " row " << r;
      }
    }
  }
  set_num_threads(threads);
}

INSTANTIATE_TEST_SUITE_P(Targets, GemvEachTarget, ::testing::ValuesIn(foundry::compiled_simd_targets()),
                         target_name);

// A matrix-vector product reading less than kMinParallelBytes of weights runs on the calling
// thread (a pool job costs more than a second thread saves on it); a larger one is split. Float32,
// 16-bit (the four-stream form from 128 KB) and a block format, each just below and above.
TEST(GemvThreads, SmallProductsStayOnTheCallingThread) {
  const int saved = get_num_threads();
  set_num_threads(2);
  set_pool_adapts_to_load(false);  // a busy machine must not send the large products to one thread
  const int64_t K = 256;
  std::vector<float> A(size_t(4096 * K), 0.5f), x(size_t(K), 1.f), y(4096);
  std::vector<uint16_t> A16(size_t(4096 * K), 0);
  const auto& q4 = quant::traits("q4_0");
  std::vector<uint8_t> wq(size_t(quant::quantized_bytes(q4, 4096, K)), 0), xq(size_t(quant::quantized_bytes(quant::traits("q8_0"), 1, K)), 0);
  const auto jobs = [](const std::function<void(int64_t rows)>& product, int64_t rows) {
    const uint64_t before = foundry::testing::pool_jobs();
    product(rows);
    return foundry::testing::pool_jobs() - before;
  };
  const auto f32 = [&](int64_t R) { kernels::gemv_rows_f32(A.data(), K, R, K, x.data(), y.data(), 1.f, 0.f, nullptr); };
  const auto f16 = [&](int64_t R) { kernels::gemv_rows_16(false, A16.data(), K, R, K, x.data(), y.data()); };
  const auto q4_0 = [&](int64_t R) { quant::gemv(q4, wq.data(), R, K, xq.data(), y.data()); };
  const int64_t q4_row = quant::quantized_bytes(q4, 1, K);
  EXPECT_EQ(jobs(f32, kMinParallelBytes / (4 * K)), 0u);        // 256 KB: one thread
  EXPECT_GE(jobs(f32, 2 * kMinParallelBytes / (4 * K)), 1u);    // 512 KB: split
  EXPECT_EQ(jobs(f16, kMinParallelBytes / (2 * K) - 8), 0u);    // 252 KB in four streams: one thread
  EXPECT_GE(jobs(f16, kMinParallelBytes / (2 * K)), 1u);        // 256 KB: split
  EXPECT_EQ(jobs(q4_0, kMinParallelBytes / q4_row - 8), 0u);
  EXPECT_GE(jobs(q4_0, 2 * kMinParallelBytes / q4_row), 1u);
  set_pool_adapts_to_load(true);
  set_num_threads(saved);
}

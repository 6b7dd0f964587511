// Matrix-vector kernels for float32 (decode-time products: one token times a weight matrix).
// They are memory bound, so the aim is to stream the matrix once at full bandwidth:
//  - rows form  y = A x   (A row-major): four rows at a time, two accumulators per row, so eight
//    independent FMA chains share each load of x;
//  - cols form  y = x A   (A row-major, i.e. x @ W with W [K, N]): four rows of A are swept
//    contiguously per step into a column strip of y kept in L1, so the matrix is read in long
//    sequential runs and y is loaded/stored once per four rows.
// Threads split the output (rows, or column strips), so each thread reads a disjoint part of A.
// The scalar twins at the bottom define the contract; tests compare both on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemv_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "foundry/core/parallel.h"
#include "kernels/cpu/gemm.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float finish(float acc, float alpha, float beta, const float* y, const float* bias) {
  float v = alpha * acc;
  if (beta != 0.f) v += beta * *y;
  if (bias) v += *bias;
  return v;
}

// Four rows' dot products with x, each in two accumulators. With kPrefetch, the same columns of
// the next four rows are fetched while these are read: rows of a few KB end before the hardware
// prefetcher has ramped up on them. (A template parameter, not a branch in the loop: the loop
// with a test per step measured ~5% slower on a Zen 5.)
template <bool kPrefetch, class D, class V>
HWY_INLINE void Dot4Rows(D d, const float* a0, int64_t lda, int64_t K, const float* x, int64_t& k, V& s00, V& s01,
                         V& s10, V& s11, V& s20, V& s21, V& s30, V& s31) {
  const int64_t N = int64_t(hn::Lanes(d));
  const float* a1 = a0 + lda;
  const float* a2 = a1 + lda;
  const float* a3 = a2 + lda;
  const char* next = reinterpret_cast<const char*>(a0 + 4 * lda);
  const int64_t row_bytes = lda * int64_t(sizeof(float));
  for (; k + 2 * N <= K; k += 2 * N) {
    if constexpr (kPrefetch) {
      const char* p = next + k * int64_t(sizeof(float));
      for (int64_t row = 0; row < 4; ++row) {
        __builtin_prefetch(p + row * row_bytes);
        __builtin_prefetch(p + row * row_bytes + 64);
      }
    }
    const auto x0 = hn::LoadU(d, x + k), x1 = hn::LoadU(d, x + k + N);
    s00 = hn::MulAdd(hn::LoadU(d, a0 + k), x0, s00);
    s01 = hn::MulAdd(hn::LoadU(d, a0 + k + N), x1, s01);
    s10 = hn::MulAdd(hn::LoadU(d, a1 + k), x0, s10);
    s11 = hn::MulAdd(hn::LoadU(d, a1 + k + N), x1, s11);
    s20 = hn::MulAdd(hn::LoadU(d, a2 + k), x0, s20);
    s21 = hn::MulAdd(hn::LoadU(d, a2 + k + N), x1, s21);
    s30 = hn::MulAdd(hn::LoadU(d, a3 + k), x0, s30);
    s31 = hn::MulAdd(hn::LoadU(d, a3 + k + N), x1, s31);
  }
}

// Rows [r0, r1) of y = alpha * A x + beta * y (+ bias); rows up to `rows` exist, so the prefetch
// runs on past r1 into the next chunk (usually this thread's next one).
void GemvRowsF32(const float* A, int64_t lda, int64_t r0, int64_t r1, int64_t rows, int64_t K, const float* x,
                 float* y, float alpha, float beta, const float* bias) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const float* a0 = A + r * lda;
    const float* a1 = a0 + lda;
    const float* a2 = a1 + lda;
    const float* a3 = a2 + lda;
    auto s00 = hn::Zero(d), s01 = hn::Zero(d), s10 = hn::Zero(d), s11 = hn::Zero(d);
    auto s20 = hn::Zero(d), s21 = hn::Zero(d), s30 = hn::Zero(d), s31 = hn::Zero(d);
    int64_t k = 0;
    if (r + 8 <= rows) Dot4Rows<true>(d, a0, lda, K, x, k, s00, s01, s10, s11, s20, s21, s30, s31);
    else Dot4Rows<false>(d, a0, lda, K, x, k, s00, s01, s10, s11, s20, s21, s30, s31);
    for (; k + N <= K; k += N) {
      const auto x0 = hn::LoadU(d, x + k);
      s00 = hn::MulAdd(hn::LoadU(d, a0 + k), x0, s00);
      s10 = hn::MulAdd(hn::LoadU(d, a1 + k), x0, s10);
      s20 = hn::MulAdd(hn::LoadU(d, a2 + k), x0, s20);
      s30 = hn::MulAdd(hn::LoadU(d, a3 + k), x0, s30);
    }
    float t0 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s00, s01)));
    float t1 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s10, s11)));
    float t2 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s20, s21)));
    float t3 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s30, s31)));
    for (; k < K; ++k) {
      t0 += a0[k] * x[k];
      t1 += a1[k] * x[k];
      t2 += a2[k] * x[k];
      t3 += a3[k] * x[k];
    }
    y[r] = finish(t0, alpha, beta, y + r, bias ? bias + r : nullptr);
    y[r + 1] = finish(t1, alpha, beta, y + r + 1, bias ? bias + r + 1 : nullptr);
    y[r + 2] = finish(t2, alpha, beta, y + r + 2, bias ? bias + r + 2 : nullptr);
    y[r + 3] = finish(t3, alpha, beta, y + r + 3, bias ? bias + r + 3 : nullptr);
  }
  for (; r < r1; ++r) {
    const float* a0 = A + r * lda;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t k = 0;
    for (; k + 2 * N <= K; k += 2 * N) {
      s0 = hn::MulAdd(hn::LoadU(d, a0 + k), hn::LoadU(d, x + k), s0);
      s1 = hn::MulAdd(hn::LoadU(d, a0 + k + N), hn::LoadU(d, x + k + N), s1);
    }
    for (; k + N <= K; k += N) s0 = hn::MulAdd(hn::LoadU(d, a0 + k), hn::LoadU(d, x + k), s0);
    float t0 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
    for (; k < K; ++k) t0 += a0[k] * x[k];
    y[r] = finish(t0, alpha, beta, y + r, bias ? bias + r : nullptr);
  }
}

// Columns [n0, n1) of y = alpha * x A + beta * y (+ bias), A [K, *] row-major.
void GemvColsF32(const float* A, int64_t lda, int64_t K, int64_t n0, int64_t n1, const float* x, float* y,
                 float alpha, float beta, const float* bias) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  constexpr int64_t kStrip = 1024;  // floats of y per strip (4 KiB, stays in L1)
  HWY_ALIGN float acc[kStrip];
  for (int64_t s0 = n0; s0 < n1; s0 += kStrip) {
    const int64_t W = std::min(kStrip, n1 - s0);
    const int64_t Wv = W - W % N;  // vectorised part
    std::fill(acc, acc + W, 0.f);
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
      const float* a0 = A + k * lda + s0;
      const float* a1 = a0 + lda;
      const float* a2 = a1 + lda;
      const float* a3 = a2 + lda;
      const auto x0 = hn::Set(d, x[k]), x1 = hn::Set(d, x[k + 1]), x2 = hn::Set(d, x[k + 2]),
                 x3 = hn::Set(d, x[k + 3]);
      for (int64_t j = 0; j < Wv; j += N) {
        auto v = hn::Load(d, acc + j);
        v = hn::MulAdd(x0, hn::LoadU(d, a0 + j), v);
        v = hn::MulAdd(x1, hn::LoadU(d, a1 + j), v);
        v = hn::MulAdd(x2, hn::LoadU(d, a2 + j), v);
        v = hn::MulAdd(x3, hn::LoadU(d, a3 + j), v);
        hn::Store(v, d, acc + j);
      }
      for (int64_t j = Wv; j < W; ++j) acc[j] += x[k] * a0[j] + x[k + 1] * a1[j] + x[k + 2] * a2[j] + x[k + 3] * a3[j];
    }
    for (; k < K; ++k) {
      const float* a0 = A + k * lda + s0;
      const auto x0 = hn::Set(d, x[k]);
      for (int64_t j = 0; j < Wv; j += N) hn::Store(hn::MulAdd(x0, hn::LoadU(d, a0 + j), hn::Load(d, acc + j)), d, acc + j);
      for (int64_t j = Wv; j < W; ++j) acc[j] += x[k] * a0[j];
    }
    for (int64_t j = 0; j < W; ++j)
      y[s0 + j] = finish(acc[j], alpha, beta, y + s0 + j, bias ? bias + s0 + j : nullptr);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(GemvRowsF32);
HWY_EXPORT(GemvColsF32);

namespace {
// Work per thread chunk: at least ~64K multiply-adds so small products stay on one thread.
constexpr int64_t kGemvGrainMacs = 65536;
// The rows form: chunks of ~16K multiply-adds (24 rows of 768), 16 per thread. Its chunks cost
// nothing to start, and the 4 default chunks of a 768 x 768 product (~300 KB each) left the first
// thread done waiting up to a chunk's time at each of RWKV's 85 products per token (alternating
// A/B, 2 threads: RWKV decode +5%, Llama float32 decode +6%, median of 5).
constexpr int64_t kGemvGrainRowMacs = kGemvGrainMacs / 4;
constexpr int kGemvChunksPerThread = 16;
}  // namespace

void gemv_rows_f32(const float* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y, float alpha,
                   float beta, const float* bias) {
  if (R * K <= kGemvGrainMacs) {  // as before the finer chunks: small products stay on one thread
    HWY_DYNAMIC_DISPATCH(GemvRowsF32)(A, lda, 0, R, R, K, x, y, alpha, beta, bias);
    return;
  }
  int64_t grain = std::max<int64_t>(4, kGemvGrainRowMacs / std::max<int64_t>(K, 1));
  grain = (grain + 3) / 4 * 4;
  parallel_for(0, R, grain, kGemvChunksPerThread, [&](int64_t b, int64_t e) {
    HWY_DYNAMIC_DISPATCH(GemvRowsF32)(A, lda, b, e, R, K, x, y, alpha, beta, bias);
  });
}

void gemv_cols_f32(const float* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y, float alpha,
                   float beta, const float* bias) {
  // Threads take strips of whole 64-column units, so every strip but the last is vector aligned.
  constexpr int64_t kUnit = 64;
  int64_t units = (N + kUnit - 1) / kUnit;
  int64_t grain = std::max<int64_t>(1, kGemvGrainMacs / std::max<int64_t>(K * kUnit, 1));
  parallel_for(0, units, grain, [&](int64_t b, int64_t e) {
    HWY_DYNAMIC_DISPATCH(GemvColsF32)(A, lda, K, b * kUnit, std::min(N, e * kUnit), x, y, alpha, beta, bias);
  });
}

void gemv_rows_f32_ref(const float* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y, float alpha,
                       float beta, const float* bias) {
  for (int64_t r = 0; r < R; ++r) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(A[r * lda + k]) * double(x[k]);
    float v = alpha * float(s);
    if (beta != 0.f) v += beta * y[r];
    if (bias) v += bias[r];
    y[r] = v;
  }
}

void gemv_cols_f32_ref(const float* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y, float alpha,
                       float beta, const float* bias) {
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(x[k]) * double(A[k * lda + n]);
    float v = alpha * float(s);
    if (beta != 0.f) v += beta * y[n];
    if (bias) v += bias[n];
    y[n] = v;
  }
}

}  // namespace foundry::kernels
#endif

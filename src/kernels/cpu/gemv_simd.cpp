// Matrix-vector kernels for float32 (decode-time products: one token times a weight matrix).
// They are memory bound, so the aim is to stream the matrix once at full bandwidth:
//  - rows form  y = A x   (A row-major): each row a sequential stream into two accumulators,
//    prefetched ahead with prefetchnta; a long range of rows is read as four such streams at once,
//    one per quarter of it (GemvRows). Four adjacent rows interleaved with the next rows prefetched
//    into L1 streamed 11-12% slower in float32 decode than one row at a time (bf16 rows the same);
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
#include <bit>
#include <type_traits>

#include "foundry/core/numeric.h"
#include "foundry/core/parallel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"

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

// The weight stream kAhead bytes past p, fetched without polluting the caches that the activation
// and the step's other data live in (prefetchnta: one-row kernels with it read ~40 GB/s at 1 thread
// on a Zen 5 against ~32 without and ~25 with prefetcht0 at the same distance, in a loop over
// Llama-110M's bf16 matrices on huge pages). `bytes` is one loop step's weights.
constexpr int64_t kStreamAhead = 2048;

template <int64_t kAhead = kStreamAhead>
HWY_INLINE void PrefetchAhead(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p) + kAhead;
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 0);
}

// The rows form (y = A x, A row-major) of every element type: float32, and 16-bit floats (raw
// bits; T = hwy::bfloat16_t or hwy::float16_t) widened to float32 (bf16: a shift; f16: vcvtph2ps on
// x86) against a float32 x. On a Zen 5 the bf16 form streams ~37 GB/s from memory at 1 thread where
// vdpbf16ps against a bf16 x, four rows at a time with the next rows prefetched, read ~22 (a
// standalone loop over Llama-110M's matrices; the widening costs nothing beside the memory stream,
// and x stays float32).
//
// A range of at least kGemvFourStreamsBytes is read as four streams at once, one per quarter of it, each
// prefetched kStreamAhead bytes ahead: one core keeps more reads in flight across four streams than
// along one (Llama-110M's matrices, 1 thread, products alone beside a plain sum of as many bytes,
// bench_infer --products, alternating processes: f16 25.0-28.7 -> 33.6-35.8 GB/s, bf16 24.0-28.3
// -> 30.0-36.1; a standalone loop: one stream 27-33 GB/s, four 34-36, two or eight slower than four;
// a range of 63 KB (a 2-thread chunk) gained nothing, 126 KB +15%). Every row sums in the same
// order whichever way it was read (two accumulators over pairs of vectors, then one, then the
// scalar tail), so the results do not depend on the thread count's chunks.

template <typename T, class D>
HWY_INLINE hn::Vec<D> LoadWidened(D d, const T* p) {
  if constexpr (std::is_same_v<T, float>) return hn::LoadU(d, p);
  else return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
}

template <typename T>
HWY_INLINE float widened(const T* p) {
  if constexpr (std::is_same_v<T, float>) return *p;
  else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) return std::bit_cast<float>(uint32_t(reinterpret_cast<const uint16_t&>(*p)) << 16);
  else return Half::to_float(reinterpret_cast<const uint16_t&>(*p));
}

// The rest of row a's dot product with x from column i on, given its two accumulators.
template <typename T, class V>
HWY_INLINE float RowDotFinish(const T* a, int64_t i, int64_t K, const float* x, V s0, V s1) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (; i + N <= K; i += N) s0 = hn::MulAdd(LoadWidened(d, a + i), hn::LoadU(d, x + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < K; ++i) sum += widened(a + i) * x[i];
  return sum;
}

// Rows [r0, r1), one after the other, prefetched kAhead bytes ahead (PrefetchAhead, which runs on
// into the next rows); store(r, dot) writes row r's result.
template <int64_t kAhead, typename T, class Store>
void RowsOneStream(const T* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x, const Store& store) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = r0; r < r1; ++r) {
    const T* a = A + r * lda;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= K; i += 2 * N) {
      PrefetchAhead<kAhead>(a + i, 2 * N * sizeof(T));
      s0 = hn::MulAdd(LoadWidened(d, a + i), hn::LoadU(d, x + i), s0);
      s1 = hn::MulAdd(LoadWidened(d, a + i + N), hn::LoadU(d, x + i + N), s1);
    }
    store(r, RowDotFinish(a, i, K, x, s0, s1));
  }
}

// Rows first + s * stride + j for s < 4, j < count: four streams, one row of each at a time.
template <typename T, class Store>
void RowsFourStreams(const T* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K, const float* x,
                     const Store& store) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t r0 = first + j;
    const T* a0 = A + r0 * lda;
    const T* a1 = a0 + stride * lda;
    const T* a2 = a1 + stride * lda;
    const T* a3 = a2 + stride * lda;
    auto s00 = hn::Zero(d), s01 = hn::Zero(d), s10 = hn::Zero(d), s11 = hn::Zero(d);
    auto s20 = hn::Zero(d), s21 = hn::Zero(d), s30 = hn::Zero(d), s31 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= K; i += 2 * N) {
      for (const T* a : {a0, a1, a2, a3}) PrefetchAhead<kStreamAhead>(a + i, 2 * N * sizeof(T));
      const auto x0 = hn::LoadU(d, x + i), x1 = hn::LoadU(d, x + i + N);
      s00 = hn::MulAdd(LoadWidened(d, a0 + i), x0, s00);
      s10 = hn::MulAdd(LoadWidened(d, a1 + i), x0, s10);
      s20 = hn::MulAdd(LoadWidened(d, a2 + i), x0, s20);
      s30 = hn::MulAdd(LoadWidened(d, a3 + i), x0, s30);
      s01 = hn::MulAdd(LoadWidened(d, a0 + i + N), x1, s01);
      s11 = hn::MulAdd(LoadWidened(d, a1 + i + N), x1, s11);
      s21 = hn::MulAdd(LoadWidened(d, a2 + i + N), x1, s21);
      s31 = hn::MulAdd(LoadWidened(d, a3 + i + N), x1, s31);
    }
    store(r0, RowDotFinish(a0, i, K, x, s00, s01));
    store(r0 + stride, RowDotFinish(a1, i, K, x, s10, s11));
    store(r0 + 2 * stride, RowDotFinish(a2, i, K, x, s20, s21));
    store(r0 + 3 * stride, RowDotFinish(a3, i, K, x, s30, s31));
  }
}

template <int64_t kAhead, typename T, class Store>
void GemvRows(const T* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x, const Store& store) {
  if ((r1 - r0) * K * int64_t(sizeof(T)) >= kGemvFourStreamsBytes) {
    const int64_t q = (r1 - r0) / 4;
    RowsFourStreams(A, lda, r0, q, q, K, x, store);
    r0 += 4 * q;
  }
  RowsOneStream<kAhead>(A, lda, r0, r1, K, x, store);
}

// Rows [r0, r1) of y = alpha * A x + beta * y (+ bias).
void GemvRowsF32(const float* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x,
                 float* y, float alpha, float beta, const float* bias) {
  GemvRows<kStreamAhead>(A, lda, r0, r1, K, x, [&](int64_t r, float dot) {
    y[r] = finish(dot, alpha, beta, y + r, bias ? bias + r : nullptr);
  });
}

// The same for rows first + s * stride + j, s < 4, j < count (RowsFourStreams).
void GemvQuartersF32(const float* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                     const float* x, float* y, float alpha, float beta, const float* bias) {
  RowsFourStreams(A, lda, first, stride, count, K, x, [&](int64_t r, float dot) {
    y[r] = finish(dot, alpha, beta, y + r, bias ? bias + r : nullptr);
  });
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

// Rows [r0, r1) of y = A x for 16-bit rows (lda apart), GemvRows above.
// f16's single stream runs 8 KB ahead: f16 Llama-110M decode, 8 KB against 2 KB alternating in one
// process (a process's memory streams at its own speed on this host), median of the pairs: 1 thread
// +3.7 / +14.1 / +9.5 / +4.7%, 2 threads -1.7 / +5.4%; bf16 at 8 KB: 1 thread +0.3 / -1.8 / +0.9 /
// +2.3%, 2 threads -2.8 / -0.9%, so it keeps 2 KB.
template <typename H>
void GemvRows16(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x, float* y) {
  constexpr int64_t kAhead = std::is_same_v<H, hwy::float16_t> ? 8192 : kStreamAhead;
  GemvRows<kAhead>(reinterpret_cast<const H*>(A), lda, r0, r1, K, x, [y](int64_t r, float dot) { y[r] = dot; });
}

template <typename H>
void GemvQuarters16(const uint16_t* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                    const float* x, float* y) {
  RowsFourStreams(reinterpret_cast<const H*>(A), lda, first, stride, count, K, x, [y](int64_t r, float dot) { y[r] = dot; });
}

// Columns [n0, n1) of y = x A for 16-bit A [K, *] row-major (a GPT-2 Conv1D weight; H as
// GemvRows16's): GemvColsF32's strips, each row segment widened before its multiply-add.
template <typename H>
void GemvCols16(const uint16_t* A, int64_t lda, int64_t K, int64_t n0, int64_t n1, const float* x, float* y) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  constexpr int64_t kStrip = 4096;  // 8 KB of each row per pass, 16 KB of sums in L1
  // Each pass prefetches (prefetchnta) the next pass's eight rows, a line of each per 64 bytes of
  // the strip: eight streams a row apart are more than the hardware prefetcher keeps ahead of.
  // GPT-2 124M f16 / bf16 checkpoints, decode, with and without it alternating in one process
  // (8 pairs each): 1 thread +13.9% / +13.2%, 2 threads +7.4% / +9.0%, 31 of 32 pairs faster; two
  // passes ahead instead: 1 thread -0.4% (f16) / +6.5% (bf16), 2 threads -4.9% (f16).
  constexpr int64_t kLineValues = 64 / int64_t(sizeof(uint16_t));
  HWY_ALIGN float acc[kStrip];
  const H* values = reinterpret_cast<const H*>(A);
  auto row = [&](int64_t k, int64_t j) { return LoadWidened(d, values + k * lda + j); };
  auto widen = [&](int64_t k, int64_t j) { return widened(values + k * lda + j); };
  for (int64_t s0 = n0; s0 < n1; s0 += kStrip) {
    const int64_t W = std::min(kStrip, n1 - s0);
    const int64_t Wv = W - W % N;
    std::fill(acc, acc + W, 0.f);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {  // eight rows per pass over the accumulators (four: 10% slower)
      const bool prefetch_next = k + 16 <= K;
      const auto x0 = hn::Set(d, x[k]), x1 = hn::Set(d, x[k + 1]), x2 = hn::Set(d, x[k + 2]), x3 = hn::Set(d, x[k + 3]);
      const auto x4 = hn::Set(d, x[k + 4]), x5 = hn::Set(d, x[k + 5]), x6 = hn::Set(d, x[k + 6]), x7 = hn::Set(d, x[k + 7]);
      for (int64_t j = 0; j < Wv; j += N) {
        if (prefetch_next && j % kLineValues == 0)
          for (int64_t i = 8; i < 16; ++i) __builtin_prefetch(A + (k + i) * lda + s0 + j, 0, 0);
        auto v = hn::Mul(x0, row(k, s0 + j));
        auto u = hn::Mul(x1, row(k + 1, s0 + j));
        v = hn::MulAdd(x2, row(k + 2, s0 + j), v);
        u = hn::MulAdd(x3, row(k + 3, s0 + j), u);
        v = hn::MulAdd(x4, row(k + 4, s0 + j), v);
        u = hn::MulAdd(x5, row(k + 5, s0 + j), u);
        v = hn::MulAdd(x6, row(k + 6, s0 + j), v);
        u = hn::MulAdd(x7, row(k + 7, s0 + j), u);
        hn::Store(hn::Add(hn::Load(d, acc + j), hn::Add(v, u)), d, acc + j);
      }
      for (int64_t j = Wv; j < W; ++j)
        for (int64_t i = 0; i < 8; ++i) acc[j] += x[k + i] * widen(k + i, s0 + j);
    }
    for (; k < K; ++k) {  // the matrix's last rows (gemv_cols_bf16's blocks are whole eights)
      const auto x0 = hn::Set(d, x[k]);
      for (int64_t j = 0; j < Wv; j += N) hn::Store(hn::MulAdd(x0, row(k, s0 + j), hn::Load(d, acc + j)), d, acc + j);
      for (int64_t j = Wv; j < W; ++j) acc[j] += x[k] * widen(k, s0 + j);
    }
    std::copy(acc, acc + W, y + s0);
  }
}

// y[n] = the sum of rows[i * N + n] over i = 0, 1, ..., count - 1, added in that order (the same bits
// as adding them one row at a time), each column's running sum in a register.
void SumRowsInOrder(const float* rows, int64_t count, int64_t N, float* y) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t n = 0;
  for (; n + L <= N; n += L) {
    auto acc = hn::LoadU(d, rows + n);
    for (int64_t i = 1; i < count; ++i) acc = hn::Add(acc, hn::LoadU(d, rows + i * N + n));
    hn::StoreU(acc, d, y + n);
  }
  for (; n < N; ++n) {
    float acc = rows[n];
    for (int64_t i = 1; i < count; ++i) acc += rows[i * N + n];
    y[n] = acc;
  }
}

void GemvRowsBF16(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x, float* y) {
  GemvRows16<hwy::bfloat16_t>(A, lda, r0, r1, K, x, y);
}
void GemvRowsF16(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x, float* y) {
  GemvRows16<hwy::float16_t>(A, lda, r0, r1, K, x, y);
}
void GemvQuartersBF16(const uint16_t* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                      const float* x, float* y) {
  GemvQuarters16<hwy::bfloat16_t>(A, lda, first, stride, count, K, x, y);
}
void GemvQuartersF16(const uint16_t* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                     const float* x, float* y) {
  GemvQuarters16<hwy::float16_t>(A, lda, first, stride, count, K, x, y);
}
void GemvColsBF16(const uint16_t* A, int64_t lda, int64_t K, int64_t n0, int64_t n1, const float* x, float* y) {
  GemvCols16<hwy::bfloat16_t>(A, lda, K, n0, n1, x, y);
}
void GemvColsF16(const uint16_t* A, int64_t lda, int64_t K, int64_t n0, int64_t n1, const float* x, float* y) {
  GemvCols16<hwy::float16_t>(A, lda, K, n0, n1, x, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(GemvRowsF32);
HWY_EXPORT(GemvQuartersF32);
HWY_EXPORT(GemvQuartersBF16);
HWY_EXPORT(GemvQuartersF16);
HWY_EXPORT(GemvColsF32);
HWY_EXPORT(GemvRowsBF16);
HWY_EXPORT(GemvColsBF16);
HWY_EXPORT(GemvRowsF16);
HWY_EXPORT(GemvColsF16);
HWY_EXPORT(SumRowsInOrder);

namespace {
// Products of fewer float32 weights than kMinParallelBytes holds stay on one thread.
constexpr int64_t kGemvGrainMacs = kMinParallelBytes / int64_t(sizeof(float));
// The rows form: chunks of ~16K multiply-adds (24 rows of 768), 16 per thread. Its chunks cost
// nothing to start, and the 4 default chunks of a 768 x 768 product (~300 KB each) left the first
// thread done waiting up to a chunk's time at each of RWKV's 85 products per token (alternating
// A/B, 2 threads: RWKV decode +5%, Llama float32 decode +6%, median of 5).
constexpr int64_t kGemvGrainRowMacs = kGemvGrainMacs / 4;
constexpr int kGemvChunksPerThread = 16;
}  // namespace

// Rows [0, R) over the threads as quarters: chunks of j in [0, Q), each j the rows j, Q + j, 2Q + j
// and 3Q + j (quarters(first, stride, count)), so a thread's run of chunks reads four long streams;
// then the last R % 4 rows (rows(r0, r1)). A row sums in the same order whichever call ran it.
// `bytes`: the weights' size (below kMinParallelBytes, one chunk on this thread).
template <class Quarters, class Rows>
void rows_in_quarters(int64_t R, int64_t K, int64_t bytes, const Quarters& quarters, const Rows& rows) {
  const int64_t Q = R / 4;
  const int64_t grain = bytes < kMinParallelBytes ? std::max<int64_t>(Q, 1)
                                                  : std::max<int64_t>(1, kGemvGrainRowMacs / std::max<int64_t>(4 * K, 1));
  parallel_for(0, Q, grain, kGemvChunksPerThread, [&](int64_t b, int64_t e) { quarters(b, Q, e - b); });
  rows(4 * Q, R);
}

void gemv_rows_f32(const float* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y, float alpha,
                   float beta, const float* bias) {
  auto rows = [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(GemvRowsF32)(A, lda, r0, r1, K, x, y, alpha, beta, bias);
  };
  if (R * K <= kGemvGrainMacs) {  // as before the finer chunks: small products stay on one thread
    rows(0, R);
    return;
  }
  rows_in_quarters(R, K, R * K * int64_t(sizeof(float)), [&](int64_t first, int64_t stride, int64_t count) {
    HWY_DYNAMIC_DISPATCH(GemvQuartersF32)(A, lda, first, stride, count, K, x, y, alpha, beta, bias);
  }, rows);
}

void gemv_rows_bf16_range(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x,
                          float* y) {
  HWY_DYNAMIC_DISPATCH(GemvRowsBF16)(A, lda, r0, r1, K, x, y);
}

void gemv_rows_f16_range(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x,
                         float* y) {
  HWY_DYNAMIC_DISPATCH(GemvRowsF16)(A, lda, r0, r1, K, x, y);
}

void gemv_quarters_16(bool bf16, const uint16_t* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                      const float* x, float* y) {
  if (bf16) HWY_DYNAMIC_DISPATCH(GemvQuartersBF16)(A, lda, first, stride, count, K, x, y);
  else HWY_DYNAMIC_DISPATCH(GemvQuartersF16)(A, lda, first, stride, count, K, x, y);
}

void gemv_rows_16(bool bf16, const uint16_t* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y) {
  auto rows = [&](int64_t r0, int64_t r1) { (bf16 ? gemv_rows_bf16_range : gemv_rows_f16_range)(A, lda, r0, r1, K, x, y); };
  const int64_t bytes = R * K * int64_t(sizeof(uint16_t));
  static_assert(kGemvFourStreamsBytes <= kMinParallelBytes, "a product too small for four streams stays on one thread");
  if (bytes < kGemvFourStreamsBytes) {
    rows(0, R);
    return;
  }
  rows_in_quarters(R, K, bytes, [&](int64_t first, int64_t stride, int64_t count) {
    gemv_quarters_16(bf16, A, lda, first, stride, count, K, x, y);
  }, rows);
}

// Threads take blocks of whole rows (each a contiguous run of memory, where strips of columns
// made every thread read short pieces of every row: 2-thread GPT-2 bf16 decode 10% slower than
// oneDNN's), each block's sums into its own partial row, the partials added in block order: the
// same bits at any thread count.
void gemv_cols_16(bool bf16, const uint16_t* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y) {
  auto cols = [bf16](const uint16_t* a, int64_t ld, int64_t k, int64_t n0, int64_t n1, const float* xs, float* ys) {
    if (bf16) HWY_DYNAMIC_DISPATCH(GemvColsBF16)(a, ld, k, n0, n1, xs, ys);
    else HWY_DYNAMIC_DISPATCH(GemvColsF16)(a, ld, k, n0, n1, xs, ys);
  };
  const int64_t rows_per_block = std::max<int64_t>(8, (kGemvGrainMacs / std::max<int64_t>(N, 1) + 7) / 8 * 8);
  const int64_t blocks = (K + rows_per_block - 1) / rows_per_block;
  if (blocks <= 1) {
    cols(A, lda, K, 0, N, x, y);
    return;
  }
  ScratchArray<float> partial(size_t(blocks * N));
  parallel_for(0, blocks, 1, kGemvChunksPerThread, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t r0 = i * rows_per_block, rows = std::min(rows_per_block, K - r0);
      cols(A + r0 * lda, lda, rows, 0, N, x + r0, partial.data() + i * N);
    }
  });
  // One pass over the partials in SIMD, on the caller alone (it had been a pass over y per block,
  // in SSE: 2.2% of GPT-2 124M f16 decode's samples at 1 thread, 1.4% after).
  HWY_DYNAMIC_DISPATCH(SumRowsInOrder)(partial.data(), blocks, N, y);
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

// SIMD row kernels for reductions (Highway, dispatched at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Blocks of kSumBlock elements are summed in T across 4 vector accumulators, and the block sums
// in double: the error stays that of a 2K-element sum however long the row (a flat float
// accumulation of 16M values loses up to several digits), at one horizontal add per block.
constexpr int64_t kSumBlock = 2048;

template <typename T>
T BlockSum(const T* p, int64_t bn) {
  return RowSum(hn::ScalableTag<T>(), p, bn);
}

// A long sum reads four streams at once, one per quarter of a run of whole blocks, each prefetched
// (prefetchnta) kStreamAhead bytes ahead: one core keeps more reads in flight across four streams
// than along one (the matrix-vector products' lesson, kernels/cpu/gemv_simd.cpp). Every block sums
// exactly as BlockSum sums it and the block sums are added in order, so the result is the same
// bits as reading one stream. A sum of 16M floats (bench_ops_vs_torch --only sum_all, 10
// alternating pairs of processes on a noisy Zen 5): 2 threads 0.81 -> 0.68 ms median (best 0.62
// -> 0.53), 1 thread 1.46 -> 1.47 median (best 1.28 -> 1.19); capped to AVX2 (16 registers, the
// loads folded into the adds), 6 pairs: 1 thread 1.61 -> 1.37 ms, 2 threads 0.85 -> 0.73.
constexpr int64_t kStreamAhead = 2048;
constexpr int64_t kMinStreamBlocks = 8;    // a stream of at least 8 blocks (64 KB of floats)
constexpr int64_t kMaxStreamBlocks = 256;  // block sums of one run kept on the stack

// out[s] = RowSum of the n values at rows[s], for four rows read at once (their loads interleaved,
// each prefetched kStreamAhead bytes ahead): each sum the same bits as RowSum's.
template <typename T>
HWY_INLINE void FourRowSums(const T* const rows[4], int64_t n, T out[4]) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t step_bytes = 4 * N * int64_t(sizeof(T));
  const T *s0 = rows[0], *s1 = rows[1], *s2 = rows[2], *s3 = rows[3];
  auto a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d), a03 = hn::Zero(d);
  auto a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d), a13 = hn::Zero(d);
  auto a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d), a23 = hn::Zero(d);
  auto a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d), a33 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    for (const T* s : {s0, s1, s2, s3})
      for (int64_t b = 0; b < step_bytes; b += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(s + i) + kStreamAhead + b, 0, 0);
    a00 = hn::Add(a00, hn::LoadU(d, s0 + i));
    a10 = hn::Add(a10, hn::LoadU(d, s1 + i));
    a20 = hn::Add(a20, hn::LoadU(d, s2 + i));
    a30 = hn::Add(a30, hn::LoadU(d, s3 + i));
    a01 = hn::Add(a01, hn::LoadU(d, s0 + i + N));
    a11 = hn::Add(a11, hn::LoadU(d, s1 + i + N));
    a21 = hn::Add(a21, hn::LoadU(d, s2 + i + N));
    a31 = hn::Add(a31, hn::LoadU(d, s3 + i + N));
    a02 = hn::Add(a02, hn::LoadU(d, s0 + i + 2 * N));
    a12 = hn::Add(a12, hn::LoadU(d, s1 + i + 2 * N));
    a22 = hn::Add(a22, hn::LoadU(d, s2 + i + 2 * N));
    a32 = hn::Add(a32, hn::LoadU(d, s3 + i + 2 * N));
    a03 = hn::Add(a03, hn::LoadU(d, s0 + i + 3 * N));
    a13 = hn::Add(a13, hn::LoadU(d, s1 + i + 3 * N));
    a23 = hn::Add(a23, hn::LoadU(d, s2 + i + 3 * N));
    a33 = hn::Add(a33, hn::LoadU(d, s3 + i + 3 * N));
  }
  for (; i + N <= n; i += N) {
    a00 = hn::Add(a00, hn::LoadU(d, s0 + i));
    a10 = hn::Add(a10, hn::LoadU(d, s1 + i));
    a20 = hn::Add(a20, hn::LoadU(d, s2 + i));
    a30 = hn::Add(a30, hn::LoadU(d, s3 + i));
  }
  out[0] = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a00, a01), hn::Add(a02, a03))));
  out[1] = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a10, a11), hn::Add(a12, a13))));
  out[2] = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a20, a21), hn::Add(a22, a23))));
  out[3] = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a30, a31), hn::Add(a32, a33))));
  for (; i < n; ++i)
    for (int s = 0; s < 4; ++s) out[s] += rows[s][i];
}

// sums[s * q + j] = BlockSum of block j of stream s, for the 4 * q whole blocks at p.
template <typename T>
void FourStreamBlockSums(const T* p, int64_t q, T* sums) {
  for (int64_t j = 0; j < q; ++j) {
    const T* const rows[4] = {p + j * kSumBlock, p + (q + j) * kSumBlock, p + (2 * q + j) * kSumBlock,
                              p + (3 * q + j) * kSumBlock};
    T out[4];
    FourRowSums(rows, kSumBlock, out);
    for (int s = 0; s < 4; ++s) sums[s * q + j] = out[s];
  }
}

template <typename T>
double SumImpl(const T* p, int64_t n) {
  static_assert(kSumBlock % 64 == 0, "whole vectors of every width in a block");
  double total = 0;
  int64_t b0 = 0;
  for (int64_t blocks = n / kSumBlock; blocks >= 4 * kMinStreamBlocks;) {
    const int64_t q = std::min(kMaxStreamBlocks, blocks / 4);
    T sums[4 * kMaxStreamBlocks];
    FourStreamBlockSums(p + b0, q, sums);
    for (int64_t k = 0; k < 4 * q; ++k) total += double(sums[k]);
    b0 += 4 * q * kSumBlock;
    blocks -= 4 * q;
  }
  for (; b0 < n; b0 += kSumBlock) total += double(BlockSum(p + b0, std::min(kSumBlock, n - b0)));
  return total;
}

// Row sums of `rows` rows of K floats, each exactly SumImpl's, with no dispatch per row (a 4096 x
// 1024 last-dim sum spent more in a per-row call than in reading). One row at a time: the rows are
// one sequential stream (two rows side by side, two streams 4 KB apart, measured 0.185-0.239 ms
// against 0.165-0.219 for the 4096 x 1024 sum at 1 thread, alternating x4; four rows at a time, one
// from each quarter of the rows, as a long sum reads, 0.191 against 0.177 ms median with
// prefetchnta and 0.207 against 0.183 without, 8 alternating pairs: the 16 MB come from the L3).
void SumRowsF32(const float* p, int64_t rows, int64_t K, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = float(SumImpl(p + r * K, K));
}

template <typename T>
T SumSqDevImpl(const T* p, int64_t n, T mean) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto m = hn::Set(d, mean);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    auto x0 = hn::Sub(hn::LoadU(d, p + i), m);
    auto x1 = hn::Sub(hn::LoadU(d, p + i + N), m);
    a0 = hn::MulAdd(x0, x0, a0);
    a1 = hn::MulAdd(x1, x1, a1);
  }
  for (; i + N <= n; i += N) {
    auto x0 = hn::Sub(hn::LoadU(d, p + i), m);
    a0 = hn::MulAdd(x0, x0, a0);
  }
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < n; ++i) s += (p[i] - mean) * (p[i] - mean);
  return s;
}

double SumF32(const float* p, int64_t n) { return SumImpl(p, n); }
double SumF64(const double* p, int64_t n) { return SumImpl(p, n); }
float SumSqDevF32(const float* p, int64_t n, float m) { return SumSqDevImpl(p, n, m); }
double SumSqDevF64(const double* p, int64_t n, double m) { return SumSqDevImpl(p, n, m); }

template <bool kMax>
float ExtremeF32(const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto acc = hn::Set(d, p[0]);
  auto nan = hn::IsNaN(acc);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(d, p + i);
    nan = hn::Or(nan, hn::IsNaN(v));
    acc = kMax ? hn::Max(acc, v) : hn::Min(acc, v);
  }
  if (!hn::AllFalse(d, nan)) return std::numeric_limits<float>::quiet_NaN();
  float r = kMax ? hn::GetLane(hn::MaxOfLanes(d, acc)) : hn::GetLane(hn::MinOfLanes(d, acc));
  for (; i < n; ++i) {
    if (std::isnan(p[i])) return p[i];
    r = kMax ? std::max(r, p[i]) : std::min(r, p[i]);
  }
  return r;
}
float MaxF32(const float* p, int64_t n) { return ExtremeF32<true>(p, n); }
float MinF32(const float* p, int64_t n) { return ExtremeF32<false>(p, n); }

void AddIntoF32(float* acc, const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, acc + i), hn::LoadU(d, p + i)), d, acc + i);
  for (; i < n; ++i) acc[i] += p[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(SumF32);
HWY_EXPORT(SumF64);
HWY_EXPORT(SumRowsF32);
HWY_EXPORT(SumSqDevF32);
HWY_EXPORT(SumSqDevF64);
HWY_EXPORT(MaxF32);
HWY_EXPORT(MinF32);
HWY_EXPORT(AddIntoF32);
double sum_f32(const float* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(p, n); }
double sum_f64(const double* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF64)(p, n); }
void sum_rows_f32(const float* p, int64_t rows, int64_t K, float* out) {
  HWY_DYNAMIC_DISPATCH(SumRowsF32)(p, rows, K, out);
}
float sum_sq_dev_f32(const float* p, int64_t n, float m) { return HWY_DYNAMIC_DISPATCH(SumSqDevF32)(p, n, m); }
double sum_sq_dev_f64(const double* p, int64_t n, double m) { return HWY_DYNAMIC_DISPATCH(SumSqDevF64)(p, n, m); }
float max_f32(const float* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32)(p, n); }
float min_f32(const float* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(MinF32)(p, n); }
void add_into_f32(float* acc, const float* p, int64_t n) { HWY_DYNAMIC_DISPATCH(AddIntoF32)(acc, p, n); }
}  // namespace foundry::kernels
#endif

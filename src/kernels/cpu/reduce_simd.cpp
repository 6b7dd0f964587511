// SIMD row kernels for reductions (Highway, dispatched at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/reduce.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Blocks of kSumBlock elements are summed in T across 4 vector accumulators, and the block sums
// in double: the error stays that of a 2K-element sum however long the row (a flat float
// accumulation of 16M values loses up to several digits), at one horizontal add per block.
constexpr int64_t kSumBlock = 2048;

template <typename T>
double SumImpl(const T* p, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t bn = std::min(kSumBlock, n - b0);
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 4 * N <= bn; i += 4 * N) {
      a0 = hn::Add(a0, hn::LoadU(d, p + b0 + i));
      a1 = hn::Add(a1, hn::LoadU(d, p + b0 + i + N));
      a2 = hn::Add(a2, hn::LoadU(d, p + b0 + i + 2 * N));
      a3 = hn::Add(a3, hn::LoadU(d, p + b0 + i + 3 * N));
    }
    for (; i + N <= bn; i += N) a0 = hn::Add(a0, hn::LoadU(d, p + b0 + i));
    T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    for (int64_t t = i; t < bn; ++t) s += p[b0 + t];
    total += double(s);
  }
  return total;
}

// Row sums of `rows` rows of K floats, each exactly SumImpl's, with no dispatch per row (a 4096 x
// 1024 last-dim sum spent more in a per-row call than in reading). One row at a time: the rows are
// one sequential stream (two rows side by side, two streams 4 KB apart, measured 0.185-0.239 ms
// against 0.165-0.219 for the 4096 x 1024 sum at 1 thread, alternating x4).
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

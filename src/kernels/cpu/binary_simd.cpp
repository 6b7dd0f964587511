// SIMD kernels for the common float binary ops (Highway, dispatched at run time): vector-vector,
// vector-scalar and scalar-vector forms.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/binary_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/cpu/binary.h"
#include "kernels/cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One run of n.
template <class D, class F>
HWY_INLINE void Run(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* out, int64_t n,
                     bool a_scalar, bool b_scalar, bool stream_hint, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va_s = hn::Set(d, a[0]);
  const auto vb_s = hn::Set(d, b[0]);
  int64_t i = 0;
  // Outputs larger than the caches are written with non-temporal stores: no read-for-ownership,
  // so a memory-bound op moves a third less data. The first vector is stored unaligned, then
  // the loop restarts at the next aligned address (recomputing a few lanes; out never aliases
  // the inputs here).
  const bool stream = (stream_hint || n * int64_t(sizeof(T)) >= (int64_t(1) << 21)) && n >= 2 * N &&
                      out != a && out != b;
  if (stream) {
    hn::StoreU(f(a_scalar ? va_s : hn::LoadU(d, a), b_scalar ? vb_s : hn::LoadU(d, b)), d, out);
    const uintptr_t bytes = uintptr_t(N) * sizeof(T);
    i = int64_t((bytes - reinterpret_cast<uintptr_t>(out) % bytes) % bytes / sizeof(T));
    for (; i + N <= n; i += N) {
      auto va = a_scalar ? va_s : hn::LoadU(d, a + i);
      auto vb = b_scalar ? vb_s : hn::LoadU(d, b + i);
      hn::Stream(f(va, vb), d, out + i);
    }
    if (!stream_hint) hwy::FlushStream();  // with the hint, the caller fences once per thread
  }
  for (; i + N <= n; i += N) {
    auto va = a_scalar ? va_s : hn::LoadU(d, a + i);
    auto vb = b_scalar ? vb_s : hn::LoadU(d, b + i);
    hn::StoreU(f(va, vb), d, out + i);
  }
  if (i < n) {
    alignas(64) T ba[64], bb[64], bo[64];
    for (int64_t k = 0; k < N; ++k) {
      ba[k] = i + k < n ? (a_scalar ? a[0] : a[i + k]) : T(1);
      bb[k] = i + k < n ? (b_scalar ? b[0] : b[i + k]) : T(1);
    }
    hn::StoreU(f(hn::LoadU(d, ba), hn::LoadU(d, bb)), d, bo);
    for (int64_t k = 0; i + k < n; ++k) out[i + k] = bo[k];
  }
}

// `rows` runs (BinaryRows), in one call: a row broadcast over a matrix paid a dispatch, the op's
// switch and the loop's setup per row.
template <class D, class F>
HWY_INLINE void Loop(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* out, int64_t n,
                     bool a_scalar, bool b_scalar, bool stream_hint, const BinaryRows& rows, F f) {
  for (int64_t r = 0; r < rows.rows; ++r, a += rows.a, b += rows.b, out += rows.out)
    Run(d, a, b, out, n, a_scalar, b_scalar, stream_hint, f);
}

template <typename T>
bool BinaryImpl(BinaryOp op, const T* a, const T* b, T* out, int64_t n, bool as, bool bs, T alpha, bool st,
                const BinaryRows& rows) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const V valpha = hn::Set(d, alpha);
  switch (op) {
    case BinaryOp::Add:
      if (alpha == T(1)) Loop(d, a, b, out, n, as, bs, st, rows, [](V x, V y) { return hn::Add(x, y); });
      else Loop(d, a, b, out, n, as, bs, st, rows, [&](V x, V y) { return hn::MulAdd(y, valpha, x); });
      return true;
    case BinaryOp::Sub:
      if (alpha == T(1)) Loop(d, a, b, out, n, as, bs, st, rows, [](V x, V y) { return hn::Sub(x, y); });
      else Loop(d, a, b, out, n, as, bs, st, rows, [&](V x, V y) { return hn::NegMulAdd(y, valpha, x); });
      return true;
    case BinaryOp::Mul: Loop(d, a, b, out, n, as, bs, st, rows, [](V x, V y) { return hn::Mul(x, y); }); return true;
    case BinaryOp::Div: Loop(d, a, b, out, n, as, bs, st, rows, [](V x, V y) { return hn::Div(x, y); }); return true;
    case BinaryOp::Maximum:
      // NaN-propagating: a NaN in either operand gives NaN.
      Loop(d, a, b, out, n, as, bs, st, rows, [&](V x, V y) {
        auto nan = hn::Or(hn::IsNaN(x), hn::IsNaN(y));
        return hn::IfThenElse(nan, hn::Add(x, y), hn::Max(x, y));
      });
      return true;
    case BinaryOp::Minimum:
      Loop(d, a, b, out, n, as, bs, st, rows, [&](V x, V y) {
        auto nan = hn::Or(hn::IsNaN(x), hn::IsNaN(y));
        return hn::IfThenElse(nan, hn::Add(x, y), hn::Min(x, y));
      });
      return true;
    case BinaryOp::GeluBackward:
      // a is the incoming gradient, b the input x. Non-finite x takes the scalar path.
      if constexpr (sizeof(T) == 4) {
        Loop(d, a, b, out, n, as, bs, st, rows, [&](V g, V x) { return hn::Mul(g, GeluGradF(d, x)); });
        return true;
      }
      return false;
    case BinaryOp::GeluTanhBackward:
      if constexpr (sizeof(T) == 4) {
        Loop(d, a, b, out, n, as, bs, st, rows, [&](V g, V x) { return hn::Mul(g, GeluTanhGradF(d, x)); });
        return true;
      }
      return false;
    default:
      return false;
  }
}

bool BinaryF32(BinaryOp op, const float* a, const float* b, float* out, int64_t n, bool as, bool bs, float alpha,
               bool st, const BinaryRows& rows) {
  return BinaryImpl<float>(op, a, b, out, n, as, bs, alpha, st, rows);
}
bool BinaryF64(BinaryOp op, const double* a, const double* b, double* out, int64_t n, bool as, bool bs,
               double alpha, bool st, const BinaryRows& rows) {
  return BinaryImpl<double>(op, a, b, out, n, as, bs, alpha, st, rows);
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(BinaryF32);
HWY_EXPORT(BinaryF64);
bool binary_simd_f32(BinaryOp op, const float* a, const float* b, float* out, int64_t n, bool as, bool bs,
                     float alpha, bool stream, BinaryRows rows) {
  return HWY_DYNAMIC_DISPATCH(BinaryF32)(op, a, b, out, n, as, bs, alpha, stream, rows);
}
bool binary_simd_f64(BinaryOp op, const double* a, const double* b, double* out, int64_t n, bool as, bool bs,
                     double alpha, bool stream, BinaryRows rows) {
  return HWY_DYNAMIC_DISPATCH(BinaryF64)(op, a, b, out, n, as, bs, alpha, stream, rows);
}
}  // namespace foundry::kernels
#endif

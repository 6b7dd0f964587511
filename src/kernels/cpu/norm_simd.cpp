// SIMD layer-norm / RMS-norm row kernels (Highway, compiled per x86 target, chosen at run time).
// See norm.h for the formulas; each row is read from memory once and then reused from L1.
// The layer-norm output uses a separate multiply and add (no FMA), rounding as PyTorch's kernel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/norm_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/norm.h"
#include "kernels/cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum((p - m)^2), or sum(p^2) for m = 0.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T RowSumSqDev(D d, const T* HWY_RESTRICT p, int64_t n, T m) {
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    auto x0 = hn::Sub(hn::LoadU(d, p + i), vm), x1 = hn::Sub(hn::LoadU(d, p + i + N), vm);
    auto x2 = hn::Sub(hn::LoadU(d, p + i + 2 * N), vm), x3 = hn::Sub(hn::LoadU(d, p + i + 3 * N), vm);
    a0 = hn::MulAdd(x0, x0, a0);
    a1 = hn::MulAdd(x1, x1, a1);
    a2 = hn::MulAdd(x2, x2, a2);
    a3 = hn::MulAdd(x3, x3, a3);
  }
  for (; i + N <= n; i += N) {
    auto x0 = hn::Sub(hn::LoadU(d, p + i), vm);
    a0 = hn::MulAdd(x0, x0, a0);
  }
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += (p[i] - m) * (p[i] - m);
  return s;
}

template <typename T>
void LayerNormRowsImpl(const T* HWY_RESTRICT x, const T* HWY_RESTRICT w, const T* HWY_RESTRICT b, T* HWY_RESTRICT y,
                       T* mean, T* rstd, int64_t rows, int64_t n, T eps) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const T m = n > 0 ? RowSum(d, xr, n) / T(n) : T(0);
    const T var = n > 0 ? RowSumSqDev(d, xr, n, m) / T(n) : T(0);
    const T rs = T(1) / std::sqrt(std::max(var, T(0)) + eps);
    mean[r] = m;
    rstd[r] = rs;
    const auto vs = hn::Set(d, rs), vb = hn::Set(d, -rs * m);
    int64_t i = 0;
    if (w && b) {
      for (; i + N <= n; i += N) {
        auto t = hn::Add(hn::Mul(hn::LoadU(d, xr + i), vs), vb);
        hn::StoreU(hn::Add(hn::Mul(t, hn::LoadU(d, w + i)), hn::LoadU(d, b + i)), d, yr + i);
      }
      for (; i < n; ++i) yr[i] = (xr[i] * rs + (-rs * m)) * w[i] + b[i];
    } else if (w) {
      for (; i + N <= n; i += N)
        hn::StoreU(hn::Mul(hn::Add(hn::Mul(hn::LoadU(d, xr + i), vs), vb), hn::LoadU(d, w + i)), d, yr + i);
      for (; i < n; ++i) yr[i] = (xr[i] * rs + (-rs * m)) * w[i];
    } else if (b) {
      for (; i + N <= n; i += N)
        hn::StoreU(hn::Add(hn::Add(hn::Mul(hn::LoadU(d, xr + i), vs), vb), hn::LoadU(d, b + i)), d, yr + i);
      for (; i < n; ++i) yr[i] = (xr[i] * rs + (-rs * m)) + b[i];
    } else {
      for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::Mul(hn::LoadU(d, xr + i), vs), vb), d, yr + i);
      for (; i < n; ++i) yr[i] = xr[i] * rs + (-rs * m);
    }
  }
}

template <typename T>
void LayerNormBackwardRowsImpl(const T* HWY_RESTRICT g, const T* HWY_RESTRICT x, const T* HWY_RESTRICT w,
                               T* HWY_RESTRICT gx, T* HWY_RESTRICT gw_acc, T* HWY_RESTRICT gb_acc, int64_t rows,
                               int64_t n, T eps) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    T* o = gx + r * n;
    const T m = n > 0 ? RowSum(d, xr, n) / T(n) : T(0);
    const T var = n > 0 ? RowSumSqDev(d, xr, n, m) / T(n) : T(0);
    const T rs = T(1) / std::sqrt(std::max(var, T(0)) + eps);
    // ds = sum(g w x), db = sum(g w)
    auto ds0 = hn::Zero(d), ds1 = hn::Zero(d), db0 = hn::Zero(d), db1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      auto g0 = hn::LoadU(d, gr + i), g1 = hn::LoadU(d, gr + i + N);
      if (w) {
        g0 = hn::Mul(g0, hn::LoadU(d, w + i));
        g1 = hn::Mul(g1, hn::LoadU(d, w + i + N));
      }
      ds0 = hn::MulAdd(g0, hn::LoadU(d, xr + i), ds0);
      ds1 = hn::MulAdd(g1, hn::LoadU(d, xr + i + N), ds1);
      db0 = hn::Add(db0, g0);
      db1 = hn::Add(db1, g1);
    }
    for (; i + N <= n; i += N) {
      auto g0 = hn::LoadU(d, gr + i);
      if (w) g0 = hn::Mul(g0, hn::LoadU(d, w + i));
      ds0 = hn::MulAdd(g0, hn::LoadU(d, xr + i), ds0);
      db0 = hn::Add(db0, g0);
    }
    T ds = hn::GetLane(hn::SumOfLanes(d, hn::Add(ds0, ds1)));
    T db = hn::GetLane(hn::SumOfLanes(d, hn::Add(db0, db1)));
    for (; i < n; ++i) {
      T gw = gr[i] * (w ? w[i] : T(1));
      ds += gw * xr[i];
      db += gw;
    }
    const T scale = T(1) / T(n);
    const T b2 = (db * m - ds) * rs * rs * rs * scale;
    const T c2 = -b2 * m - db * rs * scale;
    const auto va = hn::Set(d, rs), vb = hn::Set(d, b2), vc = hn::Set(d, c2), vm = hn::Set(d, m);
    i = 0;
    for (; i + N <= n; i += N) {
      auto gv = hn::LoadU(d, gr + i);
      auto xv = hn::LoadU(d, xr + i);
      auto gwv = w ? hn::Mul(gv, hn::LoadU(d, w + i)) : gv;
      hn::StoreU(hn::MulAdd(va, gwv, hn::MulAdd(vb, xv, vc)), d, o + i);
      if (gw_acc) hn::StoreU(hn::MulAdd(gv, hn::Mul(hn::Sub(xv, vm), va), hn::LoadU(d, gw_acc + i)), d, gw_acc + i);
      if (gb_acc) hn::StoreU(hn::Add(gv, hn::LoadU(d, gb_acc + i)), d, gb_acc + i);
    }
    for (; i < n; ++i) {
      T gwv = gr[i] * (w ? w[i] : T(1));
      o[i] = rs * gwv + (b2 * xr[i] + c2);
      if (gw_acc) gw_acc[i] += gr[i] * ((xr[i] - m) * rs);
      if (gb_acc) gb_acc[i] += gr[i];
    }
  }
}

template <typename T>
void RmsNormRowsImpl(const T* HWY_RESTRICT x, const T* HWY_RESTRICT w, T* HWY_RESTRICT y, T* rstd, int64_t rows,
                     int64_t n, T eps) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const T ms = n > 0 ? RowSumSqDev(d, xr, n, T(0)) / T(n) : T(0);
    const T rs = T(1) / std::sqrt(ms + eps);
    rstd[r] = rs;
    const auto vs = hn::Set(d, rs);
    int64_t i = 0;
    if (w) {
      for (; i + N <= n; i += N)
        hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), vs), hn::LoadU(d, w + i)), d, yr + i);
      for (; i < n; ++i) yr[i] = (xr[i] * rs) * w[i];
    } else {
      for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, xr + i), vs), d, yr + i);
      for (; i < n; ++i) yr[i] = xr[i] * rs;
    }
  }
}

template <typename T>
void RmsNormBackwardRowsImpl(const T* HWY_RESTRICT g, const T* HWY_RESTRICT x, const T* HWY_RESTRICT w,
                             T* HWY_RESTRICT gx, T* HWY_RESTRICT gw_acc, int64_t rows, int64_t n, T eps) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    T* o = gx + r * n;
    const T ms = n > 0 ? RowSumSqDev(d, xr, n, T(0)) / T(n) : T(0);
    const T rs = T(1) / std::sqrt(ms + eps);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      auto a0 = hn::LoadU(d, gr + i), a1 = hn::LoadU(d, gr + i + N);
      if (w) {
        a0 = hn::Mul(a0, hn::LoadU(d, w + i));
        a1 = hn::Mul(a1, hn::LoadU(d, w + i + N));
      }
      s0 = hn::MulAdd(a0, hn::LoadU(d, xr + i), s0);
      s1 = hn::MulAdd(a1, hn::LoadU(d, xr + i + N), s1);
    }
    for (; i + N <= n; i += N) {
      auto a0 = hn::LoadU(d, gr + i);
      if (w) a0 = hn::Mul(a0, hn::LoadU(d, w + i));
      s0 = hn::MulAdd(a0, hn::LoadU(d, xr + i), s0);
    }
    T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
    for (; i < n; ++i) s += gr[i] * (w ? w[i] : T(1)) * xr[i];
    const T c = -rs * rs * rs * s / T(n);
    const auto vr = hn::Set(d, rs), vc = hn::Set(d, c);
    i = 0;
    for (; i + N <= n; i += N) {
      auto gv = hn::LoadU(d, gr + i);
      auto xv = hn::LoadU(d, xr + i);
      auto a = w ? hn::Mul(gv, hn::LoadU(d, w + i)) : gv;
      hn::StoreU(hn::MulAdd(vr, a, hn::Mul(vc, xv)), d, o + i);
      if (gw_acc) hn::StoreU(hn::MulAdd(gv, hn::Mul(xv, vr), hn::LoadU(d, gw_acc + i)), d, gw_acc + i);
    }
    for (; i < n; ++i) {
      T a = gr[i] * (w ? w[i] : T(1));
      o[i] = rs * a + c * xr[i];
      if (gw_acc) gw_acc[i] += gr[i] * (xr[i] * rs);
    }
  }
}

template <typename T>
void AffineImpl(const T* HWY_RESTRICT x, T* HWY_RESTRICT y, int64_t n, T scale, T shift) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, scale), vb = hn::Set(d, shift);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), vs, vb), d, y + i);
  for (; i < n; ++i) y[i] = x[i] * scale + shift;
}

void LayerNormRowsF32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t rows,
                      int64_t n, float eps) {
  LayerNormRowsImpl(x, w, b, y, mean, rstd, rows, n, eps);
}
void LayerNormRowsF64(const double* x, const double* w, const double* b, double* y, double* mean, double* rstd,
                      int64_t rows, int64_t n, double eps) {
  LayerNormRowsImpl(x, w, b, y, mean, rstd, rows, n, eps);
}
void LayerNormBackwardRowsF32(const float* g, const float* x, const float* w, float* gx, float* gw, float* gb,
                              int64_t rows, int64_t n, float eps) {
  LayerNormBackwardRowsImpl(g, x, w, gx, gw, gb, rows, n, eps);
}
void LayerNormBackwardRowsF64(const double* g, const double* x, const double* w, double* gx, double* gw, double* gb,
                              int64_t rows, int64_t n, double eps) {
  LayerNormBackwardRowsImpl(g, x, w, gx, gw, gb, rows, n, eps);
}
void RmsNormRowsF32(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t n, float eps) {
  RmsNormRowsImpl(x, w, y, rstd, rows, n, eps);
}
void RmsNormRowsF64(const double* x, const double* w, double* y, double* rstd, int64_t rows, int64_t n, double eps) {
  RmsNormRowsImpl(x, w, y, rstd, rows, n, eps);
}
void RmsNormBackwardRowsF32(const float* g, const float* x, const float* w, float* gx, float* gw, int64_t rows,
                            int64_t n, float eps) {
  RmsNormBackwardRowsImpl(g, x, w, gx, gw, rows, n, eps);
}
void RmsNormBackwardRowsF64(const double* g, const double* x, const double* w, double* gx, double* gw, int64_t rows,
                            int64_t n, double eps) {
  RmsNormBackwardRowsImpl(g, x, w, gx, gw, rows, n, eps);
}
void AffineF32(const float* x, float* y, int64_t n, float s, float b) { AffineImpl(x, y, n, s, b); }
void AffineF64(const double* x, double* y, int64_t n, double s, double b) { AffineImpl(x, y, n, s, b); }

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(LayerNormRowsF32);
HWY_EXPORT(LayerNormRowsF64);
HWY_EXPORT(LayerNormBackwardRowsF32);
HWY_EXPORT(LayerNormBackwardRowsF64);
HWY_EXPORT(RmsNormRowsF32);
HWY_EXPORT(RmsNormRowsF64);
HWY_EXPORT(RmsNormBackwardRowsF32);
HWY_EXPORT(RmsNormBackwardRowsF64);
HWY_EXPORT(AffineF32);
HWY_EXPORT(AffineF64);

void layer_norm_rows_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowsF32)(x, w, b, y, mean, rstd, rows, n, eps);
}
void layer_norm_rows_f64(const double* x, const double* w, const double* b, double* y, double* mean, double* rstd,
                         int64_t rows, int64_t n, double eps) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowsF64)(x, w, b, y, mean, rstd, rows, n, eps);
}
void layer_norm_backward_rows_f32(const float* g, const float* x, const float* w, float* gx, float* gw, float* gb,
                                  int64_t rows, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardRowsF32)(g, x, w, gx, gw, gb, rows, n, eps);
}
void layer_norm_backward_rows_f64(const double* g, const double* x, const double* w, double* gx, double* gw,
                                  double* gb, int64_t rows, int64_t n, double eps) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardRowsF64)(g, x, w, gx, gw, gb, rows, n, eps);
}
void rms_norm_rows_f32(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormRowsF32)(x, w, y, rstd, rows, n, eps);
}
void rms_norm_rows_f64(const double* x, const double* w, double* y, double* rstd, int64_t rows, int64_t n,
                       double eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormRowsF64)(x, w, y, rstd, rows, n, eps);
}
void rms_norm_backward_rows_f32(const float* g, const float* x, const float* w, float* gx, float* gw, int64_t rows,
                                int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormBackwardRowsF32)(g, x, w, gx, gw, rows, n, eps);
}
void rms_norm_backward_rows_f64(const double* g, const double* x, const double* w, double* gx, double* gw,
                                int64_t rows, int64_t n, double eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormBackwardRowsF64)(g, x, w, gx, gw, rows, n, eps);
}
void affine_f32(const float* x, float* y, int64_t n, float s, float b) { HWY_DYNAMIC_DISPATCH(AffineF32)(x, y, n, s, b); }
void affine_f64(const double* x, double* y, int64_t n, double s, double b) {
  HWY_DYNAMIC_DISPATCH(AffineF64)(x, y, n, s, b);
}
}  // namespace foundry::kernels
#endif

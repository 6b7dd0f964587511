// SIMD softmax / log-softmax kernels (Highway, compiled per x86 target, chosen at run time).
// Rows: pass 1 finds the max (and any NaN), pass 2 stores exp(x - max) while summing, pass 3
// scales; a row of a few thousand floats stays in L1/L2 between passes, so memory sees one read
// and one write. Rows longer than kLongRow (which would leave the cache between passes) use the
// online form instead: one pass keeps a running max and a sum rescaled whenever the max grows
// (per L1-sized chunk), a second pass writes exp(x - max) / sum. Columns ([D, inner] blocks): the
// three-pass form with one lane per column.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/softmax.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Max of a row; sets `bad` when the softmax of this row is NaN everywhere (a NaN, +inf, or all
// -inf / empty).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T RowMax(D d, const T* HWY_RESTRICT x, int64_t n, bool& bad) {
  const int64_t N = int64_t(hn::Lanes(d));
  const T ninf = -std::numeric_limits<T>::infinity();
  auto m0 = hn::Set(d, ninf), m1 = m0, m2 = m0, m3 = m0;
  // hn::IsNaN, not Ne(v, v): Highway's Ne is an ordered compare (false when either side is NaN).
  auto nan = hn::IsNaN(m0);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    auto v2 = hn::LoadU(d, x + i + 2 * N), v3 = hn::LoadU(d, x + i + 3 * N);
    nan = hn::Or(nan, hn::Or(hn::Or(hn::IsNaN(v0), hn::IsNaN(v1)), hn::Or(hn::IsNaN(v2), hn::IsNaN(v3))));
    m0 = hn::Max(m0, v0);
    m1 = hn::Max(m1, v1);
    m2 = hn::Max(m2, v2);
    m3 = hn::Max(m3, v3);
  }
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(d, x + i);
    nan = hn::Or(nan, hn::IsNaN(v));
    m0 = hn::Max(m0, v);
  }
  T m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  bool any_nan = !hn::AllFalse(d, nan);
  for (; i < n; ++i) {
    if (std::isnan(x[i])) any_nan = true;
    m = x[i] > m ? x[i] : m;
  }
  bad = any_nan || !std::isfinite(m);
  return m;
}

constexpr int64_t kLongRow = 16384;

// sum(exp(x - m)) over n values.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T SumExp(D d, const T* HWY_RESTRICT x, int64_t n, T m) {
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::Add(s0, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
    s1 = hn::Add(s1, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + N), vm)));
  }
  for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += std::exp(x[i] - m);
  return s;
}

// The online form for long rows (see the header comment).
template <class D, typename T = hn::TFromD<D>>
void SoftmaxLongRow(D d, const T* HWY_RESTRICT x, T* HWY_RESTRICT y, int64_t n, bool log) {
  constexpr int64_t kChunkLen = 2048;
  const int64_t N = int64_t(hn::Lanes(d));
  const T ninf = -std::numeric_limits<T>::infinity();
  T m = ninf, s = 0;
  bool bad = false;
  for (int64_t c0 = 0; c0 < n && !bad; c0 += kChunkLen) {
    const int64_t cn = std::min(kChunkLen, n - c0);
    bool cbad;
    const T cm = RowMax(d, x + c0, cn, cbad);
    if (cbad && cm == ninf) {
      // All -inf (fine, contributes nothing) unless a NaN hid behind it.
      for (int64_t i = 0; i < cn; ++i) bad |= std::isnan(x[c0 + i]);
      continue;
    }
    if (cbad) {
      bad = true;  // NaN or +inf
      break;
    }
    if (cm > m) {
      s = m == ninf ? T(0) : s * std::exp(m - cm);
      m = cm;
    }
    s += SumExp(d, x + c0, cn, m);
  }
  if (bad || m == ninf) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  const auto vm = hn::Set(d, m);
  int64_t i = 0;
  if (log) {
    const T ls = std::log(s);
    const auto vl = hn::Set(d, ls);
    for (; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vm), vl), d, y + i);
    for (; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    const T inv = T(1) / s;
    const auto vi = hn::Set(d, inv);
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)), vi), d, y + i);
    for (; i < n; ++i) y[i] = std::exp(x[i] - m) * inv;
  }
}

template <typename T>
void SoftmaxRowsImpl(const T* HWY_RESTRICT in, T* HWY_RESTRICT out, int64_t rows, int64_t n, bool log) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * n;
    T* y = out + r * n;
    if (n > kLongRow) {
      SoftmaxLongRow(d, x, y, n, log);
      continue;
    }
    bool bad;
    const T m = RowMax(d, x, n, bad);
    if (bad) {
      for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const auto vm = hn::Set(d, m);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t i = 0;
    if (log) {
      for (; i + 2 * N <= n; i += 2 * N) {
        s0 = hn::Add(s0, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
        s1 = hn::Add(s1, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + N), vm)));
      }
      for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
    } else {
      for (; i + 2 * N <= n; i += 2 * N) {
        auto e0 = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
        auto e1 = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + N), vm));
        hn::StoreU(e0, d, y + i);
        hn::StoreU(e1, d, y + i + N);
        s0 = hn::Add(s0, e0);
        s1 = hn::Add(s1, e1);
      }
      for (; i + N <= n; i += N) {
        auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
        hn::StoreU(e, d, y + i);
        s0 = hn::Add(s0, e);
      }
    }
    T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
    for (; i < n; ++i) {
      T e = std::exp(x[i] - m);
      if (!log) y[i] = e;
      s += e;
    }
    i = 0;
    if (log) {
      // (x - max) - log(sum), in PyTorch's order.
      const T ls = std::log(s);
      const auto vl = hn::Set(d, ls);
      for (; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vm), vl), d, y + i);
      for (; i < n; ++i) y[i] = (x[i] - m) - ls;
    } else {
      const T inv = T(1) / s;
      const auto vi = hn::Set(d, inv);
      for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vi), d, y + i);
      for (; i < n; ++i) y[i] *= inv;
    }
  }
}

// One vector of columns j..j+N of a [D, inner] block.
template <typename T>
void SoftmaxColsImpl(const T* HWY_RESTRICT x, T* HWY_RESTRICT y, int64_t D, int64_t inner, int64_t j0, int64_t j1,
                     bool log) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const T ninf = -std::numeric_limits<T>::infinity();
  const auto vnan = hn::Set(d, std::numeric_limits<T>::quiet_NaN());
  int64_t j = j0;
  for (; j + N <= j1; j += N) {
    auto m = hn::Set(d, ninf);
    auto nan = hn::IsNaN(m);
    for (int64_t k = 0; k < D; ++k) {
      auto v = hn::LoadU(d, x + k * inner + j);
      nan = hn::Or(nan, hn::IsNaN(v));
      m = hn::Max(m, v);
    }
    auto bad = hn::Or(nan, hn::Not(hn::IsFinite(m)));
    auto s = hn::Zero(d);
    for (int64_t k = 0; k < D; ++k) {
      auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + k * inner + j), m));
      if (!log) hn::StoreU(e, d, y + k * inner + j);
      s = hn::Add(s, e);
    }
    if (log) {
      auto ls = hn::Log(d, s);
      for (int64_t k = 0; k < D; ++k) {
        auto r = hn::Sub(hn::Sub(hn::LoadU(d, x + k * inner + j), m), ls);
        hn::StoreU(hn::IfThenElse(bad, vnan, r), d, y + k * inner + j);
      }
    } else {
      auto inv = hn::Div(hn::Set(d, T(1)), s);
      for (int64_t k = 0; k < D; ++k) {
        auto r = hn::Mul(hn::LoadU(d, y + k * inner + j), inv);
        hn::StoreU(hn::IfThenElse(bad, vnan, r), d, y + k * inner + j);
      }
    }
  }
  for (; j < j1; ++j) {
    T m = ninf;
    bool any_nan = false;
    for (int64_t k = 0; k < D; ++k) {
      T v = x[k * inner + j];
      if (std::isnan(v)) any_nan = true;
      m = v > m ? v : m;
    }
    if (any_nan || !std::isfinite(m)) {
      for (int64_t k = 0; k < D; ++k) y[k * inner + j] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    T s = 0;
    for (int64_t k = 0; k < D; ++k) {
      T e = std::exp(x[k * inner + j] - m);
      if (!log) y[k * inner + j] = e;
      s += e;
    }
    if (log) {
      T ls = std::log(s);
      for (int64_t k = 0; k < D; ++k) y[k * inner + j] = (x[k * inner + j] - m) - ls;
    } else {
      for (int64_t k = 0; k < D; ++k) y[k * inner + j] /= s;
    }
  }
}

template <typename T>
void SoftmaxBackwardRowsImpl(const T* HWY_RESTRICT g, const T* HWY_RESTRICT y, T* HWY_RESTRICT gx, int64_t rows,
                             int64_t n, bool log) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* o = gx + r * n;
    auto a0 = hn::Zero(d), a1 = hn::Zero(d);
    int64_t i = 0;
    if (log) {
      for (; i + 2 * N <= n; i += 2 * N) {
        a0 = hn::Add(a0, hn::LoadU(d, gr + i));
        a1 = hn::Add(a1, hn::LoadU(d, gr + i + N));
      }
      for (; i + N <= n; i += N) a0 = hn::Add(a0, hn::LoadU(d, gr + i));
    } else {
      for (; i + 2 * N <= n; i += 2 * N) {
        a0 = hn::MulAdd(hn::LoadU(d, gr + i), hn::LoadU(d, yr + i), a0);
        a1 = hn::MulAdd(hn::LoadU(d, gr + i + N), hn::LoadU(d, yr + i + N), a1);
      }
      for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(d, gr + i), hn::LoadU(d, yr + i), a0);
    }
    T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
    for (; i < n; ++i) s += log ? gr[i] : gr[i] * yr[i];
    const auto vs = hn::Set(d, s);
    i = 0;
    if (log) {
      for (; i + N <= n; i += N) {
        auto e = hn::Exp(d, hn::LoadU(d, yr + i));
        hn::StoreU(hn::NegMulAdd(e, vs, hn::LoadU(d, gr + i)), d, o + i);
      }
      for (; i < n; ++i) o[i] = gr[i] - std::exp(yr[i]) * s;
    } else {
      for (; i + N <= n; i += N) {
        auto yv = hn::LoadU(d, yr + i);
        hn::StoreU(hn::Mul(yv, hn::Sub(hn::LoadU(d, gr + i), vs)), d, o + i);
      }
      for (; i < n; ++i) o[i] = yr[i] * (gr[i] - s);
    }
  }
}

template <typename T>
void SoftmaxBackwardColsImpl(const T* HWY_RESTRICT g, const T* HWY_RESTRICT y, T* HWY_RESTRICT gx, int64_t D,
                             int64_t inner, int64_t j0, int64_t j1, bool log) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t j = j0;
  for (; j + N <= j1; j += N) {
    auto s = hn::Zero(d);
    for (int64_t k = 0; k < D; ++k) {
      auto gv = hn::LoadU(d, g + k * inner + j);
      s = log ? hn::Add(s, gv) : hn::MulAdd(gv, hn::LoadU(d, y + k * inner + j), s);
    }
    for (int64_t k = 0; k < D; ++k) {
      auto gv = hn::LoadU(d, g + k * inner + j);
      auto yv = hn::LoadU(d, y + k * inner + j);
      auto r = log ? hn::NegMulAdd(hn::Exp(d, yv), s, gv) : hn::Mul(yv, hn::Sub(gv, s));
      hn::StoreU(r, d, gx + k * inner + j);
    }
  }
  for (; j < j1; ++j) {
    T s = 0;
    for (int64_t k = 0; k < D; ++k) s += log ? g[k * inner + j] : g[k * inner + j] * y[k * inner + j];
    for (int64_t k = 0; k < D; ++k) {
      int64_t o = k * inner + j;
      gx[o] = log ? g[o] - std::exp(y[o]) * s : y[o] * (g[o] - s);
    }
  }
}

void SoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log) { SoftmaxRowsImpl(x, y, rows, n, log); }
void SoftmaxRowsF64(const double* x, double* y, int64_t rows, int64_t n, bool log) {
  SoftmaxRowsImpl(x, y, rows, n, log);
}
void SoftmaxColsF32(const float* x, float* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log) {
  SoftmaxColsImpl(x, y, D, inner, j0, j1, log);
}
void SoftmaxColsF64(const double* x, double* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log) {
  SoftmaxColsImpl(x, y, D, inner, j0, j1, log);
}
void SoftmaxBackwardRowsF32(const float* g, const float* y, float* gx, int64_t rows, int64_t n, bool log) {
  SoftmaxBackwardRowsImpl(g, y, gx, rows, n, log);
}
void SoftmaxBackwardRowsF64(const double* g, const double* y, double* gx, int64_t rows, int64_t n, bool log) {
  SoftmaxBackwardRowsImpl(g, y, gx, rows, n, log);
}
void SoftmaxBackwardColsF32(const float* g, const float* y, float* gx, int64_t D, int64_t inner, int64_t j0,
                            int64_t j1, bool log) {
  SoftmaxBackwardColsImpl(g, y, gx, D, inner, j0, j1, log);
}
void SoftmaxBackwardColsF64(const double* g, const double* y, double* gx, int64_t D, int64_t inner, int64_t j0,
                            int64_t j1, bool log) {
  SoftmaxBackwardColsImpl(g, y, gx, D, inner, j0, j1, log);
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(SoftmaxRowsF32);
HWY_EXPORT(SoftmaxRowsF64);
HWY_EXPORT(SoftmaxColsF32);
HWY_EXPORT(SoftmaxColsF64);
HWY_EXPORT(SoftmaxBackwardRowsF32);
HWY_EXPORT(SoftmaxBackwardRowsF64);
HWY_EXPORT(SoftmaxBackwardColsF32);
HWY_EXPORT(SoftmaxBackwardColsF64);

void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsF32)(x, y, rows, n, log);
}
void softmax_rows_f64(const double* x, double* y, int64_t rows, int64_t n, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsF64)(x, y, rows, n, log);
}
void softmax_cols_f32(const float* x, float* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxColsF32)(x, y, D, inner, j0, j1, log);
}
void softmax_cols_f64(const double* x, double* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxColsF64)(x, y, D, inner, j0, j1, log);
}
void softmax_backward_rows_f32(const float* g, const float* y, float* gx, int64_t rows, int64_t n, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsF32)(g, y, gx, rows, n, log);
}
void softmax_backward_rows_f64(const double* g, const double* y, double* gx, int64_t rows, int64_t n, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsF64)(g, y, gx, rows, n, log);
}
void softmax_backward_cols_f32(const float* g, const float* y, float* gx, int64_t D, int64_t inner, int64_t j0,
                               int64_t j1, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardColsF32)(g, y, gx, D, inner, j0, j1, log);
}
void softmax_backward_cols_f64(const double* g, const double* y, double* gx, int64_t D, int64_t inner, int64_t j0,
                               int64_t j1, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardColsF64)(g, y, gx, D, inner, j0, j1, log);
}
}  // namespace foundry::kernels
#endif

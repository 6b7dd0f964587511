// SIMD kernels of the unary functions (Highway, compiled once per x86 target and chosen at run
// time). Each function has a formula and a valid-input predicate; vectors holding any lane
// outside the predicate (NaN, infinities, range limits of Highway's math) are computed lane by
// lane with the scalar reference, so special values follow it exactly.
//
// Accuracy against the reference (measured in tests/unit/simd_unary_test.cpp): exp, expm1,
// sigmoid, silu: <= 4 ulp; log family: <= 4 ulp; trig/hyperbolic: <= 4 ulp (Highway's stated
// bounds); erf (float): <= 3 ulp (two polynomial fits, see ErfF);
// gelu: <= 2.5e-7 relative to max(1, |x|) (ErfAbsF); gelu_tanh: <= 2e-7 relative to max(1, |x|).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/unary_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/simd_math-inl.h"
#include "kernels/cpu/unary.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class Formula, class Valid>
HWY_INLINE void Run(D d, const hn::TFromD<D>* HWY_RESTRICT in, hn::TFromD<D>* out, int64_t n, UnaryOp op,
                    const UnaryParams& p, Formula formula, Valid valid) {
  using T = hn::TFromD<D>;
  const int64_t N = int64_t(hn::Lanes(d));
  alignas(64) T buf[64];
  auto one = [&](int64_t i, int64_t count) {
    auto v = hn::LoadU(d, (count == N ? in + i : buf));
    auto ok = valid(v);
    if (hn::AllTrue(d, ok)) {
      hn::StoreU(formula(v), d, count == N ? out + i : buf);
    } else {
      alignas(64) T lanes[64];
      hn::StoreU(v, d, lanes);
      for (int64_t k = 0; k < N; ++k) lanes[k] = unary_ref(op, lanes[k], p);
      hn::StoreU(hn::LoadU(d, lanes), d, count == N ? out + i : buf);
    }
  };
  int64_t i = 0;
  // Large outputs use non-temporal stores (see binary_simd.cpp); in-place calls do not.
  const bool stream = n * int64_t(sizeof(T)) >= (int64_t(1) << 21) && n >= 2 * N && out != in;
  if (stream) {
    one(0, N);
    const uintptr_t bytes = uintptr_t(N) * sizeof(T);
    i = int64_t((bytes - reinterpret_cast<uintptr_t>(out) % bytes) % bytes / sizeof(T));
    for (; i + N <= n; i += N) {
      auto v = hn::LoadU(d, in + i);
      if (hn::AllTrue(d, valid(v))) {
        hn::Stream(formula(v), d, out + i);
      } else {
        one(i, N);
      }
    }
    hwy::FlushStream();
  }
  for (; i + N <= n; i += N) one(i, N);
  if (i < n) {
    int64_t rest = n - i;
    for (int64_t k = 0; k < N; ++k) buf[k] = k < rest ? in[i + k] : T(0);
    one(i, rest);
    for (int64_t k = 0; k < rest; ++k) out[i + k] = buf[k];
  }
}

template <typename T>
void UnaryImpl(UnaryOp op, const T* in, T* out, int64_t n, const UnaryParams& p) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const V zero = hn::Zero(d), one = hn::Set(d, T(1));
  const T big = std::numeric_limits<T>::max();
  const T exp_hi = sizeof(T) == 4 ? T(88.0) : T(709.0);
  auto finite = [&](V v) { return hn::Le(hn::Abs(v), hn::Set(d, big)); };
  auto any = [&](V v) { return hn::Eq(v, v); };  // not NaN
  auto exp_ok = [&](V v) { return hn::And(hn::Ge(v, hn::Set(d, -big)), hn::Le(v, hn::Set(d, exp_hi))); };
  auto pos_ok = [&](V v) {
    return hn::And(hn::Ge(v, hn::Set(d, std::numeric_limits<T>::min())), hn::Le(v, hn::Set(d, big)));
  };
  auto sigmoid = [&](V v) { return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(v)))); };
  // Sigmoid-like formulas are valid while exp(-x) stays finite.
  auto sig_ok = [&](V v) { return hn::And(hn::Ge(v, hn::Set(d, -exp_hi)), hn::Le(v, hn::Set(d, big))); };
  switch (op) {
    case UnaryOp::Neg: return Run(d, in, out, n, op, p, [&](V v) { return hn::Neg(v); }, any);
    case UnaryOp::Abs: return Run(d, in, out, n, op, p, [&](V v) { return hn::Abs(v); }, any);
    case UnaryOp::Sign:
      return Run(d, in, out, n, op, p, [&](V v) {
        return hn::IfThenElse(hn::Gt(v, zero), one, hn::IfThenElse(hn::Lt(v, zero), hn::Neg(one), zero));
      }, any);
    case UnaryOp::Square: return Run(d, in, out, n, op, p, [&](V v) { return hn::Mul(v, v); }, any);
    case UnaryOp::Reciprocal: return Run(d, in, out, n, op, p, [&](V v) { return hn::Div(one, v); }, any);
    case UnaryOp::Sqrt: return Run(d, in, out, n, op, p, [&](V v) { return hn::Sqrt(v); }, any);
    case UnaryOp::Rsqrt: return Run(d, in, out, n, op, p, [&](V v) { return hn::Div(one, hn::Sqrt(v)); }, any);
    case UnaryOp::Exp: return Run(d, in, out, n, op, p, [&](V v) { return hn::Exp(d, v); }, exp_ok);
    case UnaryOp::Expm1: return Run(d, in, out, n, op, p, [&](V v) { return hn::Expm1(d, v); }, exp_ok);
    case UnaryOp::Log: return Run(d, in, out, n, op, p, [&](V v) { return hn::Log(d, v); }, pos_ok);
    case UnaryOp::Log2: return Run(d, in, out, n, op, p, [&](V v) { return hn::Log2(d, v); }, pos_ok);
    case UnaryOp::Log10: return Run(d, in, out, n, op, p, [&](V v) { return hn::Log10(d, v); }, pos_ok);
    case UnaryOp::Log1p:
      // log1p(x) = log(u) * x / (u - 1) with u = 1 + x (Kahan), exact when u == 1.
      return Run(d, in, out, n, op, p, [&](V v) {
        V u = hn::Add(one, v);
        V r = hn::Mul(hn::Log(d, u), hn::Div(v, hn::Sub(u, one)));
        return hn::IfThenElse(hn::Eq(u, one), v, r);
      }, [&](V v) { return hn::And(hn::Gt(v, hn::Set(d, T(-1))), hn::Le(v, hn::Set(d, big))); });
    case UnaryOp::Sin:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Sin(d, v); },
                 [&](V v) { return hn::Le(hn::Abs(v), hn::Set(d, T(39000))); });
    case UnaryOp::Cos:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Cos(d, v); },
                 [&](V v) { return hn::Le(hn::Abs(v), hn::Set(d, T(39000))); });
    case UnaryOp::Asin:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Asin(d, v); }, [&](V v) { return hn::Le(hn::Abs(v), one); });
    case UnaryOp::Acos:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Acos(d, v); }, [&](V v) { return hn::Le(hn::Abs(v), one); });
    case UnaryOp::Atan: return Run(d, in, out, n, op, p, [&](V v) { return hn::Atan(d, v); }, finite);
    case UnaryOp::Sinh:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Sinh(d, v); },
                 [&](V v) { return hn::Le(hn::Abs(v), hn::Set(d, sizeof(T) == 4 ? T(88.72) : T(709))); });
    case UnaryOp::Tanh: return Run(d, in, out, n, op, p, [&](V v) { return hn::Tanh(d, v); }, finite);
    case UnaryOp::Asinh: return Run(d, in, out, n, op, p, [&](V v) { return hn::Asinh(d, v); }, finite);
    case UnaryOp::Acosh:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Acosh(d, v); },
                 [&](V v) { return hn::And(hn::Ge(v, one), hn::Le(v, hn::Set(d, big))); });
    case UnaryOp::Atanh:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Atanh(d, v); }, [&](V v) { return hn::Lt(hn::Abs(v), one); });
    case UnaryOp::Sigmoid: return Run(d, in, out, n, op, p, sigmoid, sig_ok);
    case UnaryOp::Silu: return Run(d, in, out, n, op, p, [&](V v) { return hn::Mul(v, sigmoid(v)); }, sig_ok);
    case UnaryOp::Relu:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::IfThenElse(hn::Lt(v, zero), zero, v); }, any);
    case UnaryOp::Relu6:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Min(hn::Max(v, zero), hn::Set(d, T(6))); }, any);
    case UnaryOp::LeakyRelu: {
      const V slope = hn::Set(d, T(p.a));
      return Run(d, in, out, n, op, p, [&](V v) { return hn::IfThenElse(hn::Gt(v, zero), v, hn::Mul(v, slope)); }, any);
    }
    case UnaryOp::Elu: {
      const V alpha = hn::Set(d, T(p.a)), scale = hn::Set(d, T(p.b)), in_scale = hn::Set(d, T(p.c));
      return Run(d, in, out, n, op, p, [&](V v) {
        V neg = hn::Mul(hn::Mul(hn::Expm1(d, hn::Mul(hn::Min(v, zero), in_scale)), alpha), scale);
        return hn::IfThenElse(hn::Gt(v, zero), hn::Mul(v, scale), neg);
      }, finite);
    }
    case UnaryOp::GeluTanh: {
      const V k = hn::Set(d, T(M_SQRT2 * M_2_SQRTPI * 0.5)), c = hn::Set(d, T(0.044715)), half = hn::Set(d, T(0.5));
      return Run(d, in, out, n, op, p, [&](V v) {
        V inner = hn::Mul(k, hn::MulAdd(hn::Mul(c, v), hn::Mul(v, v), v));
        return hn::Mul(hn::Mul(half, v), hn::Add(one, hn::Tanh(d, inner)));
      }, finite);
    }
    case UnaryOp::Gelu:
      if constexpr (sizeof(T) == 4) {
        const V half = hn::Set(d, T(0.5)), r2 = hn::Set(d, T(M_SQRT1_2));
        return Run(d, in, out, n, op, p, [&](V v) {
          return hn::Mul(hn::Mul(half, v), hn::Add(one, ErfAbsF(d, hn::Mul(v, r2))));
        }, finite);
      }
      break;
    case UnaryOp::Erf:
      if constexpr (sizeof(T) == 4) return Run(d, in, out, n, op, p, [&](V v) { return ErfF(d, v); }, finite);
      break;
    case UnaryOp::Softplus: {
      const V beta = hn::Set(d, T(p.a)), threshold = hn::Set(d, T(p.b));
      return Run(d, in, out, n, op, p, [&](V v) {
        V bx = hn::Mul(v, beta);
        V e = hn::Exp(d, hn::Min(bx, threshold));
        V u = hn::Add(one, e);
        V l1p = hn::IfThenElse(hn::Eq(u, one), e, hn::Mul(hn::Log(d, u), hn::Div(e, hn::Sub(u, one))));
        return hn::IfThenElse(hn::Gt(bx, threshold), v, hn::Div(l1p, beta));
      }, [&](V v) { return hn::And(finite(v), hn::Le(hn::Abs(hn::Mul(v, beta)), hn::Set(d, exp_hi))); });
    }
    case UnaryOp::Softsign:
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Div(v, hn::Add(one, hn::Abs(v))); }, finite);
    case UnaryOp::Hardtanh: {
      const V lo = hn::Set(d, T(p.a)), hi = hn::Set(d, T(p.b));
      return Run(d, in, out, n, op, p, [&](V v) { return hn::Min(hn::Max(v, lo), hi); }, any);
    }
    case UnaryOp::Hardsigmoid: {
      const V three = hn::Set(d, T(3)), six = hn::Set(d, T(6));
      return Run(d, in, out, n, op, p, [&](V v) {
        return hn::Div(hn::Min(hn::Max(hn::Add(v, three), zero), six), six);
      }, any);
    }
    case UnaryOp::Hardswish: {
      const V three = hn::Set(d, T(3)), six = hn::Set(d, T(6));
      return Run(d, in, out, n, op, p, [&](V v) {
        return hn::Div(hn::Mul(v, hn::Min(hn::Max(hn::Add(v, three), zero), six)), six);
      }, finite);
    }
    case UnaryOp::Floor: return Run(d, in, out, n, op, p, [&](V v) { return hn::Floor(v); }, finite);
    case UnaryOp::Ceil: return Run(d, in, out, n, op, p, [&](V v) { return hn::Ceil(v); }, finite);
    case UnaryOp::Trunc: return Run(d, in, out, n, op, p, [&](V v) { return hn::Trunc(v); }, finite);
    case UnaryOp::Round:
      if (p.a == 0) return Run(d, in, out, n, op, p, [&](V v) { return hn::Round(v); }, finite);
      break;
    case UnaryOp::Frac: return Run(d, in, out, n, op, p, [&](V v) { return hn::Sub(v, hn::Trunc(v)); }, finite);
    case UnaryOp::Clamp:
      if (!std::isnan(p.a) && !std::isnan(p.b)) {
        const V lo = hn::Set(d, T(p.a)), hi = hn::Set(d, T(p.b));
        return Run(d, in, out, n, op, p, [&](V v) { return hn::Min(hn::Max(v, lo), hi); }, any);
      }
      break;
    default:
      break;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = unary_ref(op, in[i], p);
}

void UnaryF32(UnaryOp op, const float* in, float* out, int64_t n, const UnaryParams& p) {
  UnaryImpl<float>(op, in, out, n, p);
}
void UnaryF64(UnaryOp op, const double* in, double* out, int64_t n, const UnaryParams& p) {
  UnaryImpl<double>(op, in, out, n, p);
}

void ConvertF16ToF32(const uint16_t* in, float* out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  if (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) {
    for (; i + N <= n; i += N)
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(in + i))), df, out + i);
  }
  for (; i < n; ++i) out[i] = Half::to_float(in[i]);
}

void ConvertF32ToF16(const float* in, uint16_t* out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  // Highway's emulated targets truncate; keep them on the exact scalar path.
  // Only targets with F16C round in hardware; the others truncate, so they use the exact scalar path.
  if (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) {
    for (; i + N <= n; i += N)
      hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, in + i)), dh, reinterpret_cast<hwy::float16_t*>(out + i));
  }
  for (; i < n; ++i) out[i] = Half::from_float(in[i]);
}

void ConvertBF16ToF32(const uint16_t* in, float* out, int64_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(du));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto wide = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, in + i)));
    hn::StoreU(hn::BitCast(df, wide), df, out + i);
  }
  for (; i < n; ++i) out[i] = float(BFloat16::from_bits(in[i]));
}

void ConvertF32ToBF16(const float* in, uint16_t* out, int64_t n) {
  // Round to nearest even on the bit pattern; NaN becomes a quiet NaN.
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) StoreBF16(df, hn::LoadU(df, in + i), out + i);
  for (; i < n; ++i) out[i] = BFloat16::from_float(in[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryF64);
HWY_EXPORT(ConvertF16ToF32);
HWY_EXPORT(ConvertF32ToF16);
HWY_EXPORT(ConvertBF16ToF32);
HWY_EXPORT(ConvertF32ToBF16);

void unary_f32(UnaryOp op, const float* in, float* out, int64_t n, const UnaryParams& p) {
  HWY_DYNAMIC_DISPATCH(UnaryF32)(op, in, out, n, p);
}
void unary_f64(UnaryOp op, const double* in, double* out, int64_t n, const UnaryParams& p) {
  HWY_DYNAMIC_DISPATCH(UnaryF64)(op, in, out, n, p);
}
void convert_f16_to_f32(const uint16_t* in, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ConvertF16ToF32)(in, out, n); }
void convert_f32_to_f16(const float* in, uint16_t* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ConvertF32ToF16)(in, out, n); }
void convert_bf16_to_f32(const uint16_t* in, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ConvertBF16ToF32)(in, out, n); }
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ConvertF32ToBF16)(in, out, n); }
}  // namespace foundry::kernels
#endif

// Shared SIMD math for the Highway kernels (included once per target, Highway's -inl.h pattern).
#if defined(FOUNDRY_SIMD_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FOUNDRY_SIMD_MATH_INL_H_
#undef FOUNDRY_SIMD_MATH_INL_H_
#else
#define FOUNDRY_SIMD_MATH_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of n values across four vector accumulators (their lanes, then the scalar tail): the order
// every plain row sum of the kernels follows (norms' means, reductions' 2048-value blocks), so the
// two agree to the bit.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T RowSum(D d, const T* HWY_RESTRICT p, int64_t n) {
  const int64_t N = int64_t(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * N));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, hn::LoadU(d, p + i));
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

// float32 lanes to bfloat16 bit patterns (in the low 16 bits of 32-bit lanes), rounded to nearest
// even; NaN becomes a quiet NaN. BFloat16::from_float's rounding, a vector at a time.
template <class DF, class VF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundToBF16Bits(DF, VF vf) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, vf);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(lsb, hn::Set(du, 0x7fffu))));
  const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(vf)), nan, rounded);
}

// Stores float32 lanes as bfloat16 (RoundToBF16Bits) at out.
template <class DF, class VF>
HWY_INLINE void StoreBF16(DF df, VF vf, uint16_t* out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToSigned<decltype(du)> di;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, RoundToBF16Bits(df, vf))), d16, out);  // values fit in 16 bits
}

template <class D, class V>
HWY_INLINE V ErfF(D d, V x) {
  // Two least-squares polynomial fits (made with tools/fit_erf.py):
  //   |x| < 1:         erf(x) = x * P(x^2), P of degree 6 (relative error 1.4e-9 before rounding)
  //   1 <= |x| < 3.95: erf(x) = 1 - exp(Q(|x|)), Q of degree 8 fitted to log(erfc(x)) (abs 4.5e-10)
  //   beyond: +-1. Measured in float: <= 3 ulp (tests/ops/simd_test.cpp). No division.
  using T = hn::TFromD<D>;
  static constexpr double kP[] = {7.898210206447976e-05, -0.0008024354128489375, 0.005190053577816331,
                                  -0.026854808537215752, 0.11283612428244943,    -0.3761262884332515,
                                  1.1283791665100524};
  static constexpr double kQ[] = {1.6337533498901008e-06, -4.5967861143174796e-05, 0.000595850273393864,
                                  -0.004754205262380056,  0.026403229917310003,    -0.11004405203456075,
                                  -0.6318690588994125,    -1.1302055505613755,     0.0003126091906092803};
  auto ax = hn::Abs(x);
  auto x2 = hn::Mul(x, x);
  auto p = hn::Set(d, T(kP[0]));
  for (int k = 1; k < 7; ++k) p = hn::MulAdd(p, x2, hn::Set(d, T(kP[k])));
  auto small = hn::Mul(p, x);
  auto clamped = hn::Min(ax, hn::Set(d, T(3.95)));
  auto q = hn::Set(d, T(kQ[0]));
  for (int k = 1; k < 9; ++k) q = hn::MulAdd(q, clamped, hn::Set(d, T(kQ[k])));
  auto big = hn::Sub(hn::Set(d, T(1)), hn::Exp(d, q));
  big = hn::IfThenElse(hn::Ge(ax, hn::Set(d, T(3.95))), hn::Set(d, T(1)), big);
  big = hn::CopySign(big, x);
  return hn::IfThenElse(hn::Lt(ax, hn::Set(d, T(1))), small, big);
}

/// erf for GELU's forward, where the error that matters is absolute: z P(z^2) / Q(z^2) with
/// |z| clamped to 4, a rational least-squares fit (tools/fit_erf.py) of absolute error 3.3e-7
/// in float (gelu within 2.2e-7 of max(1, |x|), PyTorch's own float erf is 1.5e-7 before
/// rounding). About half the operations of ErfF and no exp: GELU is compute-bound.
template <class D, class V>
HWY_INLINE V ErfAbsF(D d, V x) {
  using T = hn::TFromD<D>;
  static constexpr double kP[] = {1.9857108196478327e-06, 0.0002858949581851162, 0.003921289069857264,
                                  0.05321445522699772,    0.1943666237504273,    1.1283790615346971};
  static constexpr double kQ[] = {3.74807675314299e-05, 0.0011957938735500516, 0.01528058297831032,
                                  0.11569413048912187,  0.5055848432279487,    1.0};
  auto z = hn::Min(hn::Abs(x), hn::Set(d, T(4)));
  auto w = hn::Mul(z, z);
  auto p = hn::Set(d, T(kP[0])), q = hn::Set(d, T(kQ[0]));
  for (int k = 1; k < 6; ++k) {
    p = hn::MulAdd(p, w, hn::Set(d, T(kP[k])));
    q = hn::MulAdd(q, w, hn::Set(d, T(kQ[k])));
  }
  auto e = hn::Min(hn::Div(hn::Mul(z, p), q), hn::Set(d, T(1)));
  return hn::CopySign(e, x);
}

/// GELU's derivative: Phi(x) + x phi(x).
template <class D, class V>
HWY_INLINE V GeluGradF(D d, V x) {
  using T = hn::TFromD<D>;
  auto cdf = hn::Mul(hn::Set(d, T(0.5)), hn::Add(hn::Set(d, T(1)), ErfF(d, hn::Mul(x, hn::Set(d, T(M_SQRT1_2))))));
  auto pdf = hn::Mul(hn::Exp(d, hn::Mul(hn::Mul(x, x), hn::Set(d, T(-0.5)))), hn::Set(d, T(M_2_SQRTPI * M_SQRT1_2 * 0.5)));
  return hn::MulAdd(x, pdf, cdf);
}

/// Derivative of the tanh form of GELU (PyTorch's gelu_backward with approximate='tanh').
template <class D, class V>
HWY_INLINE V GeluTanhGradF(D d, V x) {
  using T = hn::TFromD<D>;
  const auto kb = hn::Set(d, T(M_SQRT2 * M_2_SQRTPI * 0.5)), kk = hn::Set(d, T(0.044715));
  auto x2 = hn::Mul(x, x);
  auto inner = hn::Mul(kb, hn::MulAdd(hn::Mul(kk, x2), x, x));
  auto th = hn::Tanh(d, inner);
  auto one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  auto left_derivative = hn::Mul(half, hn::Add(one, th));
  auto dinner = hn::Mul(kb, hn::MulAdd(hn::Set(d, T(3 * 0.044715)), x2, one));
  auto right_derivative = hn::Mul(hn::Mul(hn::Mul(half, x), hn::NegMulAdd(th, th, one)), dinner);
  return hn::Add(left_derivative, right_derivative);
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#endif  // include guard

// Special functions not in <cmath> (or not thread-safe there), following PyTorch's Math.h.
#pragma once

#include <cstdint>

namespace foundry::kernels {

/// Inverse error function: erfinv(±1) = ±inf, NaN outside [-1, 1].
double calc_erfinv(double y);
/// log|Γ(x)|, thread-safe (lgamma_r), inf at the poles.
double calc_lgamma(double x);
/// ψ(x): -inf at 0 (as PyTorch: copysign(inf, -x)), NaN at negative integers.
double calc_digamma(double x);
/// ψ'(x) (trigamma), for digamma's gradient.
double calc_trigamma(double x);
/// Hurwitz zeta function ζ(x, q) (Cephes), for polygamma.
double calc_zeta(double x, double q);
/// ψ^(n)(x): digamma for n = 0, trigamma for 1, (-1)^(n+1) n! ζ(n+1, x) beyond.
double calc_polygamma(int64_t n, double x);

}  // namespace foundry::kernels

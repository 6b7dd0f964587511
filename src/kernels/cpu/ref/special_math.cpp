#include "kernels/cpu/special_math.h"

#include <cmath>
#include <limits>

namespace foundry::kernels {

double calc_erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1) return std::numeric_limits<double>::infinity();
  if (y == -1) return -std::numeric_limits<double>::infinity();
  // Giles (2010) single-precision approximation as a start, then two Newton steps on erf, which
  // bring it to double precision.
  double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    w -= 2.5;
    double p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
    x = p * y;
  } else {
    w = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
    x = p * y;
  }
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int i = 0; i < 2; ++i) {
    double err = std::erf(x) - y;
    x -= err / (two_over_sqrt_pi * std::exp(-x * x));
  }
  return x;
}

double calc_lgamma(double x) {
  int sign;
  return ::lgamma_r(x, &sign);
}

double calc_digamma(double x) {
  // PyTorch's calc_digamma (Cephes-style): reflection for x < 0, recurrence to x >= 10, series.
  static const double kPsi10 = 2.25175258906672110764;
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  bool x_is_integer = x == std::trunc(x);
  if (x < 0) {
    if (x_is_integer) return std::numeric_limits<double>::quiet_NaN();
    double q, r = std::modf(x, &q);
    return calc_digamma(1 - x) - M_PI / std::tan(M_PI * r);
  }
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + kPsi10;
  static const double A[] = {
      8.33333333333333333333E-2,  -2.10927960927960927961E-2, 7.57575757575757575758E-3,
      -4.16666666666666666667E-3, 3.96825396825396825397E-3,  -8.33333333333333333333E-3,
      8.33333333333333333333E-2,
  };
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x);
    double poly = 0;
    for (double a : A) poly = poly * z + a;
    y = z * poly;
  }
  return result + std::log(x) - (0.5 / x) - y;
}

double calc_trigamma(double x) {
  // PyTorch's calc_trigamma.
  double sign = +1;
  double result = 0;
  if (x < 0.5) {
    sign = -1;
    const double sin_pi_x = std::sin(M_PI * x);
    result -= (M_PI * M_PI) / (sin_pi_x * sin_pi_x);
    x = 1 - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += 1 / (x * x);
    x += 1;
  }
  const double ixx = 1 / (x * x);
  result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x;
  return sign * result;
}

double calc_zeta(double x, double q) {
  // Cephes zeta.c, as in PyTorch's Math.h.
  static const double MACHEP = 1.11022302462515654042E-16;
  static const double A[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                             7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                             -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18};
  if (x == 1) return std::numeric_limits<double>::infinity();
  if (x < 1) return std::numeric_limits<double>::quiet_NaN();
  if (q <= 0) {
    if (q == std::floor(q)) return std::numeric_limits<double>::infinity();
    if (x != std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
  }
  double s = std::pow(q, -x);
  double a = q;
  int i = 0;
  double b = 0;
  while (i < 9 || a <= 9) {
    i += 1;
    a += 1;
    b = std::pow(a, -x);
    s += b;
    if (-MACHEP * s < b && b < MACHEP * s) return s;
  }
  double w = a;
  s += b * w / (x - 1);
  s -= 0.5 * b;
  a = 1;
  double k = 0;
  for (int j = 0; j < 12; ++j) {
    a *= x + k;
    b /= w;
    double t = a * b / A[j];
    s = s + t;
    t = std::fabs(t / s);
    if (t < MACHEP) return s;
    k += 1;
    a *= x + k;
    b /= w;
    k += 1;
  }
  return s;
}

double calc_polygamma(int64_t n, double x) {
  if (n == 0) return calc_digamma(x);
  if (n == 1) return calc_trigamma(x);
  double sign = (n % 2) ? 1.0 : -1.0;  // (-1)^(n+1)
  return sign * std::exp(std::lgamma(double(n) + 1.0)) * calc_zeta(double(n + 1), x);
}

}  // namespace foundry::kernels

// Scalar reference implementations of the unary functions. These define the semantics (PyTorch
// 1.13's, including NaN and signed-zero behaviour); the SIMD kernels must agree with them.
#include <cmath>
#include <limits>

#include "kernels/cpu/special_math.h"
#include "kernels/cpu/unary.h"

namespace foundry::kernels {

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {
      "neg", "abs", "sign", "square", "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2",
      "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
      "atanh", "sigmoid", "logsigmoid", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "mish",
      "softplus", "softsign", "hardtanh", "hardsigmoid", "hardswish", "erf", "erfc", "erfinv", "lgamma",
      "digamma", "floor", "ceil", "round", "trunc", "frac", "clamp", "nan_to_num"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(UnaryOp::Count));
  return names[size_t(op)];
}

namespace {

template <typename T>
T apply_ref(UnaryOp op, T x, const UnaryParams& p) {
  using std::abs;
  constexpr T kZero = T(0), kOne = T(1);
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Sign: return T((kZero < x) - (x < kZero));
    case UnaryOp::Square: return x * x;
    case UnaryOp::Reciprocal: return kOne / x;
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return kOne / std::sqrt(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Exp2: return std::exp2(x);
    case UnaryOp::Expm1: return std::expm1(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Log2: return std::log2(x);
    case UnaryOp::Log10: return std::log10(x);
    case UnaryOp::Log1p: return std::log1p(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tan: return std::tan(x);
    case UnaryOp::Asin: return std::asin(x);
    case UnaryOp::Acos: return std::acos(x);
    case UnaryOp::Atan: return std::atan(x);
    case UnaryOp::Sinh: return std::sinh(x);
    case UnaryOp::Cosh: return std::cosh(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Asinh: return std::asinh(x);
    case UnaryOp::Acosh: return std::acosh(x);
    case UnaryOp::Atanh: return std::atanh(x);
    case UnaryOp::Sigmoid: return kOne / (kOne + std::exp(-x));
    case UnaryOp::LogSigmoid: {
      // -softplus(-x) computed stably: min(x, 0) - log1p(exp(-|x|))
      return std::min(x, kZero) - std::log1p(std::exp(-std::fabs(x)));
    }
    case UnaryOp::Relu: return x < kZero ? kZero : x;  // keeps NaN
    case UnaryOp::Relu6: return std::isnan(x) ? x : std::min(std::max(x, kZero), T(6));
    case UnaryOp::LeakyRelu: return x > kZero ? x : x * T(p.a);
    case UnaryOp::Elu: {
      T alpha = T(p.a), scale = T(p.b), input_scale = T(p.c);
      return x > kZero ? x * scale : std::expm1(x * input_scale) * alpha * scale;
    }
    case UnaryOp::Gelu: return T(0.5) * x * (kOne + std::erf(x * T(M_SQRT1_2)));
    case UnaryOp::GeluTanh: {
      const T k = T(M_SQRT2 * M_2_SQRTPI * 0.5);
      T inner = k * (x + T(0.044715) * x * x * x);
      return T(0.5) * x * (kOne + std::tanh(inner));
    }
    case UnaryOp::Silu: return x / (kOne + std::exp(-x));
    case UnaryOp::Mish: {
      T sp = x > T(20) ? x : std::log1p(std::exp(x));
      return x * std::tanh(sp);
    }
    case UnaryOp::Softplus: {
      T beta = T(p.a), threshold = T(p.b);
      return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
    }
    case UnaryOp::Softsign: return x / (kOne + std::fabs(x));
    case UnaryOp::Hardtanh: return std::isnan(x) ? x : std::min(std::max(x, T(p.a)), T(p.b));
    case UnaryOp::Hardsigmoid: return std::min(std::max(x + T(3), kZero), T(6)) / T(6);
    case UnaryOp::Hardswish: return x * std::min(std::max(x + T(3), kZero), T(6)) / T(6);
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Erfc: return std::erfc(x);
    case UnaryOp::Erfinv: return T(calc_erfinv(double(x)));
    case UnaryOp::Lgamma: return T(calc_lgamma(double(x)));
    case UnaryOp::Digamma: return T(calc_digamma(double(x)));
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Round: {
      if (p.a == 0) return std::nearbyint(x);
      double d = p.a;
      bool neg = d < 0;
      T ten_pow = T(std::pow(10.0, neg ? -d : d));
      return neg ? std::nearbyint(x / ten_pow) * ten_pow : std::nearbyint(x * ten_pow) / ten_pow;
    }
    case UnaryOp::Trunc: return std::trunc(x);
    case UnaryOp::Frac: return x - std::trunc(x);
    case UnaryOp::Clamp: {
      if (std::isnan(x)) return x;
      T r = x;
      if (!std::isnan(p.a)) r = std::max(r, T(p.a));
      if (!std::isnan(p.b)) r = std::min(r, T(p.b));
      return r;
    }
    case UnaryOp::NanToNum:
      if (std::isnan(x)) return T(p.a);
      if (std::isinf(x)) return x > 0 ? T(p.b) : T(p.c);
      return x;
    case UnaryOp::Count: break;
  }
  return x;
}

}  // namespace

float unary_ref(UnaryOp op, float x, const UnaryParams& p) { return apply_ref<float>(op, x, p); }
double unary_ref(UnaryOp op, double x, const UnaryParams& p) { return apply_ref<double>(op, x, p); }

}  // namespace foundry::kernels

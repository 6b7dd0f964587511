// Elementwise functions of one floating input. One enum names them; each has a SIMD kernel for
// contiguous float/double arrays (Highway, dispatched at run time) and a scalar reference twin
// that the SIMD kernel is tested against on every compiled target.
#pragma once

#include <cstdint>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

enum class UnaryOp : uint8_t {
  Neg, Abs, Sign, Square, Reciprocal, Sqrt, Rsqrt,
  Exp, Exp2, Expm1, Log, Log2, Log10, Log1p,
  Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh, Atanh,
  Sigmoid, LogSigmoid, Relu, Relu6, LeakyRelu, Elu, Gelu, GeluTanh, Silu, Mish, Softplus, Softsign,
  Hardtanh, Hardsigmoid, Hardswish,
  Erf, Erfc, Erfinv, Lgamma, Digamma,
  Floor, Ceil, Round, Trunc, Frac, Clamp, NanToNum,
  Count
};

/// Parameters of the parameterised functions:
///   LeakyRelu: a = slope; Elu: a = alpha, b = scale, c = input_scale; Softplus: a = beta,
///   b = threshold; Hardtanh/Clamp: a = min, b = max (Clamp: NaN disables a bound);
///   NanToNum: a = nan, b = posinf, c = neginf; Round: a = 10^decimals (0 means none).
struct UnaryParams {
  double a = 0, b = 0, c = 0;
};

const char* unary_op_name(UnaryOp op);

/// out[i] = op(in[i]) on contiguous arrays (in may equal out), best SIMD target.
void unary_f32(UnaryOp op, const float* in, float* out, int64_t n, const UnaryParams& p);
void unary_f64(UnaryOp op, const double* in, double* out, int64_t n, const UnaryParams& p);

/// The scalar reference twins.
float unary_ref(UnaryOp op, float x, const UnaryParams& p);
double unary_ref(UnaryOp op, double x, const UnaryParams& p);

/// out = op(in) for float16/bfloat16/float32/float64 tensors of one shape, any strides.
/// Half types are computed in float, as PyTorch does.
void unary_kernel(UnaryOp op, const Tensor& in, Tensor& out, const UnaryParams& p = {});

/// Contiguous dtype conversion kernels used by copies and the half-type paths.
void convert_f16_to_f32(const uint16_t* in, float* out, int64_t n);
void convert_f32_to_f16(const float* in, uint16_t* out, int64_t n);
void convert_bf16_to_f32(const uint16_t* in, float* out, int64_t n);
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n);

/// A 16-bit float dtype's conversions to and from float32 runs: the ones its elementwise kernels
/// use, so a fused loop that rounds where the per-op path stores a Float16 / BFloat16 result gives
/// the per-op path's bits.
struct HalfConvert {
  void (*widen)(const uint16_t* in, float* out, int64_t n);
  void (*narrow)(const float* in, uint16_t* out, int64_t n);
  /// x[0, n) rounded to the 16-bit type, in place.
  void round(float* x, int64_t n) const;
};
/// nullptr for dtypes other than Float16 and BFloat16.
const HalfConvert* half_convert(DType t);

/// x.to(dtype): a contiguous tensor of up to kGrainSize values between float32 and Float16 /
/// BFloat16 converted here by the SIMD casts the copy op's contiguous runs use (the same bits,
/// without the op's dispatch and strided loop: a decode step's norms and products convert a row or
/// two at a time); anything else, and a tensor autograd records, through the op.
Tensor cast_rows(const Tensor& x, DType dtype);

}  // namespace foundry::kernels

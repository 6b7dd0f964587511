// Elementwise functions of two inputs of one dtype and one (broadcast) shape. Arithmetic ops
// write the input dtype, comparisons and logical ops write bool.
#pragma once

#include <cstdint>

#include "foundry/core/scalar.h"
#include "foundry/core/tensor.h"

namespace foundry::kernels {

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, DivTrunc, DivFloor, Remainder, Fmod, Pow, Atan2, Hypot,
  Maximum, Minimum, Fmax, Fmin, Copysign, Xlogy, Logaddexp,
  Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr, LogicalXor,
  BitwiseAnd, BitwiseOr, BitwiseXor, Shl, Shr,
  GeluBackward, GeluTanhBackward,  // (grad, x) -> grad * gelu'(x)
  Count
};

const char* binary_op_name(BinaryOp op);
bool binary_op_is_predicate(BinaryOp op);  ///< output is bool

/// out = op(a, b) (Add/Sub: a ± alpha * b). a, b same dtype and shape as out (or bool out).
void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, const Scalar& alpha = 1);

/// A block of `rows` runs for the SIMD kernels: run r of each operand starts r times its row
/// stride (elements) after run 0, as the rows of a matrix with a row broadcast to each of them.
struct BinaryRows {
  int64_t rows = 1, a = 0, b = 0, out = 0;
};

/// SIMD kernels on contiguous float arrays for the common arithmetic ops; b_scalar / a_scalar mean
/// that operand is one broadcast value (per run). `stream` asks for non-temporal stores (the whole
/// output is larger than the caches; long runs use them anyway) and leaves the fence
/// (hwy::FlushStream) to the caller, once per thread. `rows`: that many runs of n in one call.
/// Returns false when the op has no SIMD form (before touching any operand: rows.rows == 0 asks).
bool binary_simd_f32(BinaryOp op, const float* a, const float* b, float* out, int64_t n, bool a_scalar,
                     bool b_scalar, float alpha, bool stream = false, BinaryRows rows = {});
bool binary_simd_f64(BinaryOp op, const double* a, const double* b, double* out, int64_t n, bool a_scalar,
                     bool b_scalar, double alpha, bool stream = false, BinaryRows rows = {});

}  // namespace foundry::kernels

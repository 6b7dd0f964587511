// Helpers shared by the neural-network op files (src/ops/nn_*.cpp).
#pragma once

#include <string>
#include <vector>

#include "ops/common.h"

namespace foundry::ops::nn {

/// A number as a wrapped scalar tensor (does not widen the other operand's dtype). Wrapped
/// numbers are float32 today, so only exactly representable constants (small integers) use W.
inline Tensor W(double v) { return wrap_scalar(v); }
/// A constant exact enough for an operand of dtype dt: a 0-d float64 tensor for float64 operands,
/// float32 otherwise (0-d tensors do not widen tensors with dims of the same category).
inline Tensor S(double v, DType dt) { return scalar_tensor(v, dt == DType::Float64 ? DType::Float64 : DType::Float32); }

/// An int[] argument of an n-d op: one value repeats n times, n values are taken as is; anything
/// else is a ValueError naming the op and the argument.
std::vector<int64_t> expand_param(const std::vector<int64_t>& v, size_t n, const char* op, const char* name);

/// Raises TypeError unless x is a float16/bfloat16/float32/float64 tensor.
void check_floating(const Tensor& x, const char* op, const char* what = "input");

/// The i-th output of an op call.
inline Tensor nth(std::vector<Tensor> outs, size_t i) { return std::move(outs.at(i)); }

/// True when any element of a (small) float tensor is non-zero; used by backward functions to
/// skip terms of outputs whose gradient is identically zero (an unused mean or rstd output).
bool any_nonzero(const Tensor& t);

/// Sample tensors: uniform values in [lo, hi] (nn samples are small: tens of elements).
inline Tensor U(IntList shape, DType dt, Generator& g, double lo = -2.0, double hi = 2.0) {
  return sample_uniform(shape, dt, g, lo, hi);
}

/// A non-contiguous tensor with the given logical shape (a transposed copy viewed back).
Tensor noncontig(const Tensor& t);

}  // namespace foundry::ops::nn

// Shared helpers for the registry-driven op tests.
#pragma once

#include <string>
#include <vector>

#include "foundry/ops/registry.h"

namespace foundry::optest {

/// Names of every registered op (for parametrised tests).
std::vector<std::string> all_op_names();

/// Tolerances per dtype, written down once (docs/testing.md quotes this table):
///   float64: rtol 1e-7, atol 1e-9     float32: rtol 1e-5, atol 1e-5
///   bfloat16: rtol 2e-2, atol 2e-2    float16: rtol 2e-3, atol 2e-3
///   integers and bool: exact
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dt);

/// Compares two tensors (shape, dtype, values with NaN == NaN); returns "" or a description of
/// the first mismatch.
std::string compare(const Tensor& actual, const Tensor& expected, Tolerance tol);

/// The same logical values in other memory layouts: transposed storage (non-contiguous) and
/// reversed storage viewed with negative strides.
Tensor as_transposed_layout(const Tensor& t);
Tensor as_negative_stride_layout(const Tensor& t);

}  // namespace foundry::optest

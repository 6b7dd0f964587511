// Reduction building blocks: moving reduced dims innermost, and SIMD row kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

/// x viewed as [M, K] rows (K = product of the reduced dims, moved last), contiguous (a copy
/// only when the layout requires one). `dims` sorted, unique, wrapped.
struct Rows {
  Tensor data;  // contiguous, numel M*K
  int64_t M = 1, K = 1;
  Shape keep_shape;    // output shape with keepdim
  Shape reduced_shape; // output shape without keepdim
};
Rows to_rows(const Tensor& x, const std::vector<int64_t>& dims);

/// Sum of n contiguous values (SIMD, several accumulators; block sums combined in double).
double sum_f32(const float* p, int64_t n);
double sum_f64(const double* p, int64_t n);
/// out[r] = float(sum_f32(row r)) for `rows` contiguous rows of K floats (the same values).
void sum_rows_f32(const float* p, int64_t rows, int64_t K, float* out);
/// Sum of (p[i] - mean)^2.
float sum_sq_dev_f32(const float* p, int64_t n, float mean);
double sum_sq_dev_f64(const double* p, int64_t n, double mean);
/// Max / min of n > 0 values; NaN if any value is NaN.
float max_f32(const float* p, int64_t n);
float min_f32(const float* p, int64_t n);
/// acc[i] += p[i].
void add_into_f32(float* acc, const float* p, int64_t n);

}  // namespace foundry::kernels

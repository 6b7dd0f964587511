// Softmax and log-softmax along one dim, forward and backward. The tensor is seen as
// [outer, D, inner] (D = the softmax dim): inner == 1 runs the row kernels (one contiguous row
// per softmax), otherwise the column kernels vectorise across `inner`. SIMD kernels (Highway,
// dispatched at run time) exist for float and double; half types run through float. Each has a
// scalar reference twin (softmax.cpp) that tests compare against on every compiled target.
//
// Special values follow PyTorch: a softmax whose inputs hold NaN, +inf, or are all -inf gives NaN
// in every position of that softmax.
#pragma once

#include <cstdint>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

/// y = softmax(x) (log: log_softmax) of `rows` contiguous rows of length n.
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool log);
void softmax_rows_f64(const double* x, double* y, int64_t rows, int64_t n, bool log);
/// The same over [D, inner] blocks: element (d, j) at d * inner + j, columns [j0, j1) of one block.
void softmax_cols_f32(const float* x, float* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log);
void softmax_cols_f64(const double* x, double* y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool log);
/// gx = y * (g - sum(g * y)) (softmax) or g - exp(y) * sum(g) (log: y is the log-softmax).
void softmax_backward_rows_f32(const float* g, const float* y, float* gx, int64_t rows, int64_t n, bool log);
void softmax_backward_rows_f64(const double* g, const double* y, double* gx, int64_t rows, int64_t n, bool log);
void softmax_backward_cols_f32(const float* g, const float* y, float* gx, int64_t D, int64_t inner, int64_t j0,
                               int64_t j1, bool log);
void softmax_backward_cols_f64(const double* g, const double* y, double* gx, int64_t D, int64_t inner, int64_t j0,
                               int64_t j1, bool log);

/// Scalar twins (accumulate in double) over an [outer, D, inner] block.
template <typename T>
void softmax_ref(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log);
template <typename T>
void softmax_backward_ref(const T* g, const T* y, T* gx, int64_t outer, int64_t D, int64_t inner, bool log);

/// Tensor-level drivers: x contiguous (float16/bfloat16/float32/float64); returns a new tensor.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log);

}  // namespace foundry::kernels

// Normalisation kernels: layer norm and RMS norm over the trailing N elements of each row, and
// the per-channel statistics / affine map of batch norm. SIMD row kernels (Highway, run-time
// dispatch) for float and double with scalar reference twins (norm.cpp); half types are computed
// in float (PyTorch's opmath) by the tensor-level drivers.
//
// Layer norm follows PyTorch's CPU kernel: mean and biased variance per row (two passes over a
// row that stays in L1), rstd = 1 / sqrt(max(var, 0) + eps), y = (x * rstd - mean * rstd) * w + b.
// Its backward is PyTorch's closed form: with ds = sum(g w x), db = sum(g w),
//   gx = rstd g w + b2 x + c2,  b2 = (db mean - ds) rstd^3 / N,  c2 = -b2 mean - db rstd / N.
// The backward kernels recompute each row's statistics from x (the row is in L1 anyway), so they
// are functions of (g, x, w) alone.
#pragma once

#include <cstdint>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

/// Rows of n contiguous values; w and b may be null (1 and 0). mean/rstd get one value per row.
void layer_norm_rows_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t n, float eps);
void layer_norm_rows_f64(const double* x, const double* w, const double* b, double* y, double* mean, double* rstd,
                         int64_t rows, int64_t n, double eps);
/// gx for the rows; adds g * xhat into gw_acc and g into gb_acc (both length n, may be null).
void layer_norm_backward_rows_f32(const float* g, const float* x, const float* w, float* gx, float* gw_acc,
                                  float* gb_acc, int64_t rows, int64_t n, float eps);
void layer_norm_backward_rows_f64(const double* g, const double* x, const double* w, double* gx, double* gw_acc,
                                  double* gb_acc, int64_t rows, int64_t n, double eps);
/// y = x * rstd (* w), rstd = 1 / sqrt(mean(x^2) + eps). `w` may be null.
void rms_norm_rows_f32(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t n, float eps);
void rms_norm_rows_f64(const double* x, const double* w, double* y, double* rstd, int64_t rows, int64_t n,
                       double eps);
/// gx = rstd a - rstd^3 x sum(a x) / n with a = g w; adds g x rstd into gw_acc (may be null).
void rms_norm_backward_rows_f32(const float* g, const float* x, const float* w, float* gx, float* gw_acc, int64_t rows,
                                int64_t n, float eps);
void rms_norm_backward_rows_f64(const double* g, const double* x, const double* w, double* gx, double* gw_acc,
                                int64_t rows, int64_t n, double eps);
/// y[i] = x[i] * scale + shift over n values.
void affine_f32(const float* x, float* y, int64_t n, float scale, float shift);
void affine_f64(const double* x, double* y, int64_t n, double scale, double shift);

/// Scalar twins (double accumulation) used by the tests.
template <typename T>
void layer_norm_ref(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t n, T eps);
template <typename T>
void layer_norm_backward_ref(const T* g, const T* x, const T* w, T* gx, T* gw, T* gb, int64_t rows, int64_t n, T eps);
template <typename T>
void rms_norm_ref(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t n, T eps);
template <typename T>
void rms_norm_backward_ref(const T* g, const T* x, const T* w, T* gx, T* gw, int64_t rows, int64_t n, T eps);

// ---- tensor-level drivers (any floating dtype; results in x's dtype) ---------------------------

/// Layer norm over the last `n` elements: {y, mean, rstd}, mean/rstd of shape stat_shape.
std::vector<Tensor> layer_norm_forward(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps,
                                       IntList stat_shape);
/// {gx, gw, gb} (gw/gb of shape [n] flattened; the caller reshapes).
std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, int64_t n, double eps);
/// RMS norm: {y, rstd}. Half types: y = half(half(x * rstd) * w), as PyTorch 2.x's rms_norm.
std::vector<Tensor> rms_norm_forward(const Tensor& x, int64_t n, const Tensor& w, double eps, IntList stat_shape);
/// {gx, gw} (gw flattened to [n]).
std::vector<Tensor> rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, int64_t n, double eps);
/// Batch-norm statistics of x viewed as [N, C, S]: per-channel mean and biased variance (float64
/// tensors of shape [C]).
std::vector<Tensor> batch_norm_stats(const Tensor& x);
/// y[n, c, s] = x[n, c, s] * scale[c] + shift[c] (scale/shift float64 [C]); y in x's dtype.
Tensor channel_affine(const Tensor& x, const std::vector<double>& scale, const std::vector<double>& shift);

}  // namespace foundry::kernels

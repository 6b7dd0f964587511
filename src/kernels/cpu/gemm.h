// Matrix products for every dtype, with the backend chosen per shape and dtype from measurements
// on the reference machine (docs/decisions.md, "GEMM backend per shape"):
//   float32   oneDNN matmul (cached primitives, strided/transposed operands read in place), or
//             our SIMD matrix-vector kernels when M == 1 or N == 1 (memory bound), or a plain loop
//             for tiny products where a library call costs more than the arithmetic;
//   bfloat16  oneDNN bf16 matmul (f32 accumulation), float32 fallback when the CPU lacks it;
//   float16   converted to float32 and back;
//   float64   OpenBLAS dgemm (the OpenMP build, so it shares our thread pool);
//   integers  a blocked loop accumulating in int64 (wraps like PyTorch's integer matmul).
#pragma once

#include <cstdint>
#include <string>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

/// c[i] = alpha * a[i] @ b[i] + beta * c[i] (+ bias), for i in the batch.
/// a: [batch, M, K] and b: [batch, K, N] with any strides (a batch stride of 0 broadcasts one
/// matrix over the batch; transposed operands are read in place). c: [batch, M, N] contiguous.
/// All three share a dtype. beta == 0 ignores c's contents (NaN-safe). bias: undefined, or [N]
/// (any stride) of the same dtype, added to every row.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, double alpha = 1.0, double beta = 0.0,
          const Tensor& bias = Tensor());

/// c = a @ b with bfloat16 a [M, K] and b [K, N] (b may be a transposed view) and a float32 c
/// [M, N] (contiguous): oneDNN's bf16 kernels with float32 accumulation and output. False (c
/// untouched) when oneDNN has no fast kernel for it on this CPU.
bool gemm_bf16_f32out(const Tensor& a, const Tensor& b, Tensor& c);
/// One block of such a product on the calling thread (callers split the work over the pool):
/// c[i * ldc + j] = sum_k a[i * lda + k] w[j * ldw + k] for i < M, j < N, with bfloat16 a and w
/// (w's rows are the product's columns, as a weight matrix's) and float32 c. False (c untouched)
/// when oneDNN has no fast kernel for it on this CPU.
bool gemm_bf16_nt_block(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* c, int64_t ldc,
                        int64_t M, int64_t N, int64_t K);

/// The backend gemm() would use: "onednn", "openblas", "gemv", "small" or "loop" (tests, docs).
std::string gemm_backend(const Tensor& a, const Tensor& b);

/// Backend choice: Auto (measured per shape), or forced for measurements and tests through
/// FOUNDRY_GEMM=openblas|loop|onednn in the environment (float32; other dtypes keep theirs).
enum class GemmPolicy { Auto, OpenBlas, Loop, OneDnn };
GemmPolicy gemm_policy();
void set_gemm_policy(GemmPolicy p);

// ---- matrix-vector kernels (float32, SIMD; exposed for tests against the scalar twins) ------
/// A range of rows this long or longer is read as four streams at once, one per quarter of it
/// (gemv_simd.cpp's GemvRows): shorter ranges gained nothing.
constexpr int64_t kGemvFourStreamsBytes = 128 * 1024;
/// y[r] = alpha * sum_k A[r * lda + k] * x[k] + beta * y[r] (+ bias[r]), r < R.
void gemv_rows_f32(const float* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y, float alpha,
                   float beta, const float* bias);
/// y[n] = alpha * sum_k x[k] * A[k * lda + n] + beta * y[n] (+ bias[n]), n < N.
void gemv_cols_f32(const float* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y, float alpha,
                   float beta, const float* bias);
/// y[r] = sum_k A[r * lda + k] * x[k], r < R: bf16 (`bf16`) or f16 rows (raw bits) against a
/// float32 x (a 16-bit activation widened once), float32 accumulation; threads split the rows.
void gemv_rows_16(bool bf16, const uint16_t* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y);
/// y[N] = x[K] A for bf16 or f16 A [K, N] row-major (row stride lda), float32 accumulation.
void gemv_cols_16(bool bf16, const uint16_t* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y);
/// Rows [r0, r1) of the same on the calling thread (a caller that splits the rows itself), and the
/// same for f16 rows.
void gemv_rows_f16_range(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x,
                         float* y);
void gemv_rows_bf16_range(const uint16_t* A, int64_t lda, int64_t r0, int64_t r1, int64_t K, const float* x,
                          float* y);
/// Rows first + s * stride + j for s < 4 and j < count of the same, as four streams (a caller that
/// gives each thread runs of j, so that a thread's chunks continue four long streams).
void gemv_quarters_16(bool bf16, const uint16_t* A, int64_t lda, int64_t first, int64_t stride, int64_t count, int64_t K,
                      const float* x, float* y);
/// Scalar twins of the two float32 kernels (same contract, double accumulation).
void gemv_rows_f32_ref(const float* A, int64_t lda, int64_t R, int64_t K, const float* x, float* y, float alpha,
                       float beta, const float* bias);
void gemv_cols_f32_ref(const float* A, int64_t lda, int64_t K, int64_t N, const float* x, float* y, float alpha,
                       float beta, const float* bias);

}  // namespace foundry::kernels

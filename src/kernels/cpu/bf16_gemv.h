// bf16 matrix-vector products with AVX-512 BF16 (bf16_gemv.cpp).
#pragma once

#include <cstdint>

namespace foundry::kernels {

/// The CPU runs AVX-512 BF16 (vdpbf16ps), and this build has the kernel.
bool avx512_bf16_available();
/// y[r] = sum_i w[r * ld + i] x[i] for r < rows, i < k: bf16 w and x (raw bits), float32 y, float32
/// accumulation; threads split the rows. Call only when avx512_bf16_available().
void gemv_bf16_avx512(const void* w, int64_t rows, int64_t k, int64_t ld, const void* x, float* y);
/// Rows [r0, r1) of the same product on the calling thread (r0 a multiple of 4): the kernel
/// gemv_bf16_avx512 runs on each thread's share of the rows.
void gemv_bf16_avx512_rows(const void* w, int64_t rows, int64_t k, int64_t ld, const void* x, int64_t r0, int64_t r1,
                           float* y);

}  // namespace foundry::kernels

// AVX-512 VNNI matrix-vector products for q8_0 / q4_0 weights and a q8_0 activation row
// (vnni_gemv.cpp); same contract as gemv_q8_0 / gemv_q4_0 in q8_kernels.h. Call only when
// vnni_available().
#pragma once

#include <cstdint>

namespace foundry::quant {

/// The CPU runs AVX-512 F/BW/VL/DQ + VNNI + F16C + FMA, and this build has the kernels.
bool vnni_available();
void gemv_q8_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y);
void gemv_q4_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y);

/// The CPU runs AVX2 + FMA + F16C, and this build has the kernels (k_gemv_x86.cpp).
bool avx2_available();
/// y[i * rows + r] = dot(row r of w, row i of xq) for a [rows, k] q4_K matrix and m q8_K rows (k a
/// multiple of 256; m = 1 is the matrix-vector product): AVX-512 VNNI (call only when
/// vnni_available()) and AVX2 byte dot products (when avx2_available()). Row i's results do not
/// depend on m.
void gemm_q4_K_vnni(const void* w, int64_t rows, int64_t k, const void* xq, int64_t m, float* y);
void gemm_q4_K_avx2(const void* w, int64_t rows, int64_t k, const void* xq, int64_t m, float* y);

}  // namespace foundry::quant

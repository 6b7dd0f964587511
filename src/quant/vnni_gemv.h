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

}  // namespace foundry::quant

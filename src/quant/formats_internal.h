// Row functions of the formats in foundry/quant/block_formats.h that live outside
// block_formats.cpp (the K-quants and 16-bit floats in k_formats.cpp, nf4 in weight_only.cpp); the traits table there points at them.
#pragma once

#include <cstdint>

namespace foundry::quant::detail {

#define FOUNDRY_QUANT_ROW_FUNCTIONS(fmt)                          \
  void quantize_##fmt(const float* x, void* y, int64_t k);        \
  void dequantize_##fmt(const void* x, float* y, int64_t k);      \
  float dot_##fmt(const void* x, const void* y, int64_t k);

FOUNDRY_QUANT_ROW_FUNCTIONS(q4_K)
FOUNDRY_QUANT_ROW_FUNCTIONS(q5_K)
FOUNDRY_QUANT_ROW_FUNCTIONS(q6_K)
FOUNDRY_QUANT_ROW_FUNCTIONS(q8_K)
FOUNDRY_QUANT_ROW_FUNCTIONS(f16)
FOUNDRY_QUANT_ROW_FUNCTIONS(bf16)
FOUNDRY_QUANT_ROW_FUNCTIONS(nf4)

#undef FOUNDRY_QUANT_ROW_FUNCTIONS

/// One in-memory nf4 block (absmax + codes, q4_0's nibble order) from bitsandbytes' 32 packed
/// bytes (values 2i and 2i + 1 in the high and low nibble of byte i).
void nf4_block_from_bnb(float absmax, const uint8_t* bnb_packed, uint8_t* block);

/// The 6-bit scale and min of sub-block j of a q4_K / q5_K super-block, packed in its 12 scale
/// bytes (ggml's get_scale_min_k4).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

constexpr int64_t kQK_K = 256;
constexpr int64_t kQ4_KBytes = 144, kQ5_KBytes = 176, kQ6_KBytes = 210, kQ8_KBytes = 292;

}  // namespace foundry::quant::detail

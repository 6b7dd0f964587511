// GGML's weight formats as one traits table (as ggml's type_traits): a row of K floats is stored as
// K / block_size blocks of block_bytes each. The 32-value formats (q4_0 .. q8_0), the 256-value
// K-quants (q4_K, q5_K, q6_K, q8_K) and the 16-bit floats (f16, bf16: "blocks" of one value).
// The reference quantizers give the same bytes as llama.cpp's quantize_row_*_ref for the same
// input (IEEE float arithmetic, no FMA contraction); dequantize and the dot product with a vector
// quantized to the row's dot_format (ggml's vec_dot_type: q8_0 for the 32-value formats, q8_K for
// the K-quants) are the scalar references that faster kernels are tested against. A new format is
// one row of the table plus its functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foundry::quant {

enum class BlockFormat { F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K, NF4 };

constexpr uint32_t kNoGGMLType = 0xFFFFFFFFu;

struct BlockFormatTraits {
  BlockFormat format;
  const char* name;        ///< as ggml names it ("q4_0", "q4_K", ...)
  uint32_t ggml_type;      ///< GGML_TYPE_* id (kNoGGMLType for nf4)
  int64_t block_size;      ///< values per block
  int64_t block_bytes;     ///< bytes per block
  /// x[k] -> k / block_size blocks at y (k a multiple of block_size).
  void (*quantize)(const float* x, void* y, int64_t k);
  /// blocks -> k floats.
  void (*dequantize)(const void* x, float* y, int64_t k);
  /// The format the other operand of `dot` is quantized to (activations, per row).
  BlockFormat dot_format;
  /// sum_i dequant(x)[i] * dequant(y)[i] for x in this format and y in dot_format, accumulated per
  /// (sub-)block in integers and scaled once per (sub-)block, as ggml's vec_dot.
  float (*dot)(const void* x, const void* y, int64_t k);
};

const std::vector<BlockFormatTraits>& block_formats();
const BlockFormatTraits& traits(BlockFormat format);
/// By name ("q8_0", "q4_K"; case-insensitive); throws ValueError naming the known formats.
const BlockFormatTraits& traits(const std::string& name);

/// Bytes for `rows` rows of `k` values (k must be a multiple of the block size; ValueError otherwise).
int64_t quantized_bytes(const BlockFormatTraits& t, int64_t rows, int64_t k);

}  // namespace foundry::quant

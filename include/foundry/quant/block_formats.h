// GGML's block-quantized formats as one traits table (as ggml's type_traits): a row of K floats is
// stored as K / block_size blocks of block_bytes each. The reference quantizers give the same
// bytes as llama.cpp's quantize_row_*_ref for the same input (IEEE float arithmetic, no FMA);
// dequantize and the dot product with a Q8_0-quantized vector are the scalar references that
// faster kernels are tested against. A new format is one row of the table plus its functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foundry::quant {

enum class BlockFormat { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 };

struct BlockFormatTraits {
  BlockFormat format;
  const char* name;        ///< as GGUF/llama.cpp name it ("q4_0", ...)
  uint32_t ggml_type;      ///< GGML_TYPE_* id
  int64_t block_size;      ///< values per block
  int64_t block_bytes;     ///< bytes per block
  /// x[k] -> k / block_size blocks at y (k a multiple of block_size).
  void (*quantize)(const float* x, void* y, int64_t k);
  /// blocks -> k floats.
  void (*dequantize)(const void* x, float* y, int64_t k);
  /// sum_i dequant(x)[i] * dequant(y)[i] for x in this format and y in Q8_0, accumulated per
  /// block in integers and scaled once per block (ggml's vec_dot for the q8 activation).
  float (*dot_q8_0)(const void* x, const void* y, int64_t k);
};

const std::vector<BlockFormatTraits>& block_formats();
const BlockFormatTraits& traits(BlockFormat format);
/// By name ("q8_0", case-insensitive); throws ValueError naming the known formats.
const BlockFormatTraits& traits(const std::string& name);

/// Bytes for `rows` rows of `k` values (k must be a multiple of the block size; ValueError otherwise).
int64_t quantized_bytes(const BlockFormatTraits& t, int64_t rows, int64_t k);

}  // namespace foundry::quant

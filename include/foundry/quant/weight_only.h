// Weight-only quantization schemes of the PyTorch ecosystem, next to GGML's block formats:
// - NF4: bitsandbytes' 4-bit NormalFloat, blocks of 64 values scaled by their absolute maximum,
//   optionally with the block maxima themselves quantized (double quantization: 8-bit dynamic map,
//   blocks of 256, around their mean);
// - int8 rows: bitsandbytes' LLM.int8 weight format, one float32 scale per output row (symmetric);
// - int4 groups: round-to-nearest int4 per group of 32/64/128 values along the row, symmetric
//   (levels -8..7) or asymmetric (0..15 with a zero point), fp16 scales.
// The NF4 and int8 quantizers reproduce bitsandbytes' codes (its CUDA kernels' float32 operations
// and tie rules); the int4 definition is written out in docs/quantization.md.
#pragma once

#include <cstdint>
#include <vector>

namespace foundry::quant {

/// bitsandbytes' NF4 codebook (16 values, ascending) and signed 8-bit dynamic map (256).
const float* nf4_codebook();
const float* dynamic_map_signed();
/// The codebook in Q15 fixed point (each value x 32767, rounded; within 1.6e-5 of a block's absmax),
/// what every nf4 dot product (decode's kernels and their scalar reference) multiplies, so that all
/// of them sum the same integers; dequantization keeps the float codebook.
const int16_t* nf4_codebook_q15();
constexpr float kNF4Q15Unit = 32767.f;

struct NF4Weight {
  int64_t numel = 0;
  std::vector<uint8_t> packed;  ///< ceil(numel / 2) bytes; the first value of a pair in the high nibble
  std::vector<float> absmax;    ///< per block of 64; with double quantization, the dequantized values
  bool double_quant = false;
  std::vector<uint8_t> absmax_codes;  ///< double quantization: per block, codes of the dynamic map
  float offset = 0.f;                 ///< ... the mean subtracted before quantizing the maxima
  std::vector<float> nested_absmax;   ///< ... per 256 blocks
};
constexpr int64_t kNF4BlockSize = 64, kNF4NestedBlockSize = 256;

/// Flattened `x` (any numel; the last block is padded with zeros) -> NF4.
NF4Weight quantize_nf4(const float* x, int64_t numel, bool double_quant);
/// absmax from the double-quantized form: code[absmax_codes] * nested_absmax + offset.
std::vector<float> nf4_absmax_from_nested(const std::vector<uint8_t>& codes, const std::vector<float>& nested_absmax,
                                          float offset, const float* map);
void dequantize_nf4(const NF4Weight& w, float* out);

struct Int8RowWeight {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> codes;  ///< rows x cols
  std::vector<float> scales;  ///< per row: its absolute maximum (bitsandbytes' SCB)
};
/// As bitsandbytes: the weight rounded to fp16 first, codes = rint(w * (127 / SCB)).
Int8RowWeight quantize_int8_rows(const float* w, int64_t rows, int64_t cols);
void dequantize_int8_rows(const Int8RowWeight& w, float* out);

struct Int4GroupWeight {
  int64_t rows = 0, cols = 0, group = 0;
  bool symmetric = true;
  std::vector<uint8_t> packed;   ///< rows x cols/2; value 2i in the low nibble of byte i
  std::vector<uint16_t> scales;  ///< fp16, rows x cols/group
  std::vector<uint8_t> zeros;    ///< asymmetric only: rows x cols/group zero points (0..15)
};
/// group in {32, 64, 128} dividing cols.
Int4GroupWeight quantize_int4_groups(const float* w, int64_t rows, int64_t cols, int64_t group, bool symmetric);
void dequantize_int4_groups(const Int4GroupWeight& w, float* out);

}  // namespace foundry::quant

// SIMD kernels over q8_0 blocks (run-time dispatched); the scalar contract is
// BlockFormatTraits::dot_q8_0 of the q8_0 row in foundry/quant/block_formats.h.
#pragma once

#include <cstdint>
#include <span>

#include "foundry/quant/block_formats.h"

namespace foundry::quant {

/// A float row to q8_0 as llama.cpp quantizes activations (SIMD; levels rounded to nearest even,
/// so ties may differ from the reference quantizer's half-away-from-zero).
void quantize_row_q8_0_fast(const float* x, void* y, int64_t k);
/// The table's q8_0 quantizer (ties away from zero), SIMD: the same bytes for every finite row
/// (a NaN in a block may give other levels than the reference's), for weights quantized at load.
void quantize_row_q8_0_exact(const float* x, void* y, int64_t k);
/// The fastest quantizer that writes t's reference bytes: quantize_row_q8_0_exact for q8_0, the
/// table's own otherwise (its f16 / bf16 ones are SIMD conversions already). For weights quantized
/// at load and rows stored into quantized KV caches.
using RowQuantizer = void (*)(const float* x, void* y, int64_t k);
RowQuantizer exact_quantizer(const BlockFormatTraits& t);
/// The fastest dequantizer that gives t's reference floats bit for bit: SIMD for q8_0, q4_0 and
/// q4_K (dequant_simd.cpp), the table's own otherwise. For prefill weight tiles, QLoRA bases and
/// quantized KV caches.
using RowDequantizer = void (*)(const void* x, float* y, int64_t k);
RowDequantizer fast_dequantizer(const BlockFormatTraits& t);
/// The same values rounded to bfloat16 (as convert_f32_to_bf16 rounds them) for the bf16 prefill's
/// weight tiles, written directly; null where there is no such kernel for t.
using BF16RowDequantizer = void (*)(const void* x, uint16_t* y, int64_t k);
BF16RowDequantizer bf16_dequantizer(const BlockFormatTraits& t);
/// sum_i x_i y_i of two q8_0 rows of k values (k a multiple of 32).
float dot_q8_0_q8_0(const void* x, const void* y, int64_t k);
/// sum_i x_i y_i of a q4_0 row and a q8_0 row.
float dot_q4_0_q8_0(const void* x, const void* y, int64_t k);
/// q4_K row x q8_K row; nf4 row x q8_0 row.
float dot_q4_K_q8_K(const void* x, const void* y, int64_t k);
float dot_nf4_q8_0(const void* x, const void* y, int64_t k);
/// How a matrix's blocks lie in memory. Rows: the format's own rows one after the other (GGUF's).
/// Groups8 (rows a multiple of 8): each group of 8 rows in the bytes of those rows, block by block:
/// block b's header fields for the 8 rows (the fp16 scales first, in row order; block_header in
/// vnni_gemv.h), then its payload (16 nibble bytes, q8_0's 32 levels, q4_K's 128 nibble bytes,
/// q5_K's 32 bytes of fifth bits and 128 nibble bytes, q6_K's ql[128] and qh[64]) in
/// runs of 32 bytes, run c holding each row's payload bytes 4c..4c+3 (row i at 4i). Decode's kernel
/// reads the 8 rows' block as one stream and sums each row's products in one int32 lane with one
/// scale conversion for all 8 (row_groups.cpp says what it measured).
/// PackedBF16 (bf16 only, k a multiple of 64): each row's values without loss in ~12.4 bits
/// (bf16_packed.h), blocks stored whole in a tail after the rows; decode streams 25% fewer bytes.
enum class WeightLayout { Rows, Groups8, PackedBF16 };
/// Bytes of one row of a [*, k] matrix of t in `layout` (PackedBF16: without the tail).
int64_t layout_row_bytes(const BlockFormatTraits& t, WeightLayout layout, int64_t k);
/// y[r] = dot(row r of w, xq) for a [rows, k] q8_0 (or q4_0) matrix and a q8_0 vector; rows split
/// over threads.
void gemv_q8_0(const void* w, int64_t rows, int64_t k, const void* xq, float* y);
void gemv_q4_0(const void* w, int64_t rows, int64_t k, const void* xq, float* y);
/// The same for any format of the table, xq quantized to t.dot_format: the AVX-512 VNNI kernels
/// (vnni_gemv.h) or the Highway kernels above where there is one (FOUNDRY_DISABLE_VNNI=1 in the
/// environment skips VNNI), the table's scalar dot otherwise.
/// `layout`: how w's blocks lie (the Groups8 kernels where it is Groups8).
void gemv(const BlockFormatTraits& t, const void* w, int64_t rows, int64_t k, const void* xq, float* y,
          WeightLayout layout = WeightLayout::Rows);
/// The formats Groups8 takes: q4_0, q4_1, q5_0, q5_1 (a block's header fields, d [m] [fifth bits],
/// each for the 8 rows in turn, before the runs), q8_0, q4_K and q5_K (d, dmin, three words of
/// scales; q5_K's fifth bits in runs before the nibbles) and q6_K (four words of scales, d).
bool has_row_groups(BlockFormat format);
/// The layout decode and prefill read fastest for a [rows, k] matrix of t on this CPU: Groups8 for
/// has_row_groups formats where the AVX2 kernels run (q8_0 only without AVX-512 VNNI: its VNNI row
/// kernel decodes faster), 8 rows or more; PackedBF16 for bf16 with k a multiple of 64 where
/// packed_bf16_preferred(); unless FOUNDRY_ROW_LAYOUT is set; else Rows.
WeightLayout preferred_layout(const BlockFormatTraits& t, int64_t rows, int64_t k);
/// Rearranges a [rows, k] matrix of t in place from Rows to `layout` (Rows: nothing to do). Groups8
/// takes rows / 8 whole groups; a matrix's last rows % 8 rows (GPT-2's 50257-row output matrix has
/// one) stay in the row layout after them. PackedBF16 changes the size: pack_bf16 (bf16_packed.h)
/// writes it into new memory, and to_layout refuses it.
void to_layout(const BlockFormatTraits& t, WeightLayout layout, uint8_t* w, int64_t rows, int64_t k);
/// The rows of a [rows, ...] matrix in `layout` that lie in groups (the rest in rows, after them).
inline int64_t rows_in_groups(WeightLayout layout, int64_t rows) { return layout == WeightLayout::Groups8 ? rows / 8 * 8 : 0; }
/// Row r of a [rows, k] matrix of t stored in `layout`, in t's row layout: a pointer into w (Rows, or a
/// row past the groups), or the row gathered into `buffer` (quantized_bytes(t, 1, k) bytes) and a
/// pointer to it.
const uint8_t* row_of(const BlockFormatTraits& t, WeightLayout layout, const uint8_t* w, int64_t rows, int64_t k, int64_t r,
                      uint8_t* buffer);
/// One matrix of gemv_many: y = W xq for W [rows, k].
struct GemvTarget {
  const void* w;
  int64_t rows;
  float* y;
};
/// gemv for several matrices of format t and k columns that share the activation row xq (a layer's
/// q, k and v projections): the row is prepared once and all the matrices' rows are split over the
/// threads as one job (one wake-up and one wait instead of one per matrix). Each y equals gemv's.
void gemv_many(const BlockFormatTraits& t, int64_t k, const void* xq, std::span<const GemvTarget> targets,
               WeightLayout layout = WeightLayout::Rows);
/// y[i * rows + r] = dot(row r of w, row i of xq) for m activation rows quantized to t.dot_format,
/// by integer byte dot products (x86 q4_K, q4_0, q8_0: AVX-512 VNNI, else AVX2;
/// FOUNDRY_DISABLE_VNNI=1 / FOUNDRY_DISABLE_AVX2_KERNELS=1 in the environment skip them). Below 8
/// rows, row i is gemv's on row i; from 8 rows on, the same exact per-block integer products summed
/// in another float order (block_gemm_x86.cpp). False, writing nothing, where this CPU has no such
/// kernel for t (has_integer_gemm).
bool gemm_integer(const BlockFormatTraits& t, const void* w, int64_t rows, int64_t k, const void* xq, int64_t m, float* y,
                  WeightLayout layout = WeightLayout::Rows);
bool has_integer_gemm(const BlockFormatTraits& t);
/// The integer GEMM beats an AVX-512 BF16 GEMM over dequantized tiles for t on this CPU: every
/// format with a kernel, with AVX-512 VNNI (on a Zen 5, Llama-110M prefill of 128 tokens: q4_0,
/// q8_0, q4_K 1.3-1.5x at 1 and 2 threads; q4_1, q5_0, q5_1, q5_K, q6_K 1.08-1.51x, the means of two
/// alternating pairs, 2026-12-06).
bool integer_gemm_preferred(const BlockFormatTraits& t);

}  // namespace foundry::quant

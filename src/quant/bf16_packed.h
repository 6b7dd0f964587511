// bfloat16 matrices stored without loss in ~12.3 bits a value (quant::WeightLayout::PackedBF16),
// for the decode products that stream them: a 16-bit model's decode step reads every weight once
// and is bound by memory bandwidth, and of a weight's 16 bits the 8 of its exponent carry little:
// within a block of 64 trained (or normally initialised) weights they span a few binades below the
// largest. Each block keeps its largest exponent once and every value's distance below it in 4
// bits; the sign and 7 mantissa bits stay as they are. The kernels rebuild the exact bf16 bits
// (so every product, prefill's tiles and state_dict see the values unchanged) at ~1.5 vector
// operations a value, while memory delivers 25% fewer bytes.
//
// A row of k values (k a multiple of 64): round_up(k / 64, 32) bytes of block exponents (byte b:
// block b's largest exponent E, or 0 for a block stored whole), then k / 64 blocks of 96 bytes,
// 32-byte aligned: 32 bytes of distances (E - exponent), then 64 bytes of (mantissa << 1 | sign).
// Block half g (values 32g..32g+31) lies at positions p = 0..31: position 2j holds value 32g + j,
// position 2j + 1 value 32g + 16 + j, so that the even and odd 16-bit lanes of a vector of positions
// widen to float32 vectors of consecutive values with one shift or mask each; distance byte p holds
// position p of half 0 in its low nibble and of half 1 in its high. A block whose exponents span
// more than 16 binades (or whose largest is 0: zeros and subnormals) is stored whole, its 64 bf16
// values in their order, in a tail after the rows; its distance bytes 0-7 hold the byte offset
// (int64) from the block to them. Offsets are relative, so a packed matrix can be copied whole.
#pragma once

#include <cstdint>

namespace foundry::quant {

constexpr int64_t kPackedBF16Block = 64;

/// Bytes of one packed row of k values (k a multiple of 64), the tail not counted.
int64_t packed_bf16_row_bytes(int64_t k);
/// Blocks of a [rows, k] bf16 matrix (row-major, contiguous) that are stored whole.
int64_t packed_bf16_escapes(const uint16_t* w, int64_t rows, int64_t k);
/// Bytes of a packed [rows, k] matrix with `escapes` blocks stored whole.
int64_t packed_bf16_bytes(int64_t rows, int64_t k, int64_t escapes);
/// Packs w [rows, k] into out (packed_bf16_bytes(rows, k, packed_bf16_escapes(w, rows, k)) bytes,
/// ValueError if out_bytes differs). Rows split over the threads.
void pack_bf16(const uint16_t* w, int64_t rows, int64_t k, uint8_t* out, int64_t out_bytes);
/// Row `row` (packed_bf16_row_bytes(k) bytes, its matrix's tail after the rows) as k bf16 values.
void unpack_bf16_row(const uint8_t* row, int64_t k, uint16_t* out);
/// ValueError unless every block stored whole of a packed [rows, k] matrix of `bytes` bytes points
/// at 128 bytes of its tail.
void check_packed_bf16(const uint8_t* w, int64_t rows, int64_t k, int64_t bytes);
/// y[r] = sum_i row r [i] * x[i] for rows [r0, r1) of a packed matrix, x float32 [k], on the
/// calling thread. Each row's sum runs in the order of the plain bf16 rows' kernel on the same
/// vector width (kernels::gemv_rows_bf16_range), so the results equal it.
void gemv_packed_bf16_rows(const uint8_t* w, int64_t k, const float* x, int64_t r0, int64_t r1, float* y);
/// The same for rows first + s * stride + j, s < 4, j < count, four at a time: four streams
/// (kernels::gemv_quarters_16's order; RowKernel::quarters).
void gemv_packed_bf16_quarters(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                               int64_t count, float* y);
/// Whether this CPU has the packed rows' SIMD kernels (AVX2; AVX-512 BW + VBMI2), so that the
/// layout reads faster than the plain rows; FOUNDRY_ROW_LAYOUT=1 in the environment says no.
bool packed_bf16_preferred();

}  // namespace foundry::quant

// bfloat16 matrices stored without loss in ~12.4 bits a value (quant::WeightLayout::PackedBF16),
// for the decode products that stream them: a 16-bit model's decode step reads every weight once
// and is bound by memory bandwidth, and of a weight's 16 bits the 8 of its exponent carry little:
// within a block of 64 trained (or normally initialised) weights they span a few binades below the
// largest. A bf16 value's low byte (exponent bit 0, 7 mantissa bits) is kept as it is; its high
// byte (sign, exponent >> 1) becomes a nibble: the sign and how far the exponent's top 7 bits lie
// below the block's largest (0-7). The kernel rebuilds the exact bf16 bits (so every product,
// prefill's GEMM and state_dict see the values unchanged) at about 12 vector operations per 64 values,
// while memory delivers a quarter fewer bytes.
//
// A row of k values (k a multiple of 64): round_up(k / 64, 32) bytes of block tops (byte b: the
// largest exponent >> 1 of block b, or 0 for a block stored whole), then k / 64 blocks of 96 bytes
// (32-byte aligned): 32 bytes of nibbles (position p's in byte p % 32, the low half for p < 32),
// then the 64 low bytes by position. Positions follow the x86 byte interleave (unpack{lo,hi}_epi8
// per 128-bit lane) and the split of its 16-bit words into even and odd float32 lanes: position
// 16j + r holds value 32 (r / 8) + 16 (r % 2) + 4j + (r % 8) / 2, so each widened vector holds
// consecutive values. A block whose exponents' top bits span more than 8 steps (or whose largest is
// 0: zeros and subnormals) is stored whole, its 64 bf16 values in order, in a tail after the rows;
// its first 8 nibble bytes hold the byte offset (int64) from the block to them. Offsets are
// relative, so a packed matrix can be copied whole.
//
// Chosen where the AVX-512 (BW) kernel runs: on a Zen 5 Llama-110M's bf16 decode ran 1.33-1.47x
// the plain rows' speed at 1 thread and 1.26x at 2; an AVX2 form of it read 0.91x / 0.95x (1 / 2
// threads), its widening and interleaves outweighing the quarter of the bytes, so AVX2-only CPUs
// keep the plain rows.
#pragma once

#include <cstdint>
#include <vector>

namespace foundry::quant {

constexpr int64_t kPackedBF16Block = 64;

/// Bytes of one packed row of k values (k a multiple of 64), the tail not counted.
int64_t packed_bf16_row_bytes(int64_t k);
/// Where the blocks of a [rows, k] bf16 matrix (row-major, contiguous) that are stored whole go in
/// the tail, and the bytes its packed form takes: one scan of the matrix, shared by sizing the
/// memory and packing into it.
struct PackedBF16Plan {
  int64_t rows = 0, k = 0;
  std::vector<int64_t> first;  // rows + 1 running counts: row r's blocks stored whole are slots first[r]..
  int64_t escapes() const { return first.back(); }
  int64_t bytes() const;
};
PackedBF16Plan plan_packed_bf16(const uint16_t* w, int64_t rows, int64_t k);
/// Packs w (the matrix `plan` was made from) into out, plan.bytes() bytes (ValueError if out_bytes
/// differs). Rows split over the threads.
void pack_bf16(const uint16_t* w, const PackedBF16Plan& plan, uint8_t* out, int64_t out_bytes);
/// Row `row` (packed_bf16_row_bytes(k) bytes, its matrix's tail after the rows) as k bf16 values.
void unpack_bf16_row(const uint8_t* row, int64_t k, uint16_t* out);
/// y[r] = sum_i row r [i] * x[i] for rows [r0, r1) of a packed matrix, x float32 [k], on the
/// calling thread. The AVX-512 kernel sums each row in the order of the plain bf16 rows' AVX-512
/// kernel (kernels::gemv_rows_bf16_range), so the results equal it; the scalar form sums in order.
void gemv_packed_bf16_rows(const uint8_t* w, int64_t k, const float* x, int64_t r0, int64_t r1, float* y);
/// The same for rows first + s * stride + j, s < 4, j < count, four at a time: four streams
/// (kernels::gemv_quarters_16's order; RowKernel::quarters).
void gemv_packed_bf16_quarters(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                               int64_t count, float* y);
/// Whether this CPU has the packed rows' AVX-512 (BW) kernel, where the layout reads faster than
/// the plain rows (elsewhere a scalar form computes it); FOUNDRY_ROW_LAYOUT=1 in the environment says no.
bool packed_bf16_preferred();

}  // namespace foundry::quant

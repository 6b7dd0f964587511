// AVX-512 VNNI matrix-vector products for q8_0 / q4_0 / q4_1 / q5_0 / q5_1 weights and a q8_0 activation row
// (vnni_gemv.cpp); same contract as gemv_q8_0 / gemv_q4_0 in q8_kernels.h. Call only when
// vnni_available().
#pragma once

#include <cstdint>
#include <functional>

#include "foundry/quant/block_formats.h"

namespace foundry::quant {

/// The CPU runs AVX-512 F/BW/VL/DQ + VNNI + F16C + FMA, and this build has the kernels.
bool vnni_available();
/// gemv with the VNNI kernels below whatever FOUNDRY_DISABLE_VNNI says (threads split the rows as
/// gemv's do: q8_simd.cpp).
void gemv_q8_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y);
void gemv_q4_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y);

/// Rows [r0, r1) of a [rows, k] matrix's product with one activation row, y[r] for each, on the
/// calling thread; r0 a multiple of 4 (the kernels' row group). What gemv splits over threads.
using GemvRowRange = std::function<void(const uint8_t* w, int64_t rows, int64_t r0, int64_t r1, float* y)>;
/// The q8_0, q4_0, q4_1, q5_0 or q5_1 VNNI kernel with xq, a q8_0 row of k values, prepared once;
/// xq must outlive the result (its leftover blocks are read in place), which is valid until the
/// calling thread prepares its next product (the prepared row is the thread's, reused).
GemvRowRange gemv_vnni_rows(BlockFormat format, const void* xq, int64_t k);

/// A block's header (q4_0, q4_1, q5_0, q5_1, q8_0; the q4_K, q5_K and q6_K super-blocks): fp16 d,
/// fp16 m (q4_1 / q5_1; q4_K / q5_K's dmin), 32 fifth bits (q5_0 / q5_1), 4-byte words of scales
/// (q4_K / q5_K: three words of 6-bit scales and minimums; q6_K: four of int8 scales), before the
/// payload: nibbles (16 bytes a 32-value block, q4_K's 128; q5_K's 32 bytes of fifth bits first),
/// q8_0's 32 levels. `trailing`: after the payload instead, the words before d (q6_K: ql[128],
/// qh[64], scales[16], d). WeightLayout::Groups8 keeps each field (each word) for 8 rows in the
/// block's order (row_groups.cpp).
struct BlockHeader {
  bool nibbles, min, fifth;
  int scale_words;
  int64_t bytes;
  bool trailing = false;
};
constexpr BlockHeader block_header(BlockFormat f) {
  if (f == BlockFormat::Q6_K) return {true, false, false, 4, 18, true};
  const bool k_quant = f == BlockFormat::Q4_K || f == BlockFormat::Q5_K;  // d, dmin, scale words (q5_K's qh is payload)
  const bool min = f == BlockFormat::Q4_1 || f == BlockFormat::Q5_1 || k_quant, fifth = f == BlockFormat::Q5_0 || f == BlockFormat::Q5_1;
  const int scale_words = k_quant ? 3 : 0;
  return {f != BlockFormat::Q8_0, min, fifth, scale_words, 2 + (min ? 2 : 0) + (fifth ? 4 : 0) + 4 * scale_words};
}

/// The 32-value nibble formats' blocks as the x86 kernels read them (VNNI and AVX2): block_header's
/// fields, then 16 bytes of nibbles (levels 0-15 low, 16-31 high); a value is d (u - kOffset) (+ m)
/// for its unsigned level u.
template <BlockFormat F>
struct NibbleLayout {
  static_assert(F == BlockFormat::Q4_0 || F == BlockFormat::Q4_1 || F == BlockFormat::Q5_0 || F == BlockFormat::Q5_1);
  static constexpr bool kMin = block_header(F).min;
  static constexpr bool kFifth = block_header(F).fifth;
  static constexpr int64_t kHeader = block_header(F).bytes;  // bytes before the nibbles
  static constexpr int64_t kBytes = kHeader + 16;
  static constexpr int32_t kOffset = F == BlockFormat::Q4_0 ? 8 : F == BlockFormat::Q5_0 ? 16 : 0;
};

/// fn.template operator()<F>() for the byte-block format F among q4_0, q4_1, q5_0, q5_1 and q8_0
/// (any other format: q8_0): the one switch the x86 matrix-vector kernels pick their template by.
template <class Fn>
auto with_byte_block_format(BlockFormat format, Fn&& fn) {
  switch (format) {
    case BlockFormat::Q4_0: return fn.template operator()<BlockFormat::Q4_0>();
    case BlockFormat::Q4_1: return fn.template operator()<BlockFormat::Q4_1>();
    case BlockFormat::Q5_0: return fn.template operator()<BlockFormat::Q5_0>();
    case BlockFormat::Q5_1: return fn.template operator()<BlockFormat::Q5_1>();
    default: return fn.template operator()<BlockFormat::Q8_0>();
  }
}

/// The CPU runs AVX2 + FMA + F16C, and this build has the kernels (k_gemv_x86.cpp).
bool avx2_available();
/// The q8_0, q4_0, q4_1, q5_0 or q5_1 AVX2 kernel (avx2_gemv.cpp), the same contract as
/// gemv_vnni_rows; call only when avx2_available().
GemvRowRange gemv_avx2_rows(BlockFormat format, const void* xq, int64_t k);
/// The kernel of a matrix in WeightLayout::Groups8 (row_groups.cpp; the K-quants against a q8_K row,
/// the others against a q8_0 row), the same contract as gemv_avx2_rows with rows in groups of 8 (r0
/// and r1 multiples of 8): AVX2 (call only when avx2_available()), or AVX-512 VNNI where `vnni` (call
/// only when vnni_available()), the same bits.
GemvRowRange gemv_group_rows(bool vnni, BlockFormat format, const void* xq, int64_t k);
/// The nf4 kernel (nf4_gemv_x86.cpp) for a q8_0 row of k values (k a multiple of 64): AVX-512
/// (`avx512`; call only when vnni_available()) or AVX2 (when avx2_available()); the same contract
/// as gemv_vnni_rows, any first row.
GemvRowRange gemv_nf4_x86_rows(bool avx512, const void* xq, int64_t k);
/// The x86 kernels of the prefill's integer GEMM: AVX2 (call only when avx2_available()), AVX-512
/// VNNI (when vnni_available()), AMX-INT8 tiles (when amx_int8_available()), or the AMX kernel with
/// its tile instructions run in scalar code as the instruction set reference defines them (when
/// vnni_available(): the tests run the AMX kernel's layout and epilogue on CPUs without tiles).
enum class BlockGemmIsa { AVX2, VNNI, AMX, AMXEmulated };
/// The CPU has AMX-TILE and AMX-INT8, Linux granted this process the tile state, FOUNDRY_MAX_ISA
/// allows AVX-512, FOUNDRY_DISABLE_AMX is unset, and a first product through the tiles gave the
/// VNNI kernel's bits (else a line on stderr says so and the VNNI kernels run).
bool amx_int8_available();
/// y[i * rows + r] = dot(row r of w, row i of xq) for a [rows, k] q4_0, q4_1, q5_0, q5_1, q8_0,
/// q4_K, q5_K or q6_K matrix and m rows of its dot format (q8_0, q8_K), the prefill's integer GEMM
/// (block_gemm_x86.cpp). The AMX kernels give the VNNI kernels' bits.
/// `grouped`: w in WeightLayout::Groups8 (rows a multiple of 8). `y_stride`: y's row stride, where
/// it is not `rows` (the product of part of a matrix's rows).
void gemm_blocks_x86(BlockFormat format, BlockGemmIsa isa, const void* w, int64_t rows, int64_t k, const void* xq,
                     int64_t m, float* y, bool grouped = false, int64_t y_stride = 0);
/// Rows [r0, r1) of a q4_K matrix times one q8_K row (decode) on the calling thread, r0 a
/// multiple of 4: VNNI or AVX2 as above.
void gemv_q4_K_rows(bool vnni, const void* w, int64_t k, const void* xq, int64_t r0, int64_t r1, float* y);
/// The same for a q6_K (`q6`) or q5_K matrix (k_gemv_x86.cpp; call only when avx2_available()),
/// any r0 (q5_K four rows a pass from r0): q6_K with AVX-512 where `avx512` (call only when
/// vnni_available()), else AVX2.
void gemv_q56_K_x86_rows(bool avx512, bool q6, const void* w, int64_t k, const void* xq, int64_t r0, int64_t r1,
                         float* y);

}  // namespace foundry::quant

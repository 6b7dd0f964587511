// Decode's q4_K products against a q8_K activation row on x86, with integer dot products instead of the
// Highway kernel's int16 widening (q8_simd.cpp, which serves every other CPU): AVX-512 VNNI where
// present (vpdpbusd: 64 u8 x s8 products into 16 int32 lanes, then vpmulld by the sub-block
// scales), else AVX2 (vpmaddubsw: u8 x s8 pairs into int16, then vpmaddwd by the sub-block scales
// into int32). Pre-scaling a super-block's levels to int16 once and using vpdpwssd against int16
// activations measured slower, for decode (2.5x less) and prefill alike. Prefill's GEMM is
// block_gemm_x86.cpp's (this kernel against 4 activation rows at a time ran at a quarter of it).
//
// A q4_K super-block's 128 nibble bytes hold 4 chunks of 64 values: chunk c's 32 bytes carry
// sub-block 2c in their low and 2c + 1 in their high nibbles; the q8_K levels of those two
// sub-blocks are the 64 consecutive values at 64c. Levels are unsigned (0..15); the minimum enters
// through the activation's 16-value sums: dot = d dy sum_j scale_j sum(q y) - dmin dy sum_j min_j sum(y).
#include <algorithm>
#include <cstring>

#include "core/isa.h"
#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_X86_KERNELS 1
#define FOUNDRY_AVX512_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define FOUNDRY_X86_KERNELS 0
#endif

namespace foundry::quant {

#if FOUNDRY_X86_KERNELS

namespace {

constexpr int64_t kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210, kQ8KBytes = 292, kSuperBlock = 256;
constexpr int64_t kPrefetchBytes = 1024;  // the weights stream once: fetch this far ahead
constexpr int64_t kAhead = avx2::kStreamAhead;  // the one-row kernels' prefetchnta distance

// The 12 bytes of 6-bit scales and mins as 8 scale bytes and 8 min bytes: ggml's
// get_scale_min_k4 for all eight sub-blocks at once, on 32-bit words. Sub-blocks 0-3 keep the low
// 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take 4 bits from bytes 8-11 and
// their top 2 bits from the tops of bytes 0-3 (scales) and 4-7 (mins).
inline void unpack_scales_mins(const uint8_t* packed, uint64_t& scales, uint64_t& mins) {
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t scales_lo = w[0] & low6, mins_lo = w[1] & low6;
  const uint32_t scales_hi = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);
  const uint32_t mins_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);
  scales = uint64_t(scales_lo) | (uint64_t(scales_hi) << 32);
  mins = uint64_t(mins_lo) | (uint64_t(mins_hi) << 32);
}

// The next super-blocks' 144 bytes are on their way while this one is computed.
inline void prefetch_superblock(const uint8_t* w) {
  for (int64_t o = 0; o < kQ4KBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + o, _MM_HINT_T0);
}

// A q8_K activation super-block's float32 scale (its first 4 bytes).
inline float q8_K_scale(const uint8_t* yb) {
  float dy;
  std::memcpy(&dy, yb, 4);
  return dy;
}

// Decode's four-row pass reads four streams a row apart; each fetches ~12 KB ahead (the 1 KB lead
// ran inside the group's rows, which the pass is already reading), with prefetchnta as
// vnni_gemv.cpp's rows: as fast, and the L2 stays the step's.
constexpr int64_t kDecodePrefetchBytes = 12288;
template <int64_t kBlockBytes = kQ4KBytes>
inline void prefetch_ahead(const uint8_t* w) {
  for (int64_t o = 0; o < kBlockBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w) + kDecodePrefetchBytes + o, _MM_HINT_NTA);
}

// The 8 mins as int16 pairs m0 m0 m1 m1 ...: vpmaddwd with the activation's 16 sums then gives
// min_j (bsums[2j] + bsums[2j + 1]) in int32 lane j.
FOUNDRY_AVX2_TARGET inline __m256i paired_mins(uint64_t mins) {
  const __m128i m = _mm_cvtsi64_si128(int64_t(mins));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
}

using avx2::dword_at;
using avx2::f16_at;
using avx2::sum_lanes;

// acc += d dy isum - dmin dy (the mins' dot with the block sums, in int32 lanes 0-7).
FOUNDRY_AVX512_VNNI_TARGET inline __m512 accumulate_vnni(__m512 acc, __m512i isum, __m256i min_dot, float d, float dmin,
                                                         float dy) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * dy), acc);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_setzero_si512(), min_dot, 0)),
                         _mm512_set1_ps(-dmin * dy), acc);
}

// Sub-blocks a and b's 32 levels of the q8_K super-block at yb, in one vector.
FOUNDRY_AVX512_VNNI_TARGET inline __m512i paired_levels(const uint8_t* yb, int a, int b) {
  const auto* y = reinterpret_cast<const __m256i*>(yb + 4);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(y + a)), _mm256_loadu_si256(y + b), 1);
}

// A super-block's nibbles as two 64-byte vectors, each split into its low and high nibbles: the
// first vector's are sub-blocks 0 and 2 (low) and 1 and 3 (high), the second's 4 and 6, 5 and 7;
// pair p's products land in int32 lanes 0-7 (first sub-block) and 8-15 (second). The scales are
// picked into the same lanes. Reading 32 bytes a chunk, each widened into a 64-level vector with
// an insert, ran the four-row kernel at 26.8 GB/s over L2-resident rows, this at 30.3; decode's
// products over Llama-110M-shaped matrices from memory 24.5 -> 27.8 GB/s at 1 thread, 44.7 -> 48.1
// at 2 (Zen 5, alternating in one process).
struct Q4KPairs {
  __m512i levels[4];  // (0, 2), (1, 3), (4, 6), (5, 7)
  __m512i scales[4];
};
FOUNDRY_AVX512_VNNI_TARGET inline Q4KPairs q4_K_pairs(const uint8_t* w, uint64_t scales) {
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i sc = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(scales)));
  const __m512i first = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i q01 = _mm512_loadu_si512(w + 16), q23 = _mm512_loadu_si512(w + 80);
  return {{_mm512_and_si512(q01, low_mask), _mm512_and_si512(_mm512_srli_epi16(q01, 4), low_mask),
           _mm512_and_si512(q23, low_mask), _mm512_and_si512(_mm512_srli_epi16(q23, 4), low_mask)},
          {_mm512_permutexvar_epi32(first, sc), _mm512_permutexvar_epi32(_mm512_add_epi32(first, _mm512_set1_epi32(1)), sc),
           _mm512_permutexvar_epi32(_mm512_add_epi32(first, _mm512_set1_epi32(4)), sc),
           _mm512_permutexvar_epi32(_mm512_add_epi32(first, _mm512_set1_epi32(5)), sc)}};
}

// The activation super-block's levels in the pairs of Q4KPairs.
struct Q8KPairs {
  __m512i levels[4];
};
FOUNDRY_AVX512_VNNI_TARGET inline Q8KPairs q8_K_pairs(const uint8_t* yb) {
  return {{paired_levels(yb, 0, 2), paired_levels(yb, 1, 3), paired_levels(yb, 4, 6), paired_levels(yb, 5, 7)}};
}

// sum_j scale_j sum(q y) over the super-block, spread over 16 int32 lanes.
FOUNDRY_AVX512_VNNI_TARGET inline __m512i q4_K_scaled_sum(const Q4KPairs& w, const Q8KPairs& y) {
  __m512i part[4];
  #pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)
    part[p] = _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.levels[p], y.levels[p]), w.scales[p]);
  return _mm512_add_epi32(_mm512_add_epi32(part[0], part[1]), _mm512_add_epi32(part[2], part[3]));
}

// One weight row against T activation rows: out[t] = dot(w, y[t]). Each activation row's
// arithmetic runs in the same order for every T.
template <int T>
FOUNDRY_AVX512_VNNI_TARGET void dot_q4_K_vnni(const uint8_t* w, const uint8_t* const* y, int64_t superblocks, float* out) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b, w += kQ4KBytes) {
    prefetch_superblock(w);
    uint64_t scales, mins;
    unpack_scales_mins(w + 4, scales, mins);
    const Q4KPairs pairs = q4_K_pairs(w, scales);
    const __m256i mins16 = paired_mins(mins);
    const float d = f16_at(w), dmin = f16_at(w + 2);
    #pragma GCC unroll 4  // the accumulators stay in registers (a rolled loop kept them on the stack)
    for (int t = 0; t < T; ++t) {
      const uint8_t* yb = y[t] + b * kQ8KBytes;
      const float dy = q8_K_scale(yb);
      const __m512i isum = q4_K_scaled_sum(pairs, q8_K_pairs(yb));
      // min_j (bsums[2j] + bsums[2j + 1]) in int32 lane j.
      const __m256i min_dot =
          _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock)), mins16);
      acc[t] = accumulate_vnni(acc[t], isum, min_dot, d, dmin, dy);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
}

// Decode: four weight rows (row_bytes apart) against one activation row, so each super-block's
// activation vectors, block sums and scale are loaded once for four rows, and four rows'
// independent chains overlap. Each row's arithmetic is dot_q4_K_vnni<1>'s, in the same order.
FOUNDRY_AVX512_VNNI_TARGET void dot4_q4_K_vnni(const uint8_t* w, int64_t row_bytes, const uint8_t* y,
                                               int64_t superblocks, float* out) {
  __m512 acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b) {
    const uint8_t* yb = y + b * kQ8KBytes;
    const float dy = q8_K_scale(yb);
    const Q8KPairs ys = q8_K_pairs(yb);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock));
    #pragma GCC unroll 4  // the accumulators stay in registers (a rolled loop kept them on the stack)
    for (int r = 0; r < 4; ++r) {
      const uint8_t* wb = w + r * row_bytes + b * kQ4KBytes;
      prefetch_ahead(wb);
      uint64_t scales, mins;
      unpack_scales_mins(wb + 4, scales, mins);
      const __m512i isum = q4_K_scaled_sum(q4_K_pairs(wb, scales), ys);
      const __m256i min_dot = _mm256_madd_epi16(bsums, paired_mins(mins));
      const float d = f16_at(wb), dmin = f16_at(wb + 2);
      acc[r] = accumulate_vnni(acc[r], isum, min_dot, d, dmin, dy);
    }
  }
  for (int r = 0; r < 4; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// Sub-block j's 32 levels (chunk j / 2's low or high nibbles) of the super-block at w.
FOUNDRY_AVX2_TARGET inline __m256i sub_block_levels(const uint8_t* w, int j) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * (j / 2)));
  return j % 2 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask) : _mm256_and_si256(q, low_mask);
}

// Sub-block j's scale in all 16 int16 lanes (vpshufb of bytes 2j, 2j + 1 of the 8 int16 scales).
FOUNDRY_AVX2_TARGET inline __m256i sub_block_scale(__m256i sc16, int j) {
  return _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(int16_t((2 * j) | ((2 * j + 1) << 8))));
}

// acc += d dy isum - dmin dy min_dot.
FOUNDRY_AVX2_TARGET inline __m256 accumulate_avx2(__m256 acc, __m256i isum, __m256i min_dot, float d, float dmin, float dy) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * dy), acc);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_dot), _mm256_set1_ps(-dmin * dy), acc);
}

template <int T>
FOUNDRY_AVX2_TARGET void dot_q4_K_avx2(const uint8_t* w, const uint8_t* const* y, int64_t superblocks, float* out) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b, w += kQ4KBytes) {
    prefetch_superblock(w);
    uint64_t scales, mins;
    unpack_scales_mins(w + 4, scales, mins);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(scales))));
    const __m256i mins16 = paired_mins(mins);
    __m256i levels[8], sub_scales[8];
    for (int j = 0; j < 8; ++j) {
      levels[j] = sub_block_levels(w, j);
      sub_scales[j] = sub_block_scale(sc16, j);
    }
    const float d = f16_at(w), dmin = f16_at(w + 2);
    #pragma GCC unroll 4  // the accumulators stay in registers (a rolled loop kept them on the stack)
    for (int t = 0; t < T; ++t) {
      const uint8_t* yb = y[t] + b * kQ8KBytes;
      const float dy = q8_K_scale(yb);
      __m256i isum = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        // |pair sums| <= 2 * 15 * 128: vpmaddubsw does not saturate here.
        const __m256i pairs =
            _mm256_maddubs_epi16(levels[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + 32 * j)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, sub_scales[j]));
      }
      const __m256i min_dot =
          _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock)), mins16);
      acc[t] = accumulate_avx2(acc[t], isum, min_dot, d, dmin, dy);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = sum_lanes(acc[t]);
}

// Two rows' 16 bytes at a and b in one vector: row a in bytes 0-15, row b in 16-31.
FOUNDRY_AVX2_TARGET inline __m256i two_rows(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// Two rows' eight bytes (scales or mins) as int16: row a's in lanes 0-7, row b's in 8-15.
FOUNDRY_AVX2_TARGET inline __m256i two_rows_int16(uint64_t a, uint64_t b) {
  // vmovq + vpunpcklqdq: _mm_set_epi64x went through the stack, and the 16-byte load after two
  // 8-byte stores missed store forwarding.
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(_mm_cvtsi64_si128(int64_t(a)), _mm_cvtsi64_si128(int64_t(b))));
}

// The 16 bytes at p in both halves of a vector.
FOUNDRY_AVX2_TARGET inline __m256i both_halves(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lane `first` of v in lanes 0-3, lane `second` in 4-7.
FOUNDRY_AVX2_TARGET inline __m256 halves_of(__m256 v, int first, int second) {
  return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(first, first, first, first, second, second, second, second));
}

// Sub-block j's fifth bits (bit j of each q5_K qh byte) moved to bit 4 (a masked bit stays in its
// byte under a 16-bit shift).
FOUNDRY_AVX2_TARGET inline __m256i fifth_bits(__m256i qh, int j) {
  const __m256i bit = _mm256_and_si256(qh, _mm256_set1_epi8(int8_t(1 << j)));
  return j < 4 ? _mm256_slli_epi16(bit, 4 - j) : _mm256_srli_epi16(bit, j - 4);
}

// dot4_q4_K_vnni's pass for AVX2, and q5_K's (kQ5: the fifth bits of 32 qh bytes after the scales,
// then q4_K's nibbles; levels 0..31): four weight rows against one activation row, two rows to a
// vector (16 levels of each per 128-bit half, the activation's 16 levels broadcast to both). A
// sub-block's two vpmaddubsw add in int16 (4 x 31 x 128 fits) before one vpmaddwd by both rows'
// scales, where one row to a vector needs a vpmaddwd, a vpaddd and a scale vpshufb per 32 levels
// (docs/decisions.md has the measurements). The mins meet the activation's eight sub-block sums
// (bsums paired, which fit int16: 32 x 127) in one vpmaddwd per pair of rows.
template <bool kQ5>
FOUNDRY_AVX2_TARGET void dot4_qK_avx2(const uint8_t* w, int64_t row_bytes, const uint8_t* y, int64_t superblocks,
                                      float* out) {
  constexpr int64_t kBlockBytes = kQ5 ? kQ5KBytes : kQ4KBytes, kNibbles = kQ5 ? 48 : 16;
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();  // lanes 0-3 rows 0 / 2, 4-7 rows 1 / 3
  for (int64_t b = 0; b < superblocks; ++b) {
    const uint8_t* yb = y + b * kQ8KBytes;
    const float dy = q8_K_scale(yb);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock));
    const __m256i sub_sums32 = _mm256_madd_epi16(bsums, _mm256_set1_epi16(1));
    const __m256i sub_sums = _mm256_broadcastsi128_si256(
        _mm_packs_epi32(_mm256_castsi256_si128(sub_sums32), _mm256_extracti128_si256(sub_sums32, 1)));
    const uint8_t* rows[4];
    uint64_t scales[4], mins[4];
    #pragma GCC unroll 4  // the arrays stay in registers (rolled, they went through the stack)
    for (int r = 0; r < 4; ++r) {
      rows[r] = w + r * row_bytes + b * kBlockBytes;
      prefetch_ahead<kBlockBytes>(rows[r]);
      unpack_scales_mins(rows[r] + 4, scales[r], mins[r]);
    }
    const __m256i scales01 = two_rows_int16(scales[0], scales[1]), scales23 = two_rows_int16(scales[2], scales[3]);
    const __m256i min_dot01 = _mm256_madd_epi16(sub_sums, two_rows_int16(mins[0], mins[1]));
    const __m256i min_dot23 = _mm256_madd_epi16(sub_sums, two_rows_int16(mins[2], mins[3]));
    // d, dmin of the four rows times dy, -dy: d0 -dmin0 d1 -dmin1 ...
    __m128i halves = _mm_cvtsi32_si128(dword_at(rows[0]));
    halves = _mm_insert_epi32(halves, dword_at(rows[1]), 1);
    halves = _mm_insert_epi32(halves, dword_at(rows[2]), 2);
    halves = _mm_insert_epi32(halves, dword_at(rows[3]), 3);
    const __m256 factors = _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_setr_ps(dy, -dy, dy, -dy, dy, -dy, dy, -dy));
    __m256i isum01 = _mm256_setzero_si256(), isum23 = _mm256_setzero_si256();
    __m256i fifth[2][2];  // [pair][levels 0-15, 16-31]: the rows' qh bytes
    if constexpr (kQ5) {
      for (int pair = 0; pair < 2; ++pair)
        for (int half = 0; half < 2; ++half)
          fifth[pair][half] = two_rows(rows[2 * pair] + 16 + 16 * half, rows[2 * pair + 1] + 16 + 16 * half);
    }
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      // Chunk c: sub-block 2c in the low nibbles, 2c + 1 in the high; each half of a row's 32 bytes
      // meets 16 activation levels.
      const uint8_t* yc = yb + 4 + 64 * c;
      const __m256i y_even0 = both_halves(yc), y_even1 = both_halves(yc + 16), y_odd0 = both_halves(yc + 32),
                    y_odd1 = both_halves(yc + 48);
      const __m256i pick_even = _mm256_set1_epi16(int16_t((4 * c) | ((4 * c + 1) << 8)));
      const __m256i pick_odd = _mm256_set1_epi16(int16_t((4 * c + 2) | ((4 * c + 3) << 8)));
      #pragma GCC unroll 2
      for (int pair = 0; pair < 2; ++pair) {
        const uint8_t* first = rows[2 * pair] + kNibbles + 32 * c;
        const uint8_t* second = rows[2 * pair + 1] + kNibbles + 32 * c;
        const __m256i q0 = two_rows(first, second), q1 = two_rows(first + 16, second + 16);
        __m256i even0 = _mm256_and_si256(q0, low_mask), even1 = _mm256_and_si256(q1, low_mask);
        __m256i odd0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), low_mask);
        __m256i odd1 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), low_mask);
        if constexpr (kQ5) {
          even0 = _mm256_or_si256(even0, fifth_bits(fifth[pair][0], 2 * c));
          even1 = _mm256_or_si256(even1, fifth_bits(fifth[pair][1], 2 * c));
          odd0 = _mm256_or_si256(odd0, fifth_bits(fifth[pair][0], 2 * c + 1));
          odd1 = _mm256_or_si256(odd1, fifth_bits(fifth[pair][1], 2 * c + 1));
        }
        const __m256i even = _mm256_add_epi16(_mm256_maddubs_epi16(even0, y_even0), _mm256_maddubs_epi16(even1, y_even1));
        const __m256i odd = _mm256_add_epi16(_mm256_maddubs_epi16(odd0, y_odd0), _mm256_maddubs_epi16(odd1, y_odd1));
        const __m256i sc = pair ? scales23 : scales01;
        __m256i& isum = pair ? isum23 : isum01;
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(even, _mm256_shuffle_epi8(sc, pick_even)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(odd, _mm256_shuffle_epi8(sc, pick_odd)));
      }
    }
    acc01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum01), halves_of(factors, 0, 2), acc01);
    acc01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_dot01), halves_of(factors, 1, 3), acc01);
    acc23 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum23), halves_of(factors, 4, 6), acc23);
    acc23 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_dot23), halves_of(factors, 5, 7), acc23);
  }
  const __m128 sums01 = _mm_hadd_ps(_mm256_castps256_ps128(acc01), _mm256_extractf128_ps(acc01, 1));
  const __m128 sums23 = _mm_hadd_ps(_mm256_castps256_ps128(acc23), _mm256_extractf128_ps(acc23, 1));
  _mm_storeu_ps(out, _mm_hadd_ps(sums01, sums23));
}

// q5_K (176-byte super-blocks: d, dmin, the 12 scale / min bytes, 32 bytes of fifth bits, then
// q4_K's nibble layout): q4_K's step with sub-block j's fifth bits (bit j of each qh byte) moved to
// bit 4 of its levels (0..31: vpmaddubsw's pair sums stay below 2 x 31 x 127). One row at a time:
// the rows after dot4_qK_avx2<true>'s passes.
FOUNDRY_AVX2_TARGET float dot_q5_K_avx2(const uint8_t* w, const uint8_t* y, int64_t superblocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b, w += kQ5KBytes) {
    for (int64_t o = 0; o < kQ5KBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w) + kAhead + o, _MM_HINT_NTA);
    const uint8_t* yb = y + b * kQ8KBytes;
    uint64_t scales, mins;
    unpack_scales_mins(w + 4, scales, mins);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(scales))));
    const __m256i high_bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 48 + 32 * c));
      const __m256i nibbles[2] = {_mm256_and_si256(q, low_mask), _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask)};
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_or_si256(nibbles[h], fifth_bits(high_bits, j)),
                                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + 32 * j)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, sub_block_scale(sc16, j)));
      }
    }
    const __m256i min_dot =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock)), paired_mins(mins));
    acc = accumulate_avx2(acc, isum, min_dot, f16_at(w), f16_at(w + 2), q8_K_scale(yb));
  }
  return sum_lanes(acc);
}

// q6_K (210-byte super-blocks: 128 bytes of low nibbles, 64 of 2-bit pairs, 16 int8 scales, d):
// each 128-value half's four 32-value groups rebuilt as unsigned 6-bit levels (0..63) against the
// activation, each group's two 16-value sub-blocks' scales widened to int16 for vpmaddwd; the
// levels' offset of 32 leaves through the activation's 16-value sums once per super-block
// (sum_j scale_j (sum(u y) - 32 bsum_j)). One row at a time.
FOUNDRY_AVX2_TARGET float dot_q6_K_avx2(const uint8_t* w, const uint8_t* y, int64_t superblocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i pair_masks[4] = {_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x0C), _mm256_set1_epi8(0x30),
                                 _mm256_set1_epi8(int8_t(0xC0))};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b, w += kQ6KBytes) {
    for (int64_t o = 0; o < kQ6KBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w) + kAhead + o, _MM_HINT_NTA);
    const uint8_t* yb = y + b * kQ8KBytes;
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192));
    // sum_j scale_j bsum_j, spread over 8 lanes.
    const __m256i offset_dot = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales),
                                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock)));
    __m256i isum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i low0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * half));
      const __m256i low1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * half + 32));
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
      const __m256i levels[4] = {
          _mm256_or_si256(_mm256_and_si256(low0, low_mask), _mm256_slli_epi16(_mm256_and_si256(pairs, pair_masks[0]), 4)),
          _mm256_or_si256(_mm256_and_si256(low1, low_mask), _mm256_slli_epi16(_mm256_and_si256(pairs, pair_masks[1]), 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), low_mask), _mm256_and_si256(pairs, pair_masks[2])),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), low_mask),
                          _mm256_srli_epi16(_mm256_and_si256(pairs, pair_masks[3]), 2))};
      for (int g = 0; g < 4; ++g) {
        const int sub = 8 * half + 2 * g;  // the group's first 16-value sub-block
        const __m128i pick = _mm_set_epi64x(0x0101010101010101LL * (sub + 1), 0x0101010101010101LL * sub);
        const __m256i group_scales = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
        const __m256i products = _mm256_maddubs_epi16(
            levels[g], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + 128 * half + 32 * g)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(products, group_scales));
      }
    }
    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset_dot, 5));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16_at(w + 208) * q8_K_scale(yb)), acc);
  }
  return sum_lanes(acc);
}

// q6_K with AVX-512 (dot_q6_K_avx2's sums, 64 levels a vector): a half's 64 bytes of low nibbles
// and its 32 bytes of 2-bit pairs (read into both halves of a vector) make its two 64-level
// vectors in the activation's order: values 0-63 are the low nibbles with pair bits 0-1 (bytes
// 0-31) or 2-3 (bytes 32-63) above them, values 64-127 the high nibbles with bits 4-5 or 6-7, each
// half of a vector moved into place by its own 16-bit shift (the masked bits never cross a byte).
// Each vector meets its four 16-value sub-blocks' scales in one vpmaddwd (vpermw spreads them).
// Against the AVX2 kernel, which AVX-512 CPUs ran before (Zen 5, alternating in one process):
// decode's products over Llama-110M's q6_K matrices from memory 1.18-1.34x at 1 thread, 1.27-1.31x
// at 2; Llama-110M q6_K decode 1.16x / 1.30x (medians of 6).
FOUNDRY_AVX512_VNNI_TARGET float dot_q6_K_avx512(const uint8_t* w, const uint8_t* y, int64_t superblocks) {
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i low_pairs = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
  const __m512i high_pairs = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8(int8_t(0xC0)), 1);
  const __m512i low_shift = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);   // left
  const __m512i high_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);  // right
  // int16 lane m of the super-block's vector v meets sub-block 4 v + m / 8.
  __m512i spread[4];
  for (int v = 0; v < 4; ++v) {
    alignas(64) int16_t idx[32];
    for (int m = 0; m < 32; ++m) idx[m] = int16_t(4 * v + m / 8);
    spread[v] = _mm512_load_si512(idx);
  }
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b, w += kQ6KBytes) {
    for (int64_t o = 0; o < kQ6KBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w) + kAhead + o, _MM_HINT_NTA);
    const uint8_t* yb = y + b * kQ8KBytes;
    const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
    const __m256i offset_dot =
        _mm256_madd_epi16(scales, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 4 + kSuperBlock)));
    const __m512i wide_scales = _mm512_castsi256_si512(scales);
    __m512i isum = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i low = _mm512_loadu_si512(w + 64 * half);
      const __m512i pairs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half)));
      const __m512i levels[2] = {
          _mm512_or_si512(_mm512_and_si512(low, low_mask), _mm512_sllv_epi16(_mm512_and_si512(pairs, low_pairs), low_shift)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), low_mask),
                          _mm512_srlv_epi16(_mm512_and_si512(pairs, high_pairs), high_shift))};
      for (int j = 0; j < 2; ++j) {
        const __m512i products = _mm512_maddubs_epi16(levels[j], _mm512_loadu_si512(yb + 4 + 128 * half + 64 * j));
        isum = _mm512_add_epi32(isum,
                                _mm512_madd_epi16(products, _mm512_permutexvar_epi16(spread[2 * half + j], wide_scales)));
      }
    }
    isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(offset_dot, 5)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f16_at(w + 208) * q8_K_scale(yb)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

void gemv_q56_K_x86_rows(bool avx512, bool q6, const void* w, int64_t k, const void* xq, int64_t r0, int64_t r1,
                         float* y) {
  const auto* base = static_cast<const uint8_t*>(w);
  const int64_t superblocks = k / kSuperBlock, row_bytes = superblocks * (q6 ? kQ6KBytes : kQ5KBytes);
  const auto dot = q6 ? (avx512 ? dot_q6_K_avx512 : dot_q6_K_avx2) : dot_q5_K_avx2;
  int64_t r = r0;
  if (!q6)
    for (; r + 4 <= r1; r += 4) dot4_qK_avx2<true>(base + r * row_bytes, row_bytes, static_cast<const uint8_t*>(xq), superblocks, y + r);
  for (; r < r1; ++r) y[r] = dot(base + r * row_bytes, static_cast<const uint8_t*>(xq), superblocks);
}

bool avx2_available() {
  static const bool ok = max_isa() != MaxIsa::SSE4 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;  // every AVX2 CPU has F16C
}

void gemv_q4_K_rows(bool vnni, const void* w, int64_t k, const void* xq, int64_t r0, int64_t r1, float* y) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* act = static_cast<const uint8_t*>(xq);
  const int64_t superblocks = k / kSuperBlock, row_bytes = superblocks * kQ4KBytes;
  const auto four_weight_rows = vnni ? dot4_q4_K_vnni : dot4_qK_avx2<false>;
  const auto one = vnni ? dot_q4_K_vnni<1> : dot_q4_K_avx2<1>;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) four_weight_rows(base + r * row_bytes, row_bytes, act, superblocks, y + r);
  for (; r < r1; ++r) one(base + r * row_bytes, &act, superblocks, y + r);
}

#else

bool avx2_available() { return false; }
void gemv_q4_K_rows(bool, const void*, int64_t, const void*, int64_t, int64_t, float*) {}
void gemv_q56_K_x86_rows(bool, bool, const void*, int64_t, const void*, int64_t, int64_t, float*) {}

#endif

}  // namespace foundry::quant

// Small AVX2 helpers shared by the x86 byte kernels (k_gemv_x86.cpp, avx2_gemv.cpp,
// block_gemm_x86.cpp). Include only where __x86_64__ and GCC / clang attributes are available.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace foundry::quant::avx2 {

/// How far ahead the one-row byte kernels prefetch their weight stream (prefetchnta; 2-4 KB
/// measured alike for the bf16 rows, docs/decisions.md).
constexpr int64_t kStreamAhead = 4096;

/// The IEEE half at p (unaligned) as float32.
__attribute__((target("avx2,fma,f16c"))) inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

/// The 4 bytes at p (unaligned) as an int32.
inline int32_t dword_at(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// The 4 bits at `shift` of each int32 lane of `bits` as bytes 0-3 of the lane, each 0x10 where its
/// bit is set (the q5 formats' fifth bits over a run of nibbles): x * 0x00204081 puts bit j of a
/// 4-bit x at bit 8j, nothing carrying.
__attribute__((target("avx2,fma,f16c"))) inline __m256i fifth_bits(__m256i bits, int shift) {
  const __m256i nibble = _mm256_and_si256(_mm256_srl_epi32(bits, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(0x0F));
  const __m256i spread = _mm256_mullo_epi32(nibble, _mm256_set1_epi32(0x00204081));
  return _mm256_slli_epi32(_mm256_and_si256(spread, _mm256_set1_epi32(0x01010101)), 4);
}

/// Bits n..n + width - 1 of each byte of `bytes` moved to bits 4.. of the byte, the rest 0
/// (n + width <= 8, width <= 2): a level's high bits above its nibble (q5_K's fifth bit: bit j of
/// a position's qh byte for sub-block j; q6_K's two: bits 2q, 2q + 1 for quarter q). One shift: no
/// bit of a neighbouring byte reaches bits 4-5.
__attribute__((target("avx2,fma,f16c"))) inline __m256i bits_at_four(__m256i bytes, int n, int width) {
  const __m256i moved = n < 4 ? _mm256_sll_epi16(bytes, _mm_cvtsi32_si128(4 - n)) : _mm256_srl_epi16(bytes, _mm_cvtsi32_si128(n - 4));
  return _mm256_and_si256(moved, _mm256_set1_epi8(int8_t(((1 << width) - 1) << 4)));
}

/// A q4_K (or q5_K) super-block of a Groups8 group (row_groups.cpp: 8 d, 8 dmin, then the rows' three packed
/// scale words, each for the 8 rows) with its 6-bit scales and minimums unpacked lane-wise: byte j
/// of lane i of scales[h] (mins[h]) is row i's scale (minimum) of sub-block 4h + j (ggml's
/// get_scale_min_k4, on the rows' 32-bit words at once).
struct KGroupFactors {
  __m256i scales[2], mins[2];
};
/// Bits 6-7 of each byte of w moved to bits 4-5 (the rest 0).
__attribute__((target("avx2,fma,f16c"))) inline __m256i top_two_bits_at_four(__m256i w) {
  return _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 6), _mm256_set1_epi8(0x03)), 4);
}
__attribute__((target("avx2,fma,f16c"))) inline KGroupFactors k_group_factors(const uint8_t* group_superblock) {
  const auto* words = reinterpret_cast<const __m256i*>(group_superblock + 32);  // after the 8 d and the 8 dmin
  const __m256i w0 = _mm256_loadu_si256(words), w1 = _mm256_loadu_si256(words + 1), w2 = _mm256_loadu_si256(words + 2);
  const __m256i low6 = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F);
  return {{_mm256_and_si256(w0, low6), _mm256_or_si256(_mm256_and_si256(w2, low4), top_two_bits_at_four(w0))},
          {_mm256_and_si256(w1, low6),
           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4), top_two_bits_at_four(w1))}};
}

/// The sum of v's eight lanes.
__attribute__((target("avx2,fma,f16c"))) inline float sum_lanes(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace foundry::quant::avx2

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

/// The sum of v's eight lanes.
__attribute__((target("avx2,fma,f16c"))) inline float sum_lanes(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace foundry::quant::avx2

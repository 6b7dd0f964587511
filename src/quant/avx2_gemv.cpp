// Decode's matrix-vector products of the 32-value block formats (q8_0, q4_0, q4_1, q5_0, q5_1)
// on x86 CPUs with AVX2 and no AVX-512 VNNI (vnni_gemv.cpp serves those): vpmaddubsw (u8 x s8
// pairs into int16) and vpmaddwd (into int32 lanes), one or two weight rows a step (see
// avx2_rows). q8_0's weights are signed: |w| x (y with w's sign); the nibble formats' levels are
// unsigned, their offsets and minimums applied through the activation's level sums. The Highway
// kernels these replace (one row at a time, int16 widening) ran Llama-110M's decode at 0.69x
// (q4_0) and 0.87x (q8_0) of a llama.cpp built for AVX2 only, q4_1 / q5_0 / q5_1 at 0.51-0.78x,
// on a Zen 5 capped to AVX2 (FOUNDRY_MAX_ISA=avx2).
#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FOUNDRY_HAVE_AVX2_GEMV 1
#else
#define FOUNDRY_HAVE_AVX2_GEMV 0
#endif

namespace foundry::quant {

#if FOUNDRY_HAVE_AVX2_GEMV

namespace {

constexpr int64_t kQ8Bytes = 34;

// The activation row (q8_0) as the kernels read it: its levels in place and each block's scale as
// float32 (q8_0); for the nibble formats, by pairs of blocks (a, b): the levels [a0-15 b0-15] and
// [a16-31 b16-31] (the low and high nibbles of the pair's two 16-byte halves side by side), each
// block's scale in 4 lanes, and each int32 lane's level sum (the levels behind its products) times
// the format's offset (q4_0: 8, q5_0: 16) or times its scale (q4_1 / q5_1: the minimums' term).
struct Avx2Activation {
  const uint8_t* xq = nullptr;
  int64_t blocks = 0;
  std::vector<float> scales;
  std::vector<int8_t> pair_levels;     // 64 a pair
  std::vector<float> pair_scales;      // 8 a pair
  std::vector<int32_t> level_offsets;  // 8 a pair (q4_0, q5_0)
  std::vector<float> level_sums;       // 8 a pair (q4_1, q5_1)
};

using avx2::f16_at;
using avx2::sum_lanes;

// Rows [0, R) of the group at w against the activation, prefetched `ahead` bytes on with
// prefetchnta (one line per 64 bytes of each row's blocks). q8_0: a block a step.
template <int R>
FOUNDRY_AVX2_TARGET void q8_0_rows(const uint8_t* w, int64_t row_bytes, int64_t ahead, const Avx2Activation& a,
                                   float* y) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + b * kQ8Bytes + 2));
    const float dy = a.scales[size_t(b)];
    const bool prefetch = b * kQ8Bytes >= next_prefetch;
    if (prefetch) next_prefetch += 64;
    #pragma GCC unroll 4  // the accumulators stay in registers
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w + i * row_bytes + b * kQ8Bytes;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_NTA);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const __m256i magnitudes = _mm256_sign_epi8(wv, wv), signed_y = _mm256_sign_epi8(yv, wv);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_y), ones);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(f16_at(p) * dy), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) y[i] = sum_lanes(acc[i]);
}

// The nibble formats, two blocks a step: q4_0 (fp16 d, 16 bytes of nibbles), q4_1 (d, fp16 m,
// nibbles), q5_0 (d, 32 fifth bits, nibbles), q5_1 (d, m, fifth bits, nibbles); a value is
// d (u - 8), d u + m, d (u - 16) or d u + m for its unsigned level u. The pair's two 16-byte nibble
// halves side by side make one vector, its low nibbles [a0-15 b0-15] and high [a16-31 b16-31] meet
// the activation's levels in the same order (the q5 fifth bits, bits 0-15 of a's and b's mask for
// the low half and bits 16-31 for the high, spread into bytes), and their int16 pair sums add
// before one vpmaddwd: int32 lanes 0-3 are block a's, 4-7 b's. sum((u - o) y) = sum(u y) - o sum(y);
// the minimums add m dy sum(y) per lane. The pair's scales (and minimums) go through one vcvtph2ps.
// A block left over (an odd count) takes the scalar reference's dot after the loop. Against the
// one-block steps q4_1 / q5_0 / q5_1 had (Zen 5 capped to AVX2, 1 thread, medians of 5
// alternating runs): products 13.1 -> 23.0, 13.0 -> 14.6, 15.7 -> 15.8 GB/s (q4_0 21.9 / 21.4).
// The 32-bit mask as 32 bytes, 0xFF where its bit is set (bit j -> byte j).
FOUNDRY_AVX2_TARGET inline __m256i bytes_of_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)),
                                             _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                               0x0101010101010101LL, 0x0000000000000000LL));
  // Every bit but byte j's own bit (j mod 8) set: the byte is all ones exactly when that bit is.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

template <BlockFormat F, int R>
FOUNDRY_AVX2_TARGET void nibble_rows(const uint8_t* w, int64_t row_bytes, const Avx2Activation& a, float* y) {
  using N = NibbleLayout<F>;
  const __m256i ones = _mm256_set1_epi16(1), low_mask = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(0x10);
  const __m256i d_lanes = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  const __m256i m_lanes = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t pairs = a.blocks / 2;
  int64_t next_prefetch = 0;
  for (int64_t q = 0; q < pairs; ++q) {
    const bool prefetch = q * 2 * N::kBytes >= next_prefetch;
    if (prefetch) next_prefetch += 64;
    const __m256i y_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.pair_levels.data() + q * 64));
    const __m256i y_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.pair_levels.data() + q * 64 + 32));
    const __m256 dy = _mm256_loadu_ps(a.pair_scales.data() + q * 8);
    #pragma GCC unroll 2  // the accumulators stay in registers
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w + i * row_bytes + q * 2 * N::kBytes;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + avx2::kStreamAhead, _MM_HINT_NTA);
      const __m256i v = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + N::kHeader))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + N::kBytes + N::kHeader)), 1);
      __m256i lo = _mm256_and_si256(v, low_mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask);
      if constexpr (N::kFifth) {
        uint32_t fa, fb;
        std::memcpy(&fa, p + N::kHeader - 4, 4);
        std::memcpy(&fb, p + N::kBytes + N::kHeader - 4, 4);
        lo = _mm256_or_si256(lo, _mm256_and_si256(bytes_of_bits((fa & 0xFFFFu) | (fb << 16)), sixteen));
        hi = _mm256_or_si256(hi, _mm256_and_si256(bytes_of_bits((fa >> 16) | (fb & 0xFFFF0000u)), sixteen));
      }
      const __m256i pair_sums = _mm256_add_epi16(_mm256_maddubs_epi16(lo, y_low), _mm256_maddubs_epi16(hi, y_high));
      __m256i dot = _mm256_madd_epi16(pair_sums, ones);
      if constexpr (N::kOffset != 0)
        dot = _mm256_sub_epi32(dot,
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.level_offsets.data() + q * 8)));
      // [d_a, m_a, d_b, m_b] (without minimums: [d_a, -, d_b, -]) from each block's first 4 bytes.
      int32_t first, second;
      std::memcpy(&first, p, 4);
      std::memcpy(&second, p + N::kBytes, 4);
      const __m256 halves = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(first), second, 1)));
      const __m256 dw = _mm256_permutevar8x32_ps(halves, d_lanes);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dy), acc[i]);
      if constexpr (N::kMin)
        acc[i] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(halves, m_lanes), _mm256_loadu_ps(a.level_sums.data() + q * 8),
                                 acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float sum = sum_lanes(acc[i]);
    if (a.blocks % 2) {  // the last block
      const int64_t b = a.blocks - 1;
      sum += traits(F).dot(w + i * row_bytes + b * N::kBytes, a.xq + b * kQ8Bytes, 32);
    }
    y[i] = sum;
  }
}

// Few rows a step: over Llama-110M-shaped matrices from memory (Zen 5 capped to AVX2, in-process
// A/B) one row a step read q8_0 at 26.2 GB/s against 17.6 with four rows, q4_0 at 17.3 against
// 13.6 (2 threads: 43.8 / 28.8, 31.4 / 30.6), though four rows share the activation's loads: four
// interleaved streams a row apart are what the memory system follows worse (as the float kernels
// found, gemv_simd.cpp). q4_0, whose step costs more arithmetic a byte, reads 1.12x faster with two
// rows than one (2 threads 1.05x); q8_0 with two 1.07x at 1 thread, 0.93x at 2: one. q4_1 keeps
// two; the q5 kinds, whose fifth bits fill the step, one (of a plain read at 1 thread, median of 6
// alternating runs: q5_0 0.41 against 0.36 with two, q5_1 0.43 against 0.40; 2 threads alike).
template <BlockFormat F>
void avx2_rows(const uint8_t* w, const Avx2Activation& a, int64_t r0, int64_t r1, float* y) {
  int64_t r = r0;
  if constexpr (F == BlockFormat::Q8_0) {
    const int64_t row_bytes = a.blocks * kQ8Bytes;
    for (; r < r1; ++r) q8_0_rows<1>(w + r * row_bytes, row_bytes, avx2::kStreamAhead, a, y + r);
  } else {
    constexpr int64_t kGroup = NibbleLayout<F>::kFifth ? 1 : 2;
    const int64_t row_bytes = a.blocks * NibbleLayout<F>::kBytes;
    for (; r + kGroup <= r1; r += kGroup) nibble_rows<F, kGroup>(w + r * row_bytes, row_bytes, a, y + r);
    for (; r < r1; ++r) nibble_rows<F, 1>(w + r * row_bytes, row_bytes, a, y + r);
  }
}

template <BlockFormat F>
void prepare_pairs(Avx2Activation& a) {
  constexpr int32_t kOffset = NibbleLayout<F>::kOffset;
  constexpr bool kMin = NibbleLayout<F>::kMin;
  const int64_t pairs = a.blocks / 2;
  a.pair_levels.resize(size_t(pairs * 64));
  a.pair_scales.resize(size_t(pairs * 8));
  a.level_offsets.resize(kOffset ? size_t(pairs * 8) : 0);
  a.level_sums.resize(kMin ? size_t(pairs * 8) : 0);
  for (int64_t q = 0; q < pairs; ++q) {
    for (int half = 0; half < 2; ++half) {  // block a, then b
      const int64_t b = 2 * q + half;
      const auto* levels = reinterpret_cast<const int8_t*>(a.xq + b * kQ8Bytes + 2);
      const float dy = f16_at(a.xq + b * kQ8Bytes);
      std::memcpy(a.pair_levels.data() + q * 64 + 16 * half, levels, 16);
      std::memcpy(a.pair_levels.data() + q * 64 + 32 + 16 * half, levels + 16, 16);
      std::fill_n(a.pair_scales.begin() + q * 8 + 4 * half, 4, dy);
      // int32 lane 4 half + j sums values 4j .. 4j + 3 and 16 + 4j .. 16 + 4j + 3.
      for (int j = 0; j < 4; ++j) {
        int32_t sum = 0;
        for (int t = 4 * j; t < 4 * j + 4; ++t) sum += levels[t] + levels[16 + t];
        if constexpr (kOffset) a.level_offsets[size_t(q * 8 + 4 * half + j)] = kOffset * sum;
        if constexpr (kMin) a.level_sums[size_t(q * 8 + 4 * half + j)] = dy * float(sum);
      }
    }
  }
}

template <BlockFormat F>
GemvRowRange prepared_rows(const void* xq, int64_t k) {
  // One per thread, reused: a product is prepared and run to its end before its thread prepares
  // the next.
  thread_local Avx2Activation a;
  a.xq = static_cast<const uint8_t*>(xq);
  a.blocks = k / 32;
  if constexpr (F == BlockFormat::Q8_0) {
    a.scales.resize(size_t(a.blocks));
    for (int64_t b = 0; b < a.blocks; ++b) a.scales[size_t(b)] = f16_at(a.xq + b * kQ8Bytes);
  } else {
    prepare_pairs<F>(a);
  }
  const Avx2Activation* pa = &a;  // the only capture: std::function keeps it without allocating
  return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) { avx2_rows<F>(w, *pa, r0, r1, y); };
}

}  // namespace

GemvRowRange gemv_avx2_rows(BlockFormat format, const void* xq, int64_t k) {
  return with_byte_block_format(format, [&]<BlockFormat F>() { return prepared_rows<F>(xq, k); });
}

#else

GemvRowRange gemv_avx2_rows(BlockFormat, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

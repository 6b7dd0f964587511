// Decode's q8_0 and q4_0 matrix-vector products on x86 CPUs with AVX2 and no AVX-512 VNNI
// (vnni_gemv.cpp serves those): vpmaddubsw (u8 x s8 pairs into int16) and vpmaddwd (into int32
// lanes) per 32-value block, one or two weight rows a step (see avx2_rows). q8_0's weights are signed: |w| x (y with
// w's sign). q4_0's nibbles are level + 8: sum((u - 8) y) = sum(u y) - 8 sum(y), the second term
// per lane from the activation, once per product. The Highway kernel these replace (one row at a
// time, int16 widening) ran Llama-110M's decode at 0.69x (q4_0) and 0.87x (q8_0) of a llama.cpp
// built for AVX2 only, both on a Zen 5 capped to AVX2 (FOUNDRY_MAX_ISA=avx2). The kernels take R
// rows a step, sharing the activation's loads (avx2_rows picks R).
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

constexpr int64_t kQ8Bytes = 34, kQ4Bytes = 18;

// The activation row (q8_0) as the kernels read it: its levels in place, each block's scale as
// float32 and, for q4_0, 8 x the sum of the four levels behind each int32 lane of a block.
struct Avx2Activation {
  const uint8_t* xq = nullptr;
  int64_t blocks = 0;
  std::vector<float> scales;
  // q4_0, by pairs of blocks (a, b): the levels [a0-15 b0-15] and [a16-31 b16-31] (the low and
  // high nibbles of the pair's two 16-byte halves side by side), each block's scale in 4 lanes,
  // and 8 x the sum of the levels behind each int32 lane of the pair's products.
  std::vector<int8_t> pair_levels;  // 64 a pair
  std::vector<float> pair_scales;   // 8 a pair; q4_1 / q5_0 / q5_1: [dy, dy sum(y)] a block (q5_0: -16 x the sum)
  std::vector<int32_t> eight_y;     // 8 a pair
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

// q4_0: two blocks a step. The pair's two 16-byte nibble halves side by side make one vector, its
// low nibbles [a0-15 b0-15] and high [a16-31 b16-31] meet the activation's levels in the same
// order, and their int16 pair sums add before one vpmaddwd: int32 lanes 0-3 are block a's, 4-7
// b's. The two weight scales go through one vcvtph2ps. A block left over (an odd count) is summed
// in scalar code after the loop.
template <int R>
FOUNDRY_AVX2_TARGET void q4_0_rows(const uint8_t* w, int64_t row_bytes, int64_t ahead, const Avx2Activation& a,
                                   float* y) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t pairs = a.blocks / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256i y_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.pair_levels.data() + q * 64));
    const __m256i y_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.pair_levels.data() + q * 64 + 32));
    const __m256i e8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.eight_y.data() + q * 8));
    const __m256 dy = _mm256_loadu_ps(a.pair_scales.data() + q * 8);
    #pragma GCC unroll 4  // the accumulators stay in registers
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w + i * row_bytes + q * 2 * kQ4Bytes;
      if (q % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_NTA);
      const auto* nibbles_a = reinterpret_cast<const __m128i*>(p + 2);
      const auto* nibbles_b = reinterpret_cast<const __m128i*>(p + kQ4Bytes + 2);
      const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(nibbles_a)),
                                                _mm_loadu_si128(nibbles_b), 1);
      const __m256i lo = _mm256_and_si256(v, low_mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask);
      const __m256i pair_sums = _mm256_add_epi16(_mm256_maddubs_epi16(lo, y_low), _mm256_maddubs_epi16(hi, y_high));
      const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(pair_sums, ones), e8);
      // Scale a is the low half of the step's first 4 bytes; b goes into the second 16-bit lane.
      int32_t first;
      uint16_t second;
      std::memcpy(&first, p, 4);
      std::memcpy(&second, p + kQ4Bytes, 2);
      const __m128i scales = _mm_insert_epi16(_mm_cvtsi32_si128(first), second, 1);
      const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(scales)), halves);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dy), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float sum = sum_lanes(acc[i]);
    if (a.blocks % 2) {  // the last block: its u x y sums less 8 x its level sum
      const int64_t b = a.blocks - 1;
      const uint8_t* p = w + i * row_bytes + b * kQ4Bytes;
      const auto* levels = reinterpret_cast<const int8_t*>(a.xq + b * kQ8Bytes + 2);
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) dot += ((p[2 + j] & 0x0F) - 8) * levels[j] + ((p[2 + j] >> 4) - 8) * levels[16 + j];
      sum += float(dot) * (f16_at(p) * a.scales[size_t(b)]);
    }
    y[i] = sum;
  }
}

// Few rows a step: over Llama-110M-shaped matrices from memory (Zen 5 capped to AVX2, in-process
// A/B) one row a step read q8_0 at 26.2 GB/s against 17.6 with four rows, q4_0 at 17.3 against
// 13.6 (2 threads: 43.8 / 28.8, 31.4 / 30.6), though four rows share the activation's loads: four
// interleaved streams a row apart are what the memory system follows worse (as the float kernels
// found, gemv_simd.cpp). q4_0, whose step costs more arithmetic a byte, reads 1.12x faster with two
// rows than one (2 threads 1.05x); q8_0 with two 1.07x at 1 thread, 0.93x at 2: one.
template <bool kQ4>
void avx2_rows(const uint8_t* w, const Avx2Activation& a, int64_t r0, int64_t r1, float* y) {
  constexpr int64_t kGroup = kQ4 ? 2 : 1, kAhead = avx2::kStreamAhead;
  const int64_t row_bytes = a.blocks * (kQ4 ? kQ4Bytes : kQ8Bytes);
  int64_t r = r0;
  const auto group = kQ4 ? q4_0_rows<kGroup> : q8_0_rows<kGroup>;
  const auto one = kQ4 ? q4_0_rows<1> : q8_0_rows<1>;
  for (; r + kGroup <= r1; r += kGroup) group(w + r * row_bytes, row_bytes, kAhead, a, y + r);
  for (; r < r1; ++r) one(w + r * row_bytes, row_bytes, kAhead, a, y + r);
}

// q4_1 / q5_0 / q5_1's bytes a 32-value block.
constexpr int64_t small_block_bytes(BlockFormat f) { return f == BlockFormat::Q4_1 ? 20 : f == BlockFormat::Q5_0 ? 22 : 24; }

// The 32-bit mask at p as 32 bytes, 0xFF where its bit is set (bit j -> byte j).
FOUNDRY_AVX2_TARGET inline __m256i bytes_of_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)),
                                             _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                               0x0101010101010101LL, 0x0000000000000000LL));
  // Every bit but byte j's own bit (j mod 8) set: the byte is all ones exactly when that bit is.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// levels | 16 where the 32-bit mask at p has a bit (bit j -> byte j).
FOUNDRY_AVX2_TARGET inline __m256i fifth_bits(__m256i levels, const uint8_t* p, __m256i sixteen) {
  return _mm256_or_si256(levels, _mm256_and_si256(bytes_of_bits(p), sixteen));
}

// q4_1, q5_0 and q5_1 (32-value blocks: fp16 d, fp16 m for the _1 kinds, 32 fifth bits for the q5
// kinds, then q4_0's nibbles): unsigned levels u (0..15 / 0..31) against the activation, value
// d u + m (q5_0: d (u - 16)), so a block's dot is d dy sum(u y) + m ls (q5_0: d (-16 ls)), ls the
// activation block's scaled level sum dy sum(y). The two scale products come from one vcvtph2ps of
// [d, m] (q5_0: [d, d]) times the activation's [dy, ls] pair; R rows a step share the activation's
// loads (small_block_range picks R).
template <BlockFormat F, int R>
FOUNDRY_AVX2_TARGET void small_block_rows(const uint8_t* w, int64_t row_bytes, const Avx2Activation& a, float* y) {
  constexpr bool kMin = F != BlockFormat::Q5_0, kFifth = F != BlockFormat::Q4_1;
  constexpr int64_t kBytes = small_block_bytes(F);
  constexpr int64_t kNibbles = 2 + (kMin ? 2 : 0) + (kFifth ? 4 : 0);
  const __m256i low_mask = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  __m128 offsets[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps(), offsets[i] = _mm_setzero_ps();
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const bool prefetch = b * kBytes >= next_prefetch;
    if (prefetch) next_prefetch += 64;
    const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + b * kQ8Bytes + 2));
    const __m128 scale_pair = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a.pair_scales.data() + 2 * b)));
    #pragma GCC unroll 2
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w + i * row_bytes + b * kBytes;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + avx2::kStreamAhead, _MM_HINT_NTA);
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kNibbles));
      __m256i levels = _mm256_and_si256(
          _mm256_inserti128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1), low_mask);
      if constexpr (kFifth) levels = fifth_bits(levels, p + 2 + (kMin ? 2 : 0), sixteen);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(levels, yv), ones);
      int32_t scales;  // d, m (q5_0: d, then the fifth bits, not read)
      std::memcpy(&scales, p, 4);
      const __m128i halves = _mm_cvtsi32_si128(kMin ? scales : int32_t((uint32_t(scales) & 0xFFFFu) * 0x10001u));
      const __m128 products = _mm_mul_ps(_mm_cvtph_ps(halves), scale_pair);  // [d dy, m ls]
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcastss_ps(products), acc[i]);
      offsets[i] = _mm_add_ps(offsets[i], products);
    }
  }
  for (int i = 0; i < R; ++i) y[i] = sum_lanes(acc[i]) + _mm_cvtss_f32(_mm_shuffle_ps(offsets[i], offsets[i], 1));
}


// Two rows a step for q4_1 (of a plain read: 0.42-0.49 against 0.39-0.43 with one), one for the q5
// kinds, whose fifth bits fill the step (0.29-0.37 / 0.45-0.47 with one, 0.29-0.30 / 0.33 with two).
// (AVX-512 VNNI CPUs run vnni_gemv.cpp's four-block steps instead.)
template <BlockFormat F>
void small_block_range(const uint8_t* w, const Avx2Activation& a, int64_t r0, int64_t r1, float* y) {
  constexpr int kRows = F == BlockFormat::Q4_1 ? 2 : 1;
  const int64_t row_bytes = a.blocks * small_block_bytes(F);
  int64_t r = r0;
  if constexpr (kRows > 1)
    for (; r + kRows <= r1; r += kRows) small_block_rows<F, kRows>(w + r * row_bytes, row_bytes, a, y + r);
  for (; r < r1; ++r) small_block_rows<F, 1>(w + r * row_bytes, row_bytes, a, y + r);
}

}  // namespace

GemvRowRange gemv_avx2_small_block_rows(BlockFormat format, const void* xq, int64_t k) {
  thread_local Avx2Activation a;  // the thread's, reused (see gemv_avx2_rows)
  a.xq = static_cast<const uint8_t*>(xq);
  a.blocks = k / 32;
  a.pair_scales.resize(size_t(2 * a.blocks));
  const float offset_unit = format == BlockFormat::Q5_0 ? -16.f : 1.f;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const float dy = f16_at(a.xq + b * kQ8Bytes);
    const auto* levels = reinterpret_cast<const int8_t*>(a.xq + b * kQ8Bytes + 2);
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += levels[j];
    a.pair_scales[size_t(2 * b)] = dy;
    a.pair_scales[size_t(2 * b + 1)] = offset_unit * dy * float(sum);
  }
  const Avx2Activation* pa = &a;
  auto rows = [pa, format](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    switch (format) {
      case BlockFormat::Q4_1: return small_block_range<BlockFormat::Q4_1>(w, *pa, r0, r1, y);
      case BlockFormat::Q5_0: return small_block_range<BlockFormat::Q5_0>(w, *pa, r0, r1, y);
      default: return small_block_range<BlockFormat::Q5_1>(w, *pa, r0, r1, y);
    }
  };
  return rows;
}

GemvRowRange gemv_avx2_rows(bool q4_0, const void* xq, int64_t k) {
  // One per thread, reused: a product is prepared and run to its end before its thread prepares
  // the next.
  thread_local Avx2Activation a;
  a.xq = static_cast<const uint8_t*>(xq);
  a.blocks = k / 32;
  a.scales.resize(size_t(a.blocks));
  for (int64_t b = 0; b < a.blocks; ++b) a.scales[size_t(b)] = f16_at(a.xq + b * kQ8Bytes);
  if (q4_0) {
    const int64_t pairs = a.blocks / 2;
    a.pair_levels.resize(size_t(pairs * 64));
    a.pair_scales.resize(size_t(pairs * 8));
    a.eight_y.resize(size_t(pairs * 8));
    for (int64_t q = 0; q < pairs; ++q) {
      for (int half = 0; half < 2; ++half) {  // block a, then b
        const int64_t b = 2 * q + half;
        const auto* levels = reinterpret_cast<const int8_t*>(a.xq + b * kQ8Bytes + 2);
        std::memcpy(a.pair_levels.data() + q * 64 + 16 * half, levels, 16);
        std::memcpy(a.pair_levels.data() + q * 64 + 32 + 16 * half, levels + 16, 16);
        std::fill_n(a.pair_scales.begin() + q * 8 + 4 * half, 4, a.scales[size_t(b)]);
        // int32 lane 4 half + j sums values 4j .. 4j + 3 and 16 + 4j .. 16 + 4j + 3.
        for (int j = 0; j < 4; ++j) {
          int32_t sum = 0;
          for (int t = 4 * j; t < 4 * j + 4; ++t) sum += levels[t] + levels[16 + t];
          a.eight_y[size_t(q * 8 + 4 * half + j)] = 8 * sum;
        }
      }
    }
  }
  const Avx2Activation* pa = &a;  // the only capture: std::function keeps it without allocating
  if (q4_0)
    return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) { avx2_rows<true>(w, *pa, r0, r1, y); };
  return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) { avx2_rows<false>(w, *pa, r0, r1, y); };
}

#else

GemvRowRange gemv_avx2_rows(bool, const void*, int64_t) { return {}; }
GemvRowRange gemv_avx2_small_block_rows(BlockFormat, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

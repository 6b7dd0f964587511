// Decode's nf4 matrix-vector products on x86 CPUs with AVX2 or AVX-512 (BW + VNNI), in integers.
// An nf4 block is 36 bytes for 64 values: the float absmax, then value j in the low nibble of byte
// j and value j + 32 in the high. The 16 codebook values, in Q15 as every nf4 dot takes them
// (nf4_codebook_q15: within 1.6e-5 of a block's absmax), are looked up with two vpshufb (their
// low and high bytes) and interleaved by vpunpck{l,h}bw into int16 lanes, then multiplied with
// vpmaddwd (vpdpwssd) against the activation's levels, widened to int16 once per product in that
// interleaved order. The Highway kernel these replace converted every code and level to float (a
// 16-entry table lookup: one 16-lane permute, or two 8-lane permutes and a select under AVX2):
// decode's products over Llama-110M's weights read 12.4 GB/s at 1 thread on a Zen 5 (AVX-512),
// 4.2 capped to AVX2.
#include <algorithm>
#include <cstring>
#include <vector>

#include "foundry/quant/weight_only.h"
#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FOUNDRY_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_HAVE_NF4_X86 1
#else
#define FOUNDRY_HAVE_NF4_X86 0
#endif

namespace foundry::quant {

#if FOUNDRY_HAVE_NF4_X86

namespace {

constexpr int64_t kQ8Bytes = 34, kNF4Bytes = 36, kAhead = avx2::kStreamAhead;

// The q8_0 activation row as the kernels read it. A 32-value half of an nf4 block meets two
// 16-lane int16 chunks: "ul" [0-7 16-23] and "uh" [8-15 24-31] of its levels (the unpacks' orders).
// AVX2 reads a block's four chunks in the order lo.ul lo.uh hi.ul hi.uh; AVX-512 takes two blocks
// a step, the chunks of a pair alternating (b0.lo.ul b1.lo.ul b0.lo.uh ...), so one 512-bit load
// holds a chunk of each; an odd last block is laid out as AVX2's.
struct NF4Activation {
  std::vector<int16_t> levels;       // 64 a block
  std::vector<float> scales;         // 2 a block: the q8_0 blocks' scales / 32767
  std::vector<float> pair_scales;    // AVX-512, 32 a pair: each half's scales, 8 lanes per block
  alignas(16) uint8_t table_low[16]; // the codebook's int16 values, low bytes
  alignas(16) uint8_t table_high[16];
  int64_t blocks = 0;
};

// The 16 int16 levels of one chunk: values [first, first + 8) and [first + 16, first + 24) of a
// 32-level q8_0 block.
void widen_chunk(const int8_t* levels, int first, int16_t* out) {
  for (int j = 0; j < 8; ++j) {
    out[j] = levels[first + j];
    out[8 + j] = levels[first + 16 + j];
  }
}

// acc plus one block's products at p (lanes to be added up), under AVX2; `levels` its four chunks.
FOUNDRY_AVX2_TARGET inline __m256 block_avx2(const uint8_t* p, const __m256i* levels, __m256 dy_low, __m256 dy_high,
                                             __m256i table_low, __m256i table_high, __m256 acc) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4));
  const __m256i codes[2] = {_mm256_and_si256(v, low_mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask)};
  __m256 half_sums[2];
  for (int h = 0; h < 2; ++h) {
    const __m256i lo = _mm256_shuffle_epi8(table_low, codes[h]), hi = _mm256_shuffle_epi8(table_high, codes[h]);
    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi8(lo, hi), _mm256_loadu_si256(levels + 2 * h)),
                                         _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, hi), _mm256_loadu_si256(levels + 2 * h + 1)));
    half_sums[h] = _mm256_cvtepi32_ps(dot);
  }
  float amax;
  std::memcpy(&amax, p, 4);
  return _mm256_fmadd_ps(_mm256_fmadd_ps(half_sums[1], dy_high, _mm256_mul_ps(half_sums[0], dy_low)), _mm256_set1_ps(amax),
                         acc);
}

FOUNDRY_AVX2_TARGET void rows_avx2(const uint8_t* w, const NF4Activation& a, int64_t r0, int64_t r1, float* y) {
  const __m256i table_low = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(a.table_low)));
  const __m256i table_high = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(a.table_high)));
  const int64_t row_bytes = a.blocks * kNF4Bytes;
  // One row at a time: the step is arithmetic-bound, and two rows sharing the activation's loads
  // read no faster (15.1-15.4 GB/s against 15.5-16.3, Llama-110M's products, AVX2, 1 thread).
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    const auto* levels = reinterpret_cast<const __m256i*>(a.levels.data());
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b, levels += 4) {
      const uint8_t* p = row + b * kNF4Bytes;
      if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead, _MM_HINT_NTA);
      acc = block_avx2(p, levels, _mm256_set1_ps(a.scales[size_t(2 * b)]), _mm256_set1_ps(a.scales[size_t(2 * b + 1)]),
                       table_low, table_high, acc);
    }
    y[r] = avx2::sum_lanes(acc);
  }
}

FOUNDRY_AVX512_TARGET void rows_avx512(const uint8_t* w, const NF4Activation& a, int64_t r0, int64_t r1, float* y) {
  const __m128i low16 = _mm_load_si128(reinterpret_cast<const __m128i*>(a.table_low));
  const __m128i high16 = _mm_load_si128(reinterpret_cast<const __m128i*>(a.table_high));
  const __m512i table_low = _mm512_broadcast_i32x4(low16), table_high = _mm512_broadcast_i32x4(high16);
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const int64_t row_bytes = a.blocks * kNF4Bytes, pairs = a.blocks / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    const auto* levels = reinterpret_cast<const __m512i*>(a.levels.data());
    __m512 acc = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; ++q, levels += 4) {
      const uint8_t* p = row + q * 2 * kNF4Bytes;
      // A step is 72 bytes: both lines its bytes 4 KB on can touch.
      _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead, _MM_HINT_NTA);
      _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead + 2 * kNF4Bytes - 1, _MM_HINT_NTA);
      const __m512i v = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kNF4Bytes + 4)), 1);
      const __m512i codes[2] = {_mm512_and_si512(v, low_mask), _mm512_and_si512(_mm512_srli_epi16(v, 4), low_mask)};
      __m512 half_sums[2];
      for (int h = 0; h < 2; ++h) {
        const __m512i lo = _mm512_shuffle_epi8(table_low, codes[h]), hi = _mm512_shuffle_epi8(table_high, codes[h]);
        __m512i dot = _mm512_madd_epi16(_mm512_unpacklo_epi8(lo, hi), _mm512_loadu_si512(levels + 2 * h));
        dot = _mm512_dpwssd_epi32(dot, _mm512_unpackhi_epi8(lo, hi), _mm512_loadu_si512(levels + 2 * h + 1));
        half_sums[h] = _mm512_cvtepi32_ps(dot);
      }
      const float* dy = a.pair_scales.data() + q * 32;
      const __m512 block = _mm512_fmadd_ps(half_sums[1], _mm512_loadu_ps(dy + 16), _mm512_mul_ps(half_sums[0], _mm512_loadu_ps(dy)));
      float amax[2];
      std::memcpy(&amax[0], p, 4);
      std::memcpy(&amax[1], p + kNF4Bytes, 4);
      const __m512 scale = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(amax[0])), _mm256_set1_ps(amax[1]), 1);
      acc = _mm512_fmadd_ps(block, scale, acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (a.blocks % 2) {
      const int64_t b = a.blocks - 1;
      sum += avx2::sum_lanes(block_avx2(row + b * kNF4Bytes, reinterpret_cast<const __m256i*>(levels),
                                        _mm256_set1_ps(a.scales[size_t(2 * b)]), _mm256_set1_ps(a.scales[size_t(2 * b + 1)]),
                                        _mm512_castsi512_si256(table_low), _mm512_castsi512_si256(table_high),
                                        _mm256_setzero_ps()));
    }
    y[r] = sum;
  }
}

}  // namespace

GemvRowRange gemv_nf4_x86_rows(bool avx512, const void* xq, int64_t k) {
  thread_local NF4Activation a;  // the thread's, reused (see gemv_vnni_rows)
  const auto* x = static_cast<const uint8_t*>(xq);
  auto levels_of = [x](int64_t q8_block) { return reinterpret_cast<const int8_t*>(x + q8_block * kQ8Bytes + 2); };
  a.blocks = k / 64;
  a.levels.resize(size_t(a.blocks * 64));
  a.scales.resize(size_t(a.blocks * 2));
  for (int64_t h = 0; h < 2 * a.blocks; ++h) a.scales[size_t(h)] = avx2::f16_at(x + h * kQ8Bytes) / kNF4Q15Unit;
  const int64_t pairs = avx512 ? a.blocks / 2 : 0;
  a.pair_scales.resize(size_t(pairs * 32));
  for (int64_t q = 0; q < pairs; ++q) {
    int16_t* out = a.levels.data() + q * 128;
    for (int half = 0; half < 2; ++half)      // the low nibbles' q8_0 block, then the high's
      for (int order = 0; order < 2; ++order)  // ul, uh
        for (int block = 0; block < 2; ++block, out += 16) widen_chunk(levels_of(2 * (2 * q + block) + half), 8 * order, out);
    for (int half = 0; half < 2; ++half)
      for (int block = 0; block < 2; ++block)
        std::fill_n(a.pair_scales.begin() + q * 32 + 16 * half + 8 * block, 8, a.scales[size_t(2 * (2 * q + block) + half)]);
  }
  for (int64_t b = 2 * pairs; b < a.blocks; ++b) {
    int16_t* out = a.levels.data() + b * 64;
    for (int half = 0; half < 2; ++half)
      for (int order = 0; order < 2; ++order, out += 16) widen_chunk(levels_of(2 * b + half), 8 * order, out);
  }
  for (int c = 0; c < 16; ++c) {
    const auto v = static_cast<uint16_t>(nf4_codebook_q15()[c]);
    a.table_low[c] = uint8_t(v & 0xFF);
    a.table_high[c] = uint8_t(v >> 8);
  }
  const NF4Activation* pa = &a;  // the only capture: std::function keeps it without allocating
  if (avx512) return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) { rows_avx512(w, *pa, r0, r1, y); };
  return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) { rows_avx2(w, *pa, r0, r1, y); };
}

#else

GemvRowRange gemv_nf4_x86_rows(bool, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

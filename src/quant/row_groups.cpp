// Matrices in groups of 8 rows (WeightLayout::Groups8, q8_kernels.h) for q4_0 and q8_0: the
// rearrangement, a row read back in the format's own layout, and decode's AVX2 matrix-vector
// kernels over the groups.
//
// Why: the row layout's kernels read one or two rows a step and convert each block's scale on its
// own (avx2_gemv.cpp: ~9 instructions a row and block for q4_0), and on AVX2 they read Llama-110M's
// q4_0 matrices at 0.49-0.62 of a plain read of memory, bound by their instructions, decode level
// with llama.cpp's AVX2 build. Here the 8 rows of a group share each block's activation loads,
// their 8 scales are one vcvtph2ps, each row's products land in one int32 lane and the group is one
// stream: ~5 instructions a row and block for q4_0. `bench_infer --products` (both layouts in one
// process, medians of 9, Zen 5) for q4_0: capped to AVX2 26.6 against 18.1 GB/s at 1 thread, 49.5
// against 33.8 at 2; natively (against the VNNI row kernel) 30.2 against 19.5 and 52.7 against
// 38.9. The prefill's panels are the groups' runs as they lie (q4_0 split into low and high
// nibbles), without the row layout's transpose.
#include <cstring>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "quant/q8_kernels.h"
#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FOUNDRY_HAVE_ROW_GROUPS 1
#else
#define FOUNDRY_HAVE_ROW_GROUPS 0
#endif

namespace foundry::quant {

namespace {

constexpr int64_t kQ8Bytes = 34;

// Block b of rows [8g, 8g + 8) sits at b * 8 * block_bytes in the group's bytes: the 8 rows' fp16
// scales (row i at 2i), then the payload (q4_0's 16 nibble bytes, q8_0's 32 levels) in runs of 32
// bytes, payload byte 4c + j of row i at 16 + 32c + 4i + j.
void group_from_rows(const uint8_t* rows, int64_t blocks, int64_t block_bytes, uint8_t* out) {
  const int64_t row_bytes = blocks * block_bytes, runs = (block_bytes - 2) / 4;
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* o = out + b * 8 * block_bytes;
    for (int i = 0; i < 8; ++i) {
      const uint8_t* src = rows + i * row_bytes + b * block_bytes;
      std::memcpy(o + 2 * i, src, 2);
      for (int64_t c = 0; c < runs; ++c) std::memcpy(o + 16 + 32 * c + 4 * i, src + 2 + 4 * c, 4);
    }
  }
}

bool groups_format(const BlockFormatTraits& t) { return t.format == BlockFormat::Q4_0 || t.format == BlockFormat::Q8_0; }

}  // namespace

void to_layout(const BlockFormatTraits& t, WeightLayout layout, uint8_t* w, int64_t rows, int64_t k) {
  if (layout == WeightLayout::Rows) return;
  FOUNDRY_CHECK(groups_format(t) && rows % 8 == 0 && k % 32 == 0,
                "to_layout: groups of 8 rows take a q4_0 or q8_0 matrix of whole groups, got {} [{}, {}]", t.name, rows, k);
  const int64_t blocks = k / 32, group_bytes = 8 * blocks * t.block_bytes;
  parallel_for(0, rows / 8, 1, [&](int64_t g0, int64_t g1) {
    std::vector<uint8_t> rows_copy(static_cast<size_t>(group_bytes));
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(rows_copy.data(), w + g * group_bytes, size_t(group_bytes));
      group_from_rows(rows_copy.data(), blocks, t.block_bytes, w + g * group_bytes);
    }
  });
}

const uint8_t* row_of(const BlockFormatTraits& t, WeightLayout layout, const uint8_t* w, int64_t k, int64_t r,
                      uint8_t* buffer) {
  const int64_t blocks = k / 32, row_bytes = quantized_bytes(t, 1, k);
  if (layout == WeightLayout::Rows) return w + r * row_bytes;
  const int64_t block_bytes = t.block_bytes, runs = (block_bytes - 2) / 4;
  const uint8_t* group = w + (r / 8) * 8 * row_bytes;
  const int i = int(r % 8);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* src = group + b * 8 * block_bytes;
    uint8_t* o = buffer + b * block_bytes;
    std::memcpy(o, src + 2 * i, 2);
    for (int64_t c = 0; c < runs; ++c) std::memcpy(o + 2 + 4 * c, src + 16 + 32 * c + 4 * i, 4);
  }
  return buffer;
}

#if FOUNDRY_HAVE_ROW_GROUPS

namespace {

// The activation row (q8_0) as the kernels read it: its levels in place, and per block its scale
// as float32 and (q4_0, whose value is d (u - 8) for a level u in 0..15) 8 x the sum of its levels.
struct GroupActivation {
  const uint8_t* xq = nullptr;
  int64_t blocks = 0;
  std::vector<float> scales;
  std::vector<int32_t> offsets;
};

// y[0..8) for the group at w. q4_0: each run's low and high nibbles against the activation's
// levels 4c.. and 16 + 4c.., the 8 vpmaddubsw summed in int16 (at most 8 pair sums of 2 x 15 x
// 127: 30480) before one vpmaddwd. q8_0: |w| against y with w's sign, each run's pair sums (up to
// 2 x 128 x 127) widened at once.
template <BlockFormat F>
FOUNDRY_AVX2_TARGET void group_dot(const uint8_t* w, const GroupActivation& a, float* y) {
  constexpr bool kNibbles = F == BlockFormat::Q4_0;
  constexpr int64_t kGroupBlockBytes = 8 * (kNibbles ? 18 : kQ8Bytes);
  const __m256i ones = _mm256_set1_epi16(1), low_mask = _mm256_set1_epi8(0x0F);
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();  // two chains: the fma's latency
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* p = w + b * kGroupBlockBytes;
    for (; next_prefetch < (b + 1) * kGroupBlockBytes; next_prefetch += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + next_prefetch) + avx2::kStreamAhead, _MM_HINT_NTA);
    const uint8_t* levels = a.xq + b * kQ8Bytes + 2;
    __m256i dot;
    if constexpr (kNibbles) {
      __m256i sums = _mm256_setzero_si256();
      #pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * c));
        const __m256i low = _mm256_and_si256(v, low_mask), high = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask);
        const __m256i y_low = _mm256_set1_epi32(avx2::dword_at(levels + 4 * c));
        const __m256i y_high = _mm256_set1_epi32(avx2::dword_at(levels + 16 + 4 * c));
        sums = _mm256_add_epi16(sums, _mm256_add_epi16(_mm256_maddubs_epi16(low, y_low), _mm256_maddubs_epi16(high, y_high)));
      }
      dot = _mm256_sub_epi32(_mm256_madd_epi16(sums, ones), _mm256_set1_epi32(a.offsets[size_t(b)]));
    } else {
      dot = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * c));
        const __m256i yv = _mm256_set1_epi32(avx2::dword_at(levels + 4 * c));
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
        dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 scale = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                                       _mm256_set1_ps(a.scales[size_t(b)]));
    if (b % 2) odd = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, odd);
    else even = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, even);
  }
  _mm256_storeu_ps(y, _mm256_add_ps(even, odd));
}

template <BlockFormat F>
GemvRowRange prepared_groups(const void* xq, int64_t k) {
  // One per thread, reused: a product is prepared and run to its end before its thread prepares the next.
  thread_local GroupActivation a;
  a.xq = static_cast<const uint8_t*>(xq);
  a.blocks = k / 32;
  a.scales.resize(size_t(a.blocks));
  a.offsets.resize(F == BlockFormat::Q4_0 ? size_t(a.blocks) : 0);
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* block = a.xq + b * kQ8Bytes;
    a.scales[size_t(b)] = avx2::f16_at(block);
    if constexpr (F == BlockFormat::Q4_0) {
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += int8_t(block[2 + j]);
      a.offsets[size_t(b)] = 8 * sum;
    }
  }
  const GroupActivation* pa = &a;  // the only capture: std::function keeps it without allocating
  return [pa](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    const int64_t group_bytes = pa->blocks * 8 * (F == BlockFormat::Q4_0 ? 18 : kQ8Bytes);
    for (int64_t r = r0; r < r1; r += 8) group_dot<F>(w + (r / 8) * group_bytes, *pa, y + r);
  };
}

}  // namespace

GemvRowRange gemv_avx2_group_rows(BlockFormat format, const void* xq, int64_t k) {
  return format == BlockFormat::Q4_0 ? prepared_groups<BlockFormat::Q4_0>(xq, k) : prepared_groups<BlockFormat::Q8_0>(xq, k);
}

#else

GemvRowRange gemv_avx2_group_rows(BlockFormat, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

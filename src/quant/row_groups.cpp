// Matrices in groups of 8 rows (WeightLayout::Groups8, q8_kernels.h) for q4_0, q4_1, q5_0, q5_1,
// q8_0, q4_K, q5_K and q6_K: the rearrangement, a row read back in the format's own layout, and
// decode's matrix-vector kernels over the groups (AVX2, and AVX-512 VNNI forms of each).
//
// Why: the row layout's kernels read one or two rows a step and convert each block's scale on its
// own (avx2_gemv.cpp: ~9 instructions a row and block for q4_0), and on AVX2 they read Llama-110M's
// q4_0 matrices at 0.49-0.62 of a plain read of memory, bound by their instructions, decode level
// with llama.cpp's AVX2 build. Here the 8 rows of a group share each block's activation loads,
// their 8 scales are one vcvtph2ps, each row's products land in one int32 lane and the group is one
// stream: ~5 instructions a row and block for q4_0 (both counted in the loops). Measured
// (docs/quantization.md): capped to AVX2, `bench_infer --products` 1.05-1.5x the row kernels' GB/s
// for every format. On AVX-512 VNNI CPUs the group kernels take two runs a 512-bit vector
// (WideActivation) and read 1.2-1.6x the VNNI row kernels' GB/s (q6_K 0.97-1.16x; q8_0 keeps its rows there for
// decode: preferred_layout says what was measured). The K-quants' super-blocks keep their scales as 4-byte
// fields (q4_K / q5_K: three words of packed 6-bit scales; q6_K: four of int8), so one load a
// field gives the 8 rows' words in lanes, unpacked for all 8 at once. The prefill's panels are the
// groups' runs as they lie, without the row layout's transpose (block_gemm_x86.cpp).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "quant/bf16_packed.h"
#include "quant/formats_internal.h"
#include "quant/q8_kernels.h"
#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FOUNDRY_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_HAVE_ROW_GROUPS 1
#else
#define FOUNDRY_HAVE_ROW_GROUPS 0
#endif

namespace foundry::quant {

namespace {

constexpr int64_t kQ8Bytes = 34;

// Block b of rows [8g, 8g + 8) sits at b * 8 * block_bytes in the group's bytes: each header field
// (block_header's, in its order) for the 8 rows (row i's at i x its width), then the payload (every
// byte of the block outside its header) in runs of 32 bytes, payload byte 4c + j of row i at
// 8 x header + 32c + 4i + j.
// Calls piece(at_group, at_block, width) for each piece of row i's block (block_bytes, the format's
// own layout): where it sits in the group's block and in the row's.
template <class Piece>
void for_each_piece(const BlockHeader& h, int64_t block_bytes, int i, Piece piece) {
  const int64_t header_at = h.trailing ? block_bytes - h.bytes : 0, payload_at = h.trailing ? 0 : h.bytes;
  int64_t at = 0;  // in the header
  const auto field = [&](int64_t width) {
    piece(8 * at + i * width, header_at + at, width);
    at += width;
  };
  if (h.trailing) {
    for (int w = 0; w < h.scale_words; ++w) field(4);
    field(2);
  } else {
    field(2);
    if (h.min) field(2);
    if (h.fifth) field(4);
    for (int w = 0; w < h.scale_words; ++w) field(4);
  }
  for (int64_t c = 0; c < (block_bytes - h.bytes) / 4; ++c) piece(8 * h.bytes + 32 * c + 4 * i, payload_at + 4 * c, 4);
}

void group_from_rows(const BlockFormatTraits& t, const uint8_t* rows, int64_t blocks, uint8_t* out) {
  const BlockHeader h = block_header(t.format);
  const int64_t row_bytes = blocks * t.block_bytes;
  for (int64_t b = 0; b < blocks; ++b)
    for (int i = 0; i < 8; ++i) {
      const uint8_t* block = rows + i * row_bytes + b * t.block_bytes;
      uint8_t* group_block = out + b * 8 * t.block_bytes;
      for_each_piece(h, t.block_bytes, i, [&](int64_t at_group, int64_t at_block, int64_t width) {
        std::memcpy(group_block + at_group, block + at_block, size_t(width));
      });
    }
}

}  // namespace

bool has_row_groups(BlockFormat f) {
  return f == BlockFormat::Q4_0 || f == BlockFormat::Q4_1 || f == BlockFormat::Q5_0 || f == BlockFormat::Q5_1 ||
         f == BlockFormat::Q8_0 || f == BlockFormat::Q4_K || f == BlockFormat::Q5_K || f == BlockFormat::Q6_K;
}

int64_t layout_row_bytes(const BlockFormatTraits& t, WeightLayout layout, int64_t k) {
  return layout == WeightLayout::PackedBF16 ? packed_bf16_row_bytes(k) : quantized_bytes(t, 1, k);
}

void to_layout(const BlockFormatTraits& t, WeightLayout layout, uint8_t* w, int64_t rows, int64_t k) {
  if (layout == WeightLayout::Rows) return;
  FOUNDRY_CHECK(layout == WeightLayout::Groups8, "to_layout: a packed bf16 matrix is written by pack_bf16, not in place");
  FOUNDRY_CHECK(has_row_groups(t.format) && rows >= 8 && k % t.block_size == 0,
                "to_layout: groups of 8 rows take a q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K or q6_K matrix of 8 rows or more, got {} [{}, {}]",
                t.name, rows, k);
  // rows / 8 groups; the last rows % 8 rows stay as they are, in rows (rows_in_groups).
  const int64_t blocks = k / t.block_size, group_bytes = 8 * blocks * t.block_bytes;
  parallel_for(0, rows / 8, 1, [&](int64_t g0, int64_t g1) {
    std::vector<uint8_t> rows_copy(static_cast<size_t>(group_bytes));
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(rows_copy.data(), w + g * group_bytes, size_t(group_bytes));
      group_from_rows(t, rows_copy.data(), blocks, w + g * group_bytes);
    }
  });
}

const uint8_t* row_of(const BlockFormatTraits& t, WeightLayout layout, const uint8_t* w, int64_t rows, int64_t k, int64_t r,
                      uint8_t* buffer) {
  if (layout == WeightLayout::PackedBF16) {
    unpack_bf16_row(w + r * packed_bf16_row_bytes(k), k, reinterpret_cast<uint16_t*>(buffer));
    return buffer;
  }
  const int64_t row_bytes = quantized_bytes(t, 1, k);
  if (layout == WeightLayout::Rows || r >= rows_in_groups(layout, rows)) return w + r * row_bytes;
  const BlockHeader h = block_header(t.format);
  const uint8_t* group = w + (r / 8) * 8 * row_bytes;
  for (int64_t b = 0; b < k / t.block_size; ++b) {
    const uint8_t* group_block = group + b * 8 * t.block_bytes;
    uint8_t* block = buffer + b * t.block_bytes;
    for_each_piece(h, t.block_bytes, int(r % 8), [&](int64_t at_group, int64_t at_block, int64_t width) {
      std::memcpy(block + at_block, group_block + at_group, size_t(width));
    });
  }
  return buffer;
}

#if FOUNDRY_HAVE_ROW_GROUPS

namespace {

// The activation row for the AVX-512 group kernels, built once per product: vector m holds the
// row's dword 2m of levels in each lane of its low half and dword 2m + 1 in the high half. A 64-byte
// load of a group's runs r and r + 1 (levels 4r.. and 4r + 4.. of each of the 8 rows) then meets both
// runs' activation levels with one load, no broadcast: the AVX-512 kernels do a 32-byte run's work
// in half the AVX2 kernels' instructions (a 512-bit vpmaddubsw costs what a 256-bit one does on a
// Zen 5: 7.1 a ns at both widths).
struct WideActivation {
  std::vector<int32_t> pairs;  // 16 a vector (a std::vector<__m512i> drops the 64-byte alignment)
};

// `units` units of 2 x `pairs_per_unit` dwords of levels, unit u's at xq + u x unit_bytes + skip
// (q8_0: blocks of 34 bytes after the 2-byte scale; q8_K: super-blocks after the float).
FOUNDRY_VNNI_TARGET void widen_activation(const uint8_t* xq, int64_t units, int64_t unit_bytes, int64_t skip,
                                          int pairs_per_unit, WideActivation& a) {
  a.pairs.resize(size_t(units * pairs_per_unit * 16));
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* levels = xq + u * unit_bytes + skip;
    for (int m = 0; m < pairs_per_unit; ++m)
      _mm512_storeu_si512(a.pairs.data() + (u * pairs_per_unit + m) * 16,
                          _mm512_inserti64x4(_mm512_set1_epi32(avx2::dword_at(levels + 8 * m)),
                                             _mm256_set1_epi32(avx2::dword_at(levels + 8 * m + 4)), 1));
  }
}

// The activation row (q8_0) as the kernels read it: its levels in place (and widened for the AVX-512
// kernels), and per block its scale as float32, the offset term of q4_0 / q5_0 (whose value is
// d (u - o) for a level u: o = 8 or 16; the AVX-512 kernel's q8_0 levels + 128: o = 128) as o x the
// sum of its levels, and q4_1 / q5_1's minimum term (d u + m) as dy x that sum.
struct GroupActivation {
  const uint8_t* xq = nullptr;
  int64_t blocks = 0;
  std::vector<float> scales, level_sums;
  std::vector<int32_t> offsets;
  WideActivation wide;
};

// Numbers each prepared product. A thread builds the activation a product's kernels read, in a
// thread_local of its own, when it runs its first chunk of that product (thread_copy): were one
// thread to build it for all, the others would read its lines, and its rewrite for the next
// product would first take them back from their caches (2-thread q4_0 decode on a Zen 5: the
// caller's widening stalled on its stores, 2.1% of its samples, against nothing at 1 thread).
uint64_t next_product_id() {
  static std::atomic<uint64_t> id{0};
  return id.fetch_add(1, std::memory_order_relaxed) + 1;
}

// This thread's T for `product`, build(T&) called first unless it was built for it already (a
// buffer reused with new levels by the next product gets a new number). One T per thread and
// call site: each caller's lambda type instantiates its own thread_local.
template <class T, class Build>
const T& thread_copy(uint64_t product, Build&& build) {
  struct Copy {
    T value;
    uint64_t product = 0;
  };
  thread_local Copy copy;
  if (copy.product != product) {
    build(copy.value);
    copy.product = product;
  }
  return copy.value;
}

// Prefetches the weight stream at w from `next` through `end` bytes, kStreamAhead ahead: the group
// kernels call it before each block, so every line is fetched once.
inline void prefetch_stream(const uint8_t* w, int64_t& next, int64_t end) {
  for (; next < end; next += 64) _mm_prefetch(reinterpret_cast<const char*>(w + next) + avx2::kStreamAhead, _MM_HINT_NTA);
}

// A group's block of format F (block_header's fields, then the payload).
template <BlockFormat F>
struct GroupBlock {
  static constexpr BlockHeader kHead = block_header(F);
  static constexpr bool kNibbles = kHead.nibbles, kMin = kHead.min, kFifth = kHead.fifth;
  static constexpr int64_t kHeader = kHead.bytes;
  static constexpr int64_t kBytes = 8 * (kHeader + (kNibbles ? 16 : 32));
  static constexpr int32_t kOffset = F == BlockFormat::Q4_0 ? 8 : F == BlockFormat::Q5_0 ? 16 : 0;
};

// The offset of the AVX-512 kernel's unsigned levels: the format's own, or q8_0's 128.
template <BlockFormat F>
constexpr int32_t wide_offset() { return GroupBlock<F>::kNibbles ? GroupBlock<F>::kOffset : 128; }

// A block's int32 sums `dot` of the group's 8 rows (offsets taken off) into acc: times the rows'
// scales and the activation block's, plus q4_1 / q5_1's minimums times its scaled level sum.
template <BlockFormat F>
FOUNDRY_AVX2_TARGET inline void block_end(const uint8_t* p, const GroupActivation& a, int64_t b, __m256i dot, __m256& acc) {
  const __m256 scale = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                                     _mm256_set1_ps(a.scales[size_t(b)]));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc);
  if constexpr (GroupBlock<F>::kMin)  // the 8 minimums follow the 8 scales
    acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))),
                          _mm256_set1_ps(a.level_sums[size_t(b)]), acc);
}

// y[0..8) for the group at w. The nibble formats: each run's low and high nibbles (the q5 kinds'
// fifth bits added from the rows' 32-bit masks) against the activation's levels 4c.. and 16 + 4c..,
// vpmaddubsw pair sums added in int16 (4-bit levels: all 8 of a block, at most 8 x 2 x 15 x 127 =
// 30480; 5-bit: 4 at a time, 31496) before a vpmaddwd. q8_0: |w| against y with w's sign, each
// run's pair sums (up to 2 x 128 x 127) widened at once.
template <BlockFormat F>
FOUNDRY_AVX2_TARGET void group_dot(const uint8_t* w, const GroupActivation& a, float* y) {
  using G = GroupBlock<F>;
  const __m256i ones = _mm256_set1_epi16(1), low_mask = _mm256_set1_epi8(0x0F);
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();  // two chains: the fma's latency
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* p = w + b * G::kBytes;
    prefetch_stream(w, next_prefetch, (b + 1) * G::kBytes);
    const uint8_t* levels = a.xq + b * kQ8Bytes + 2;
    __m256i dot = _mm256_setzero_si256();
    if constexpr (G::kNibbles) {
      // The fifth bits' field follows d (and m): 8 rows' 32-bit masks, one a lane.
      __m256i fifth = _mm256_setzero_si256();
      if constexpr (G::kFifth) fifth = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * (G::kHeader - 4)));
      __m256i sums = _mm256_setzero_si256();
      #pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * G::kHeader + 32 * c));
        __m256i low = _mm256_and_si256(v, low_mask), high = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask);
        if constexpr (G::kFifth) {
          low = _mm256_or_si256(low, avx2::fifth_bits(fifth, 4 * c));
          high = _mm256_or_si256(high, avx2::fifth_bits(fifth, 16 + 4 * c));
        }
        const __m256i y_low = _mm256_set1_epi32(avx2::dword_at(levels + 4 * c));
        const __m256i y_high = _mm256_set1_epi32(avx2::dword_at(levels + 16 + 4 * c));
        sums = _mm256_add_epi16(sums, _mm256_add_epi16(_mm256_maddubs_epi16(low, y_low), _mm256_maddubs_epi16(high, y_high)));
        if (G::kFifth && c % 2 == 1) {
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(sums, ones));
          sums = _mm256_setzero_si256();
        }
      }
      if constexpr (!G::kFifth) dot = _mm256_madd_epi16(sums, ones);
      if constexpr (G::kOffset != 0) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(a.offsets[size_t(b)]));
    } else {
      #pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * G::kHeader + 32 * c));
        const __m256i yv = _mm256_set1_epi32(avx2::dword_at(levels + 4 * c));
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
        dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, ones));
      }
    }
    block_end<F>(p, a, b, dot, b % 2 ? odd : even);
  }
  _mm256_storeu_ps(y, _mm256_add_ps(even, odd));
}

// 4 fifth bits of each row for runs c and c + 1 (avx2::fifth_bits at `shift` in the low half, at
// shift + 4 in the high half).
FOUNDRY_VNNI_TARGET inline __m512i fifth_bits_of_run_pair(__m512i bits, int shift) {
  const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi32(shift), _mm256_set1_epi32(shift + 4), 1);
  const __m512i nibble = _mm512_and_si512(_mm512_srlv_epi32(bits, shifts), _mm512_set1_epi32(0x0F));
  const __m512i spread = _mm512_mullo_epi32(nibble, _mm512_set1_epi32(0x00204081));
  return _mm512_slli_epi32(_mm512_and_si512(spread, _mm512_set1_epi32(0x01010101)), 4);
}

// The same on AVX-512 VNNI: runs c and c + 1 a vector against the widened row, each run's products
// summed straight into the int32 lanes (vpdpbusd; q8_0's levels made unsigned by + 128, taken off
// with the activation's level sum as q4_0's offset of 8 is), the halves added before the float
// steps: the same int32 sums, the same bits.
template <BlockFormat F>
FOUNDRY_VNNI_TARGET void group_dot_wide(const uint8_t* w, const GroupActivation& a, float* y) {
  using G = GroupBlock<F>;
  const __m512i low_mask = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(int8_t(0x80));
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* p = w + b * G::kBytes;
    prefetch_stream(w, next_prefetch, (b + 1) * G::kBytes);
    const int32_t* pairs = a.wide.pairs.data() + b * 4 * 16;
    const uint8_t* runs = p + 8 * G::kHeader;
    __m512i dot = _mm512_setzero_si512();
    if constexpr (G::kNibbles) {
      __m512i fifth = _mm512_setzero_si512();
      if constexpr (G::kFifth) fifth = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * (G::kHeader - 4))));
      #pragma GCC unroll 2
      for (int c = 0; c < 4; c += 2) {
        const __m512i v = _mm512_loadu_si512(runs + 32 * c);
        __m512i low = _mm512_and_si512(v, low_mask), high = _mm512_and_si512(_mm512_srli_epi16(v, 4), low_mask);
        if constexpr (G::kFifth) {
          low = _mm512_or_si512(low, fifth_bits_of_run_pair(fifth, 4 * c));
          high = _mm512_or_si512(high, fifth_bits_of_run_pair(fifth, 16 + 4 * c));
        }
        dot = _mm512_dpbusd_epi32(dot, low, _mm512_loadu_si512(pairs + 16 * (c / 2)));
        dot = _mm512_dpbusd_epi32(dot, high, _mm512_loadu_si512(pairs + 16 * (2 + c / 2)));
      }
    } else {
      #pragma GCC unroll 4
      for (int c = 0; c < 8; c += 2)
        dot = _mm512_dpbusd_epi32(dot, _mm512_xor_si512(_mm512_loadu_si512(runs + 32 * c), flip),
                                  _mm512_loadu_si512(pairs + 16 * (c / 2)));
    }
    __m256i dot8 = _mm256_add_epi32(_mm512_castsi512_si256(dot), _mm512_extracti64x4_epi64(dot, 1));
    if constexpr (wide_offset<F>() != 0) dot8 = _mm256_sub_epi32(dot8, _mm256_set1_epi32(a.offsets[size_t(b)]));
    block_end<F>(p, a, b, dot8, b % 2 ? odd : even);
  }
  _mm256_storeu_ps(y, _mm256_add_ps(even, odd));
}

// The activation for format F's group kernels (`wide`: the AVX-512 VNNI one) from the q8_0 row xq.
template <BlockFormat F>
void build_group_activation(const uint8_t* xq, int64_t k, bool wide, GroupActivation& a) {
  using G = GroupBlock<F>;
  a.xq = xq;
  a.blocks = k / 32;
  const int32_t offset = wide ? wide_offset<F>() : G::kOffset;
  a.scales.resize(size_t(a.blocks));
  a.offsets.resize(offset ? size_t(a.blocks) : 0);
  a.level_sums.resize(G::kMin ? size_t(a.blocks) : 0);
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* block = a.xq + b * kQ8Bytes;
    a.scales[size_t(b)] = avx2::f16_at(block);
    if (offset != 0 || G::kMin) {
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += int8_t(block[2 + j]);
      if (offset != 0) a.offsets[size_t(b)] = offset * sum;
      if constexpr (G::kMin) a.level_sums[size_t(b)] = a.scales[size_t(b)] * float(sum);
    }
  }
  if (wide) widen_activation(a.xq, a.blocks, kQ8Bytes, 2, 4, a.wide);
}

template <BlockFormat F>
GemvRowRange prepared_groups(const void* xq, int64_t k, bool wide) {
  using G = GroupBlock<F>;
  const uint64_t product = next_product_id();
  const auto* x = static_cast<const uint8_t*>(xq);
  // Captured by value (std::function allocates one block for them a product); read through a
  // pointer to this thread's thread_local instead they measured slower (docs/benchmarks.md).
  return [product, x, k, wide](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    const GroupActivation& a =
        thread_copy<GroupActivation>(product, [&](GroupActivation& built) { build_group_activation<F>(x, k, wide, built); });
    void (*const dot)(const uint8_t*, const GroupActivation&, float*) = wide ? group_dot_wide<F> : group_dot<F>;
    const int64_t group_bytes = a.blocks * G::kBytes;
    for (int64_t r = r0; r < r1; r += 8) dot(w + (r / 8) * group_bytes, a, y + r);
  };
}

// bytes_of_each_dword's vpshufb control for one 128-bit lane (both widths repeat it per lane): int16
// 2i takes byte j0 of dword i, int16 2i + 1 byte j1, each in its low byte (the top one zero) or, where
// `is_signed`, in its top byte (the low one zero) for an arithmetic shift down.
inline __m128i dword_byte_control(int j0, int j1, bool is_signed) {
  const int shift = is_signed ? 8 : 0;
  const uint32_t pick_pair = uint32_t(j1) << (16 + shift) | 0x80u << (24 - shift) | uint32_t(j0) << shift | 0x80u << (8 - shift);
  const uint32_t step = 0x00040004u << shift;  // each dword's bytes: + 4 per dword of the lane
  return _mm_add_epi8(_mm_set1_epi32(int32_t(pick_pair)),
                      _mm_setr_epi32(0, int32_t(step), int32_t(2 * step), int32_t(3 * step)));
}

// Int16 lanes 2i and 2i + 1 of the result: bytes j0 and j1 of v's dword i (< 4), for vpmaddwd
// against that row's two int16 pair sums or a pair of the activation's 16-value sums. Zero-extended
// (the 6-bit scales and minimums of q4_K / q5_K), or sign-extended (`kSigned`: q6_K's int8 scales,
// each byte put in an int16's top, then shifted down).
template <bool kSigned = false>
FOUNDRY_AVX2_TARGET inline __m256i bytes_of_each_dword(__m256i v, int j0, int j1) {
  const __m256i picked = _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(dword_byte_control(j0, j1, kSigned)));
  return kSigned ? _mm256_srai_epi16(picked, 8) : picked;
}

// The same for 16 dwords: the 8 rows' v (a group's scale word) in both halves.
template <bool kSigned = false>
FOUNDRY_VNNI_TARGET inline __m512i bytes_of_each_dword(__m512i v, int j0, int j1) {
  const __m512i picked = _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(dword_byte_control(j0, j1, kSigned)));
  return kSigned ? _mm512_srai_epi16(picked, 8) : picked;
}

// avx2::bits_at_four on 64 bytes.
FOUNDRY_VNNI_TARGET inline __m512i bits_at_four(__m512i bytes, int n, int width) {
  const __m512i moved = n < 4 ? _mm512_sll_epi16(bytes, _mm_cvtsi32_si128(4 - n)) : _mm512_srl_epi16(bytes, _mm_cvtsi32_si128(n - 4));
  return _mm512_and_si512(moved, _mm512_set1_epi8(int8_t(((1 << width) - 1) << 4)));
}

// A q4_K (kFifth false) or q5_K group's super-block: 8 x 16 header bytes (block_header: d, dmin,
// three scale words), then q5_K's qh in 8 runs, then the 128 nibble bytes in 32 runs.
template <bool kFifth>
struct KGroup {
  static constexpr int64_t kBytes = 8 * (kFifth ? detail::kQ5_KBytes : detail::kQ4_KBytes), kQh = 8 * 16,
                           kQs = kQh + (kFifth ? 8 * 32 : 0);
  // Runs summed in int16 before a vpmaddwd: 8 x 2 x 15 x 128 = 30720 (4-bit), 4 x 2 x 31 x 128 = 31744.
  static constexpr int kRunsPerSum = kFifth ? 4 : 8;
};

// A q6_K group's super-block (block_header's trailing fields first): 4 words of int8 scales (lane i:
// row i's scales 4w..4w + 3), the 8 d, then ql's 32 runs and qh's 16.
constexpr int64_t kQ6KGroupBytes = 8 * detail::kQ6_KBytes, kQ6KD = 128, kQ6KRuns = 144;

// The activation's levels 4j..4j + 3 of super-block yb against a 32-byte run (AVX2), or the widened
// pair of dwords 2m, 2m + 1 against two runs (AVX-512).
FOUNDRY_AVX2_TARGET inline __m256i levels_at(const uint8_t* yb, int j) { return _mm256_set1_epi32(avx2::dword_at(yb + 4 + 4 * j)); }
FOUNDRY_VNNI_TARGET inline __m512i levels_at(const int32_t* pairs, int m) { return _mm512_loadu_si512(pairs + 16 * m); }

// q4_K / q5_K's last steps of a super-block: the minimums against the activation's 16-value sums
// (sub-block j's are sums 2j and 2j + 1), and acc + dy (d isum - dmin min_dot).
FOUNDRY_AVX2_TARGET inline __m256 qK_superblock_end(const uint8_t* p, const uint8_t* yb, const avx2::KGroupFactors& f,
                                                      __m256i isum, __m256 acc) {
  __m256i min_dot = _mm256_setzero_si256();
  const uint8_t* bsums = yb + 4 + 256;
  #pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    min_dot = _mm256_add_epi32(min_dot, _mm256_madd_epi16(bytes_of_each_dword(f.mins[j / 4], j % 4, j % 4),
                                                           _mm256_set1_epi32(avx2::dword_at(bsums + 4 * j))));
  float dy;
  std::memcpy(&dy, yb, 4);
  const __m256 dys = _mm256_set1_ps(dy);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, dys), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_dot), _mm256_mul_ps(dmin, dys), acc);
}

// One super-block p of a q4_K or q5_K group against the q8_K super-block yb, added into acc: the 8
// rows' packed scales and minimums unpacked lane-wise (avx2::k_group_factors); each 32-value
// sub-block's vpmaddubsw pair sums added in int16 over its runs (q5_K: the fifth bit of each level
// from the qh run at the same positions) and multiplied by the rows' scales in a vpmaddwd; the
// minimums meet the activation's 16-value sums the same way.
template <bool kFifth>
FOUNDRY_AVX2_TARGET inline __m256 qK_superblock(const uint8_t* p, const uint8_t* yb, __m256 acc) {
  using G = KGroup<kFifth>;
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const avx2::KGroupFactors f = avx2::k_group_factors(p);
  __m256i isum = _mm256_setzero_si256();
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // payload chunk c: sub-block 2c in the low nibbles, 2c + 1 in the high
    const __m256i low_scales = bytes_of_each_dword(f.scales[c / 2], 2 * (c % 2), 2 * (c % 2));
    const __m256i high_scales = bytes_of_each_dword(f.scales[c / 2], 2 * (c % 2) + 1, 2 * (c % 2) + 1);
    for (int r0 = 0; r0 < 8; r0 += G::kRunsPerSum) {
      __m256i low_sums = _mm256_setzero_si256(), high_sums = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int r = r0; r < r0 + G::kRunsPerSum; ++r) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + G::kQs + 32 * (8 * c + r)));
        __m256i low = _mm256_and_si256(v, low_mask), high = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_mask);
        if constexpr (kFifth) {
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + G::kQh + 32 * r));
          low = _mm256_or_si256(low, avx2::bits_at_four(qh, 2 * c, 1));
          high = _mm256_or_si256(high, avx2::bits_at_four(qh, 2 * c + 1, 1));
        }
        low_sums = _mm256_add_epi16(low_sums, _mm256_maddubs_epi16(low, levels_at(yb, 16 * c + r)));
        high_sums = _mm256_add_epi16(high_sums, _mm256_maddubs_epi16(high, levels_at(yb, 16 * c + 8 + r)));
      }
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(low_sums, low_scales));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(high_sums, high_scales));
    }
  }
  return qK_superblock_end(p, yb, f, isum, acc);
}

// The same on AVX-512: runs r and r + 1 a vector against the widened activation (`pairs`), the
// scales in both halves, the halves' sums added before the minimums (the same int32 sums).
template <bool kFifth>
FOUNDRY_VNNI_TARGET inline __m256 qK_superblock_wide(const uint8_t* p, const int32_t* pairs, const uint8_t* yb, __m256 acc) {
  using G = KGroup<kFifth>;
  constexpr int kRunsPerSum = std::min(8, 2 * G::kRunsPerSum);  // each lane takes every other run
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const avx2::KGroupFactors f = avx2::k_group_factors(p);
  __m512i isum = _mm512_setzero_si512();
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i scales = _mm512_broadcast_i64x4(f.scales[c / 2]);
    const __m512i low_scales = bytes_of_each_dword(scales, 2 * (c % 2), 2 * (c % 2));
    const __m512i high_scales = bytes_of_each_dword(scales, 2 * (c % 2) + 1, 2 * (c % 2) + 1);
    for (int r0 = 0; r0 < 8; r0 += kRunsPerSum) {
      __m512i low_sums = _mm512_setzero_si512(), high_sums = _mm512_setzero_si512();
      #pragma GCC unroll 4
      for (int r = r0; r < r0 + kRunsPerSum; r += 2) {
        const __m512i v = _mm512_loadu_si512(p + G::kQs + 32 * (8 * c + r));
        __m512i low = _mm512_and_si512(v, low_mask), high = _mm512_and_si512(_mm512_srli_epi16(v, 4), low_mask);
        if constexpr (kFifth) {
          const __m512i qh = _mm512_loadu_si512(p + G::kQh + 32 * r);
          low = _mm512_or_si512(low, bits_at_four(qh, 2 * c, 1));
          high = _mm512_or_si512(high, bits_at_four(qh, 2 * c + 1, 1));
        }
        low_sums = _mm512_add_epi16(low_sums, _mm512_maddubs_epi16(low, levels_at(pairs, 8 * c + r / 2)));
        high_sums = _mm512_add_epi16(high_sums, _mm512_maddubs_epi16(high, levels_at(pairs, 8 * c + 4 + r / 2)));
      }
      isum = _mm512_add_epi32(isum, _mm512_madd_epi16(low_sums, low_scales));
      isum = _mm512_add_epi32(isum, _mm512_madd_epi16(high_sums, high_scales));
    }
  }
  return qK_superblock_end(p, yb, f, _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1)), acc);
}

// q6_K's last steps of a super-block: the 32 taken off each level through the activation's
// 16-value sums (sum_j scale_j x sum j: scales 2m and 2m + 1 a vpmaddwd), and acc + d dy isum.
FOUNDRY_AVX2_TARGET inline __m256 q6_K_superblock_end(const uint8_t* p, const uint8_t* yb, const __m256i (&words)[4],
                                                      __m256i isum, __m256 acc) {
  __m256i offset = _mm256_setzero_si256();
  const uint8_t* bsums = yb + 4 + 256;
  #pragma GCC unroll 8
  for (int m = 0; m < 8; ++m)
    offset = _mm256_add_epi32(offset, _mm256_madd_epi16(bytes_of_each_dword<true>(words[m / 2], 2 * (m % 2), 2 * (m % 2) + 1),
                                                        _mm256_set1_epi32(avx2::dword_at(bsums + 4 * m))));
  isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset, 5));
  float dy;
  std::memcpy(&dy, yb, 4);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQ6KD)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(dy)), acc);
}

FOUNDRY_AVX2_TARGET inline void q6_K_scale_words(const uint8_t* p, __m256i (&words)[4]) {
  for (int i = 0; i < 4; ++i) words[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p) + i);
}

// One super-block p of a q6_K group against the q8_K super-block yb, added into acc. Quarter q (32
// values) of half h takes its low 4 bits from nibble q / 2 of ql run 16h + 8(q % 2) + s and its top
// 2 from bits 2q, 2q + 1 of qh run 8h + s; each 16 values have their own int8 scale. Levels 0-63
// (the value is d scale (level - 32)): pair sums added in int16 two runs at a time (2 x 2 x 63 x 128
// = 32256), times the rows' scales in a vpmaddwd; the 32 is taken off once a super-block.
FOUNDRY_AVX2_TARGET inline __m256 q6_K_superblock(const uint8_t* p, const uint8_t* yb, __m256 acc) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m256i words[4];
  q6_K_scale_words(p, words);
  const auto* runs = reinterpret_cast<const __m256i*>(p + kQ6KRuns);
  __m256i isum = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h)
    #pragma GCC unroll 2
    for (int q = 0; q < 2; ++q) {  // quarters q (ql's low nibbles) and q + 2 (high)
      #pragma GCC unroll 4
      for (int s = 0; s < 8; s += 2) {
        __m256i low_sums = _mm256_setzero_si256(), high_sums = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int r = s; r < s + 2; ++r) {
          const __m256i ql = _mm256_loadu_si256(runs + 16 * h + 8 * q + r), qh = _mm256_loadu_si256(runs + 32 + 8 * h + r);
          const __m256i low = _mm256_or_si256(_mm256_and_si256(ql, low_mask), avx2::bits_at_four(qh, 2 * q, 2));
          const __m256i high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), low_mask),
                                               avx2::bits_at_four(qh, 2 * q + 4, 2));
          low_sums = _mm256_add_epi16(low_sums, _mm256_maddubs_epi16(low, levels_at(yb, 32 * h + 8 * q + r)));
          high_sums = _mm256_add_epi16(high_sums, _mm256_maddubs_epi16(high, levels_at(yb, 32 * h + 8 * (q + 2) + r)));
        }
        const int low_scale = 8 * h + 2 * q + s / 4, high_scale = low_scale + 4;  // 16 values a scale
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(low_sums, bytes_of_each_dword<true>(
                                                                      words[low_scale / 4], low_scale % 4, low_scale % 4)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(high_sums, bytes_of_each_dword<true>(
                                                                       words[high_scale / 4], high_scale % 4, high_scale % 4)));
      }
    }
  return q6_K_superblock_end(p, yb, words, isum, acc);
}

// The same on AVX-512: runs s and s + 1 a vector (one pair sum a lane: no int16 sums).
FOUNDRY_VNNI_TARGET inline __m256 q6_K_superblock_wide(const uint8_t* p, const int32_t* pairs, const uint8_t* yb, __m256 acc) {
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  __m256i words[4];
  q6_K_scale_words(p, words);
  const uint8_t* runs = p + kQ6KRuns;
  __m512i isum = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h)
    #pragma GCC unroll 2
    for (int q = 0; q < 2; ++q) {
      #pragma GCC unroll 4
      for (int s = 0; s < 8; s += 2) {
        const __m512i ql = _mm512_loadu_si512(runs + 32 * (16 * h + 8 * q + s));
        const __m512i qh = _mm512_loadu_si512(runs + 32 * (32 + 8 * h + s));
        const __m512i low = _mm512_or_si512(_mm512_and_si512(ql, low_mask), bits_at_four(qh, 2 * q, 2));
        const __m512i high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low_mask), bits_at_four(qh, 2 * q + 4, 2));
        const int low_scale = 8 * h + 2 * q + s / 4, high_scale = low_scale + 4;
        const __m512i low_words = _mm512_broadcast_i64x4(words[low_scale / 4]);
        const __m512i high_words = _mm512_broadcast_i64x4(words[high_scale / 4]);
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(low, levels_at(pairs, 16 * h + 4 * q + s / 2)),
                                                        bytes_of_each_dword<true>(low_words, low_scale % 4, low_scale % 4)));
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(high, levels_at(pairs, 16 * h + 4 * (q + 2) + s / 2)),
                                                        bytes_of_each_dword<true>(high_words, high_scale % 4, high_scale % 4)));
      }
    }
  return q6_K_superblock_end(p, yb, words, _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1)), acc);
}

// y[0..8) for the K-quant group at w (kGroupBytes a super-block) against the q8_K row xq, a
// super-block at a time (kSuperBlock), one stream prefetched ahead. The AVX-512 form's super-blocks
// also read the widened row (`pairs`, WideActivation); a target of its own, so two drivers.
template <auto kSuperBlock, int64_t kGroupBytes>
FOUNDRY_AVX2_TARGET void group_dot_K(const uint8_t* w, const uint8_t* xq, int64_t superblocks, float* y) {
  __m256 acc = _mm256_setzero_ps();
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < superblocks; ++b) {
    prefetch_stream(w, next_prefetch, (b + 1) * kGroupBytes);
    acc = kSuperBlock(w + b * kGroupBytes, xq + b * detail::kQ8_KBytes, acc);
  }
  _mm256_storeu_ps(y, acc);
}

template <auto kSuperBlock, int64_t kGroupBytes>
FOUNDRY_VNNI_TARGET void group_dot_K_wide(const uint8_t* w, const int32_t* pairs, const uint8_t* xq, int64_t superblocks,
                                            float* y) {
  __m256 acc = _mm256_setzero_ps();
  int64_t next_prefetch = 0;
  for (int64_t b = 0; b < superblocks; ++b) {
    prefetch_stream(w, next_prefetch, (b + 1) * kGroupBytes);
    acc = kSuperBlock(w + b * kGroupBytes, pairs + b * 32 * 16, xq + b * detail::kQ8_KBytes, acc);
  }
  _mm256_storeu_ps(y, acc);
}

// A K-quant's group kernel (kGroupBytes a super-block of 8 rows) against the q8_K row xq, whose
// super-block sums are already in it: kSuperBlock (AVX2), or where `vnni` kWideSuperBlock against
// the row widened once per product (this thread's WideActivation).
template <auto kSuperBlock, auto kWideSuperBlock, int64_t kGroupBytes>
GemvRowRange super_block_groups(bool vnni, const void* xq, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t superblocks = k / detail::kQK_K;
  if (!vnni)
    return [x, superblocks](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
      for (int64_t r = r0; r < r1; r += 8)
        group_dot_K<kSuperBlock, kGroupBytes>(w + (r / 8) * superblocks * kGroupBytes, x, superblocks, y + r);
    };
  // Widened on each thread that runs a chunk (next_product_id says why).
  const uint64_t product = next_product_id();
  return [x, product, superblocks](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    const WideActivation& a = thread_copy<WideActivation>(
        product, [&](WideActivation& built) { widen_activation(x, superblocks, detail::kQ8_KBytes, 4, 32, built); });
    for (int64_t r = r0; r < r1; r += 8)
      group_dot_K_wide<kWideSuperBlock, kGroupBytes>(w + (r / 8) * superblocks * kGroupBytes, a.pairs.data(), x,
                                                     superblocks, y + r);
  };
}

}  // namespace

GemvRowRange gemv_group_rows(bool vnni, BlockFormat format, const void* xq, int64_t k) {
  constexpr int64_t kQ4K = KGroup<false>::kBytes, kQ5K = KGroup<true>::kBytes;
  switch (format) {
    case BlockFormat::Q4_K: return super_block_groups<qK_superblock<false>, qK_superblock_wide<false>, kQ4K>(vnni, xq, k);
    case BlockFormat::Q5_K: return super_block_groups<qK_superblock<true>, qK_superblock_wide<true>, kQ5K>(vnni, xq, k);
    case BlockFormat::Q6_K:
      return super_block_groups<q6_K_superblock, q6_K_superblock_wide, kQ6KGroupBytes>(vnni, xq, k);
    default: break;
  }
  return with_byte_block_format(format, [&]<BlockFormat F>() { return prepared_groups<F>(xq, k, vnni); });
}

#else

GemvRowRange gemv_group_rows(bool, BlockFormat, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

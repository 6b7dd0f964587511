// Prefill's products of block-format weights (ggml's layouts: q4_0, q4_1, q5_0, q5_1, q8_0, q4_K,
// q5_K, q6_K) with q8_0 / q8_K activation rows as integer dot products on x86: AVX-512 VNNI
// (vpdpbusd, 64 u8 x s8 products into 16 int32 lanes) where present, else AVX2 (vpmaddubsw into
// int16 pairs, vpmaddwd into int32).
//
// A panel of weight rows (16 for VNNI, 8 for AVX2: one int32 lane per row) is unpacked once into
// a scratch buffer in which each vector holds four consecutive levels of every row of the panel,
// so one instruction multiplies those four levels of all its rows by the same four activation
// levels, broadcast from memory. A 32-value block's eight such vectors stay in registers while
// they meet a tile of activation rows (16 for VNNI, 4 or 8 for AVX2); each (row, activation row) pair's
// block sum is exact in int32 and goes into a float accumulator times the block's two scales
// (q4_K: the row's d x its 6-bit sub-block scale, and the activation super-block's), as decode's
// kernels do per block. q4_K's minimum enters as one more float term per sub-block: the row's
// -dmin x its 6-bit min times the activation sub-block's scaled level sum (q8_K's bsums).
//
// Unsigned-by-signed products need one unsigned side: the weights are made unsigned by an offset
// (q4_0's nibbles already are level + 8; a q8_0 level gets + 128 on VNNI) and the offset times the
// activation block's level sum is taken off before the scales (q4_K's nibbles are unsigned levels
// already). AVX2 sums a block's 4-bit pairs in int16 (8 x 2 x 15 x 128 fits), 5-bit pairs four
// steps at a time and 6-bit pairs two, but q8_0's offset products would not fit an int16 pair, so
// its AVX2 q8_0 kernel multiplies |w| by the activation carrying w's sign instead.
// The other formats are unpacked a block of a row at a time into 32 unsigned levels (block_levels)
// and transposed as q8_0's bytes are: q4_1 / q5_1's minimum and q5_K's as q4_K's (a float term
// against the activation block's scaled level sum), q5_0's offset of 16 as q4_0's, and q6_K's two
// int8 sub-block scales a block as two halves, each with its own int32 sum, float scale and the
// offset of 32 as a minimum (-32 x d x scale) against the activation half's sum (q8_K's bsums).
//
// On CPUs with AMX-INT8 one tile instruction does a block's work for 16 activation rows and a
// panel's 16 weight rows (see tile_amx); the panels and the float work are the VNNI kernel's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "kernels/cpu/scratch.h"
#include "quant/formats_internal.h"
#include "quant/q8_kernels.h"
#include "quant/vnni_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cpuid.h>
#include <pthread.h>
#include <setjmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include "quant/avx2_inline.h"
#define FOUNDRY_BLOCK_GEMM_X86 1
#define FOUNDRY_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
// The AMX kernel's functions, the VNNI kernel's features and the tiles': one target, so that the
// tile operations inline into the kernel (a call across targets spilled its 16 accumulators). A
// function of this target runs on a CPU without tiles as long as it reaches no tile instruction
// (the emulated kernel).
#define FOUNDRY_AMX_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma,amx-tile,amx-int8")))
#else
#define FOUNDRY_BLOCK_GEMM_X86 0
#endif

namespace foundry::quant {

#if FOUNDRY_BLOCK_GEMM_X86

namespace {

constexpr int64_t kQ8Bytes = 34, kQ4Bytes = 18;
constexpr int kStepsPerBlock = 8;  // 4 levels per int32 lane and step: 32 levels a block
constexpr int kSubBlocks = int(detail::kQK_K / 32);

using avx2::dword_at;
using avx2::f16_at;

enum class Weights { Q4_0, Q8_0Offset, Q8_0Magnitude, Q4_K, Q4_1, Q5_0, Q5_1, Q5_K, Q6_K };

// A kind with this bit set: the same weights in WeightLayout::Groups8 (their panels come from the
// groups; block_gemm's other code reads the kind without it).
constexpr int kGroupsBit = 0x100;
Weights in_groups(Weights kind, bool grouped) { return grouped ? Weights(int(kind) | kGroupsBit) : kind; }
bool grouped(Weights kind) { return (int(kind) & kGroupsBit) != 0; }
Weights in_rows(Weights kind) { return Weights(int(kind) & ~kGroupsBit); }

// The formats packed through block_levels.
bool unpacked_by_blocks(Weights kind) {
  return kind == Weights::Q4_1 || kind == Weights::Q5_0 || kind == Weights::Q5_1 || kind == Weights::Q5_K ||
         kind == Weights::Q6_K;
}

// The activation rows as the kernels read them: levels [m, k] one after another, and per row and
// 32-value block its scale, the int32 sum's start (the weight offset times the block's level sum,
// negated) and, for q4_K, the scale times the level sum (the minimum's term).
// From the caching allocator: fresh vectors of a prefill's size were page-faulted in and
// zero-filled at every product.
struct Activations {
  kernels::ScratchArray<int8_t> levels;
  kernels::ScratchArray<float> scale, level_sum;  // level_sum: `halves` a block (q6_K's sub-blocks of 16: 2)
  kernels::ScratchArray<int32_t> start;
  int halves = 1;
};

// Activation rows the levels are kept for: whole tiles of 16, the rows past m zero (the AMX kernel
// loads 16 rows a tile).
int64_t padded_rows(int64_t m) { return (m + 15) / 16 * 16; }

void zero_padding(Activations& a, int64_t m, int64_t k) {
  std::memset(a.levels.data() + m * k, 0, size_t((padded_rows(m) - m) * k));
}

// Blocks of activations a chunk of the threads' unpacking takes: the unpacking ran on the calling
// thread alone and was 4 % of a 2-thread prefill (q8_0, AVX2), time the other thread sat idle.
constexpr int64_t kBlocksPerChunk = 256;

// q8_0: the weights' offset times the block's level sum as the int32 sum's start; with `sums` (a
// weight format with a minimum) also the scaled level sum.
Activations activations_q8_0(const uint8_t* xq, int64_t m, int64_t k, int32_t offset, bool sums) {
  const int64_t blocks = k / 32;
  Activations a;
  a.levels = kernels::ScratchArray<int8_t>(size_t(padded_rows(m) * k));
  zero_padding(a, m, k);
  a.scale = kernels::ScratchArray<float>(size_t(m * blocks));
  a.start = kernels::ScratchArray<int32_t>(size_t(m * blocks));
  if (sums) a.level_sum = kernels::ScratchArray<float>(size_t(m * blocks));
  parallel_for(0, m * blocks, kBlocksPerChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t* block = xq + i * kQ8Bytes;
      a.scale[size_t(i)] = f16_at(block);
      int8_t* levels = a.levels.data() + i * 32;
      std::memcpy(levels, block + 2, 32);
      int32_t sum = 0;
      if (offset != 0 || sums)
        for (int j = 0; j < 32; ++j) sum += levels[j];
      a.start[size_t(i)] = -offset * sum;
      if (sums) a.level_sum[size_t(i)] = a.scale[size_t(i)] * float(sum);
    }
  });
  return a;
}

// q8_K: a float scale per 256 values, the levels, then 16 int16 sums of 16 levels each (a block's
// two summed, or with halves = 2 each scaled on its own).
Activations activations_q8_K(const uint8_t* xq, int64_t m, int64_t k, int halves) {
  const int64_t superblocks = k / detail::kQK_K, blocks = k / 32;
  Activations a;
  a.halves = halves;
  a.levels = kernels::ScratchArray<int8_t>(size_t(padded_rows(m) * k));
  zero_padding(a, m, k);
  a.scale = kernels::ScratchArray<float>(size_t(m * blocks));
  a.level_sum = kernels::ScratchArray<float>(size_t(m * blocks * halves));
  a.start = kernels::ScratchArray<int32_t>(size_t(m * blocks));
  parallel_for(0, m * superblocks, kBlocksPerChunk / kSubBlocks, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t* block = xq + i * detail::kQ8_KBytes;
      float d;
      std::memcpy(&d, block, 4);
      std::memcpy(a.levels.data() + i * detail::kQK_K, block + 4, size_t(detail::kQK_K));
      int16_t sums[16];
      std::memcpy(sums, block + 4 + detail::kQK_K, sizeof(sums));
      for (int j = 0; j < kSubBlocks; ++j) {
        a.scale[size_t(i * kSubBlocks + j)] = d;
        a.start[size_t(i * kSubBlocks + j)] = 0;
        float* level_sum = a.level_sum.data() + (i * kSubBlocks + j) * halves;
        if (halves == 1) {
          level_sum[0] = d * float(sums[2 * j] + sums[2 * j + 1]);
        } else {
          level_sum[0] = d * float(sums[2 * j]);
          level_sum[1] = d * float(sums[2 * j + 1]);
        }
      }
    }
  });
  return a;
}

// A panel of Lanes weight rows: per 32-value block kStepsPerBlock vectors of levels, vector s
// holding levels 4s..4s+3 of every row (lane i = row i), and per block (q6_K: per half block) and
// row its float scale and (formats with a minimum) its minimum's factor, at ((block x halves +
// half) x Lanes + row); `signs` holds AVX2 q8_0's signed levels beside their magnitudes.
struct Panel {
  std::vector<uint8_t> levels, signs;
  std::vector<float> scales, mins;
};

// The panel's rows: row i at rows[i], a missing row (i >= n) reading row 0 (its scales are 0).
template <int Lanes>
void panel_rows(const uint8_t* w, int64_t row_bytes, int64_t n, const uint8_t* (&rows)[Lanes]) {
  for (int i = 0; i < Lanes; ++i) rows[i] = w + (i < n ? i : 0) * row_bytes;
}

// A q4_K super-block's scale and minimum factors per sub-block for panel row i (0 for a missing row).
template <int Lanes>
void q4_K_factors(const uint8_t* superblock, int i, bool present, int64_t first_block, Panel& p) {
  const float d = present ? f16_at(superblock) : 0.f, dmin = present ? f16_at(superblock + 2) : 0.f;
  for (int j = 0; j < kSubBlocks; ++j) {
    uint8_t sc, mn;
    detail::get_scale_min_k4(j, superblock + 4, sc, mn);
    p.scales[size_t((first_block + j) * Lanes + i)] = d * float(sc);
    p.mins[size_t((first_block + j) * Lanes + i)] = -dmin * float(mn);
  }
}

// 4 x 4 dwords transposed within each 128-bit lane: o[s] lane l dword j = z[j] lane l dword s.
FOUNDRY_VNNI_TARGET inline void transpose4(const __m512i (&z)[4], __m512i (&o)[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  o[0] = _mm512_unpacklo_epi64(t0, t2);
  o[1] = _mm512_unpackhi_epi64(t0, t2);
  o[2] = _mm512_unpacklo_epi64(t1, t3);
  o[3] = _mm512_unpackhi_epi64(t1, t3);
}

FOUNDRY_AVX2_TARGET inline void transpose4(const __m256i (&z)[4], __m256i (&o)[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  o[0] = _mm256_unpacklo_epi64(t0, t2);
  o[1] = _mm256_unpackhi_epi64(t0, t2);
  o[2] = _mm256_unpacklo_epi64(t1, t3);
  o[3] = _mm256_unpackhi_epi64(t1, t3);
}

// 16 bytes at each of 16 rows as 4 vectors, o[s] lane i = row i's dword s: z[j]'s lane l holds
// row j + 4l, so the transpose puts row j + 4l in lane 4l + j.
FOUNDRY_VNNI_TARGET inline void rows16_bytes16(const uint8_t* const (&q)[16], __m512i (&o)[4]) {
  __m512i z[4];
  const auto row = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[i])); };
  for (int j = 0; j < 4; ++j) {  // the lane numbers spelled out: clang wants them constant
    z[j] = _mm512_castsi128_si512(row(j));
    z[j] = _mm512_inserti32x4(z[j], row(j + 4), 1);
    z[j] = _mm512_inserti32x4(z[j], row(j + 8), 2);
    z[j] = _mm512_inserti32x4(z[j], row(j + 12), 3);
  }
  transpose4(z, o);
}

// 32 bytes at each of 16 rows as 8 vectors: z[i] = rows i and i + 8; within each 256-bit half the
// 4 x 4 transposes of rows 0-3 and 4-7 give dwords s and s + 4, which a two-source permute puts
// in row order.
FOUNDRY_VNNI_TARGET inline void rows16_bytes32(const uint8_t* const (&q)[16], __m512i (&o)[8]) {
  __m512i z[8];
  for (int i = 0; i < 8; ++i)
    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i]))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i + 8])), 1);
  __m512i low[4], high[4];
  transpose4({z[0], z[1], z[2], z[3]}, low);
  transpose4({z[4], z[5], z[6], z[7]}, high);
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int s = 0; s < 4; ++s) {
    o[s] = _mm512_permutex2var_epi64(low[s], first, high[s]);
    o[s + 4] = _mm512_permutex2var_epi64(low[s], second, high[s]);
  }
}

// The same for 8 rows in 256-bit vectors.
FOUNDRY_AVX2_TARGET inline void rows8_bytes16(const uint8_t* const (&q)[8], __m256i (&o)[4]) {
  __m256i z[4];
  for (int j = 0; j < 4; ++j)
    z[j] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q[j]))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[j + 4])), 1);
  transpose4(z, o);
}

FOUNDRY_AVX2_TARGET inline void rows8_bytes32(const uint8_t* const (&q)[8], __m256i (&o)[8]) {
  __m256i z[8], low[4], high[4];
  for (int i = 0; i < 8; ++i) z[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i]));
  transpose4({z[0], z[1], z[2], z[3]}, low);
  transpose4({z[4], z[5], z[6], z[7]}, high);
  for (int s = 0; s < 4; ++s) {
    o[s] = _mm256_permute2x128_si256(low[s], high[s], 0x20);
    o[s + 4] = _mm256_permute2x128_si256(low[s], high[s], 0x31);
  }
}

int64_t weight_row_bytes(Weights kind, int64_t k) {
  switch (in_rows(kind)) {
    case Weights::Q4_K: return k / detail::kQK_K * detail::kQ4_KBytes;
    case Weights::Q5_K: return k / detail::kQK_K * detail::kQ5_KBytes;
    case Weights::Q6_K: return k / detail::kQK_K * detail::kQ6_KBytes;
    case Weights::Q4_0: return k / 32 * kQ4Bytes;
    case Weights::Q4_1: return k / 32 * 20;
    case Weights::Q5_0: return k / 32 * 22;
    case Weights::Q5_1: return k / 32 * 24;
    case Weights::Q8_0Offset:
    case Weights::Q8_0Magnitude: return k / 32 * kQ8Bytes;
  }
  return 0;
}

// Block b (32 values) of a weight row of a block_levels format: its unsigned levels and, per half
// (q6_K) or for the whole block, the float scale of the levels and the minimum's factor.
struct BlockLevels {
  uint8_t level[32];
  float scale[2], min[2];
};

// q5_0 / q5_1: level j's fifth bit is bit j of qh.
inline void five_bit_levels(const uint8_t* qs, uint32_t qh, uint8_t* level) {
  for (int j = 0; j < 16; ++j) {
    level[j] = uint8_t((qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
    level[j + 16] = uint8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

FOUNDRY_AVX2_TARGET void block_levels(Weights kind, const uint8_t* row, int64_t b, BlockLevels& out) {
  out.min[0] = out.min[1] = 0.f;
  switch (kind) {
    case Weights::Q4_1: {  // d, m, 16 bytes of nibbles: level j low, j + 16 high
      const uint8_t* p = row + b * 20;
      out.scale[0] = f16_at(p);
      out.min[0] = f16_at(p + 2);
      for (int j = 0; j < 16; ++j) {
        out.level[j] = p[4 + j] & 0x0F;
        out.level[j + 16] = p[4 + j] >> 4;
      }
      return;
    }
    case Weights::Q5_0: {  // d, qh, nibbles; value d x (level - 16), the 16 taken off by the start
      const uint8_t* p = row + b * 22;
      out.scale[0] = f16_at(p);
      five_bit_levels(p + 6, uint32_t(dword_at(p + 2)), out.level);
      return;
    }
    case Weights::Q5_1: {  // d, m, qh, nibbles
      const uint8_t* p = row + b * 24;
      out.scale[0] = f16_at(p);
      out.min[0] = f16_at(p + 2);
      five_bit_levels(p + 8, uint32_t(dword_at(p + 4)), out.level);
      return;
    }
    case Weights::Q5_K: {  // d, dmin, 12 bytes of scales and mins, qh[32], qs[128]
      const int64_t j = b % kSubBlocks;
      const uint8_t* p = row + b / kSubBlocks * detail::kQ5_KBytes;
      uint8_t sc, mn;
      detail::get_scale_min_k4(int(j), p + 4, sc, mn);
      out.scale[0] = f16_at(p) * float(sc);
      out.min[0] = -f16_at(p + 2) * float(mn);
      const uint8_t* qh = p + 16;
      const uint8_t* ql = p + 48 + 32 * (j / 2);  // sub-block 2c in the low nibbles, 2c + 1 in the high
      const int shift = int(j % 2) * 4;
      for (int l = 0; l < 32; ++l) out.level[l] = uint8_t(((ql[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4));
      return;
    }
    case Weights::Q6_K: {  // ql[128], qh[64], int8 scales[16], d; value d x scale x (level - 32)
      const int64_t j = b % kSubBlocks, half = j / 4, quarter = j % 4;
      const uint8_t* p = row + b / kSubBlocks * detail::kQ6_KBytes;
      const uint8_t* ql = p + 64 * half + 32 * (quarter % 2);
      const uint8_t* qh = p + 128 + 32 * half;
      const int low_shift = int(quarter / 2) * 4, high_shift = int(quarter) * 2;
      for (int l = 0; l < 32; ++l)
        out.level[l] = uint8_t(((ql[l] >> low_shift) & 0x0F) | (((qh[l] >> high_shift) & 3) << 4));
      const float d = f16_at(p + 208);
      for (int h = 0; h < 2; ++h) {
        const float scale = d * float(int8_t(p[192 + 2 * j + h]));
        out.scale[h] = scale;
        out.min[h] = -32.f * scale;
      }
      return;
    }
    default: FOUNDRY_CHECK(false, "block_levels: not a block_levels format");
  }
}

int halves_of(Weights kind) { return kind == Weights::Q6_K ? 2 : 1; }

// A panel of a block_levels format: each block's rows of levels unpacked, then transposed into the
// step vectors (one int32 lane a row, 4 bytes a lane) as q8_0's bytes are.
template <int Lanes>
void pack_panel_by_blocks(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, Panel& p,
                          void (*transpose)(const uint8_t* const (&)[Lanes], uint8_t*)) {
  const int64_t blocks = k / 32, block_bytes = kStepsPerBlock * Lanes * 4;
  const int halves = halves_of(kind);
  p.levels.resize(size_t(blocks * block_bytes));
  p.scales.resize(size_t(blocks * halves * Lanes));
  p.mins.resize(p.scales.size());
  const uint8_t* rows[Lanes];
  panel_rows<Lanes>(w, row_bytes, n, rows);
  BlockLevels unpacked[Lanes];
  const uint8_t* q[Lanes];
  for (int i = 0; i < Lanes; ++i) q[i] = unpacked[i].level;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < Lanes; ++i) {
      block_levels(kind, rows[i], b, unpacked[i]);
      for (int h = 0; h < halves; ++h) {
        const size_t at = size_t((b * halves + h) * Lanes + i);
        p.scales[at] = i < n ? unpacked[i].scale[h] : 0.f;
        p.mins[at] = i < n ? unpacked[i].min[h] : 0.f;
      }
    }
    transpose(q, p.levels.data() + b * block_bytes);
  }
}

FOUNDRY_VNNI_TARGET void transpose_rows16(const uint8_t* const (&q)[16], uint8_t* out) {
  __m512i o[8];
  rows16_bytes32(q, o);
  for (int s = 0; s < 8; ++s) _mm512_storeu_si512(out + 64 * s, o[s]);
}

FOUNDRY_AVX2_TARGET void transpose_rows8(const uint8_t* const (&q)[8], uint8_t* out) {
  __m256i o[8];
  rows8_bytes32(q, o);
  for (int s = 0; s < 8; ++s) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * s), o[s]);
}

// Panels from WeightLayout::Groups8: a group's runs of a block are the step vectors (lane i = row
// i, 4 bytes a lane) as they lie. The nibble formats' run s gives steps s (low nibbles: levels
// 4s..) and s + 4 (high: 16 + 4s..), the q5 kinds' fifth bits added from the rows' masks; q8_0's
// as the row layout's panels hold them (VNNI: levels + 128; AVX2: magnitudes and the signed
// levels). Scales (and q4_1 / q5_1's minimums) are the header's 8 halves, converted at once.
BlockHeader group_header(Weights kind) {
  switch (in_rows(kind)) {
    case Weights::Q4_0: return block_header(BlockFormat::Q4_0);
    case Weights::Q4_1: return block_header(BlockFormat::Q4_1);
    case Weights::Q5_0: return block_header(BlockFormat::Q5_0);
    case Weights::Q5_1: return block_header(BlockFormat::Q5_1);
    default: return block_header(BlockFormat::Q8_0);
  }
}

FOUNDRY_AVX2_TARGET inline __m256 group_halves(const uint8_t* at) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
}

// All bits set in float lanes [0, n) (n may be below 0 or above 8): a group's rows that exist.
FOUNDRY_AVX2_TARGET inline __m256 first_lanes(int64_t n) {
  const int32_t count = int32_t(std::clamp<int64_t>(n, 0, 8));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

// A q4_K or q5_K group's super-block (8 rows): the rows' factors (d x scale, -dmin x minimum per sub-block)
// into panel rows [lane0, lane0 + 8) at once, for the first `present` rows (the others' 0).
template <int Lanes>
FOUNDRY_AVX2_TARGET void k_group_factors(const uint8_t* group_superblock, int lane0, int64_t present, int64_t first,
                                            Panel& p) {
  const __m256 kept = first_lanes(present);
  const __m256 d = _mm256_and_ps(group_halves(group_superblock), kept);
  const __m256 minus_dmin = _mm256_and_ps(_mm256_sub_ps(_mm256_setzero_ps(), group_halves(group_superblock + 16)), kept);
  const avx2::KGroupFactors f = avx2::k_group_factors(group_superblock);
  const __m256i byte = _mm256_set1_epi32(0xFF);
  for (int j = 0; j < kSubBlocks; ++j) {
    const __m128i shift = _mm_cvtsi32_si128(8 * (j % 4));
    const __m256 scale = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(f.scales[j / 4], shift), byte));
    const __m256 min = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(f.mins[j / 4], shift), byte));
    _mm256_storeu_ps(p.scales.data() + (first + j) * Lanes + lane0, _mm256_mul_ps(d, scale));
    _mm256_storeu_ps(p.mins.data() + (first + j) * Lanes + lane0, _mm256_mul_ps(minus_dmin, min));
  }
}

// Step s of sub-block j of a q4_K or q5_K group's super-block: nibble j % 2 of run 8(j / 2) + s, which
// holds the rows' chunk-(j / 2) bytes 4s..4s + 3 (the row layout's panels gather them with a
// transpose); q5_K's fifth bits from its qh run s, bit j.
FOUNDRY_AVX2_TARGET inline __m256i k_group_step(const uint8_t* group_superblock, bool fifth, int j, int s) {
  const uint8_t* qh = group_superblock + 8 * 16;
  const uint8_t* qs = qh + (fifth ? 8 * 32 : 0);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (kStepsPerBlock * (j / 2) + s)));
  __m256i levels = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
  if (fifth)
    levels = _mm256_or_si256(levels, avx2::bits_at_four(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * s)), j, 1));
  return levels;
}

// A q6_K group's super-block (row_groups.cpp: four words of int8 scales for the 8 rows, their 8 d,
// then ql's 32 runs and qh's 16): the rows' factors for each 16 values (d x scale, and -32 times
// that for the level offset) into panel rows [lane0, lane0 + 8), for the first `present` rows.
template <int Lanes>
FOUNDRY_AVX2_TARGET void q6_K_group_factors(const uint8_t* group_superblock, int lane0, int64_t present, int64_t first,
                                            Panel& p) {
  const __m256 kept = first_lanes(present);
  const __m256 d = _mm256_and_ps(group_halves(group_superblock + 128), kept);
  const auto* words = reinterpret_cast<const __m256i*>(group_superblock);
  for (int j = 0; j < 2 * kSubBlocks; ++j) {
    const __m256i word = _mm256_loadu_si256(words + j / 4);
    const __m256i scale = _mm256_srai_epi32(_mm256_sll_epi32(word, _mm_cvtsi32_si128(24 - 8 * (j % 4))), 24);
    const __m256 factor = _mm256_mul_ps(d, _mm256_cvtepi32_ps(scale));
    _mm256_storeu_ps(p.scales.data() + (first + j) * Lanes + lane0, factor);
    _mm256_storeu_ps(p.mins.data() + (first + j) * Lanes + lane0, _mm256_mul_ps(_mm256_set1_ps(-32.f), factor));
  }
}

// Step s of sub-block j = 4h + q (quarter q of half h) of a q6_K group's super-block: ql's nibble
// q / 2 of run 16h + 8(q % 2) + s, with qh run 8h + s's bits 2q, 2q + 1 above it.
FOUNDRY_AVX2_TARGET inline __m256i q6_K_group_step(const uint8_t* group_superblock, int j, int s) {
  const int h = j / 4, q = j % 4;
  const auto* runs = reinterpret_cast<const __m256i*>(group_superblock + 144);
  const __m256i ql = _mm256_loadu_si256(runs + 16 * h + 8 * (q % 2) + s), qh = _mm256_loadu_si256(runs + 32 + 8 * h + s);
  const __m256i nibble = _mm256_and_si256(q < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
  return _mm256_or_si256(nibble, avx2::bits_at_four(qh, 2 * q, 2));
}

// Step s of a group's block: the levels 4s..4s + 3 of each row (the nibble formats), or q8_0's run s.
FOUNDRY_AVX2_TARGET inline __m256i group_step(const uint8_t* block, const BlockHeader& h, int s) {
  const auto* runs = reinterpret_cast<const __m256i*>(block + 8 * h.bytes);
  if (!h.nibbles) return _mm256_loadu_si256(runs + s);
  const __m256i v = _mm256_loadu_si256(runs + s % 4), low_mask = _mm256_set1_epi8(0x0F);
  __m256i levels = _mm256_and_si256(s < 4 ? v : _mm256_srli_epi16(v, 4), low_mask);
  if (h.fifth) {
    const __m256i masks = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 8 * (h.bytes - 4)));
    levels = _mm256_or_si256(levels, avx2::fifth_bits(masks, s < 4 ? 4 * s : 16 + 4 * (s - 4)));
  }
  return levels;
}

// A panel of Lanes (8: AVX2; 16: VNNI, two groups side by side) rows of a K-quant in groups: each
// super-block's factors and each 32-value sub-block's 8 steps, group g's rows in bytes 32g.. of a
// step (n = 8 in a 16-row panel: the second half reads the first group, factors 0).
template <int Lanes>
FOUNDRY_AVX2_TARGET void pack_k_groups(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, Panel& p) {
  const bool q6 = in_rows(kind) == Weights::Q6_K, fifth = in_rows(kind) == Weights::Q5_K;
  const int64_t superblocks = k / detail::kQK_K, group_superblock = 8 * row_bytes / superblocks;
  const int halves = q6 ? 2 : 1;
  p.levels.resize(size_t(superblocks * kSubBlocks * kStepsPerBlock * Lanes * 4));
  p.scales.resize(size_t(superblocks * kSubBlocks * halves * Lanes));
  p.mins.resize(p.scales.size());
  for (int64_t sb = 0; sb < superblocks; ++sb)
    for (int g = 0; g < Lanes / 8; ++g) {
      const uint8_t* group = (n > 8 * g ? w + 8 * g * row_bytes : w) + sb * group_superblock;
      const int64_t present = std::min<int64_t>(n - 8 * g, 8);
      if (q6) q6_K_group_factors<Lanes>(group, 8 * g, present, sb * kSubBlocks * 2, p);
      else k_group_factors<Lanes>(group, 8 * g, present, sb * kSubBlocks, p);
      for (int j = 0; j < kSubBlocks; ++j)
        for (int s = 0; s < kStepsPerBlock; ++s) {
          uint8_t* step = p.levels.data() + ((sb * kSubBlocks + j) * kStepsPerBlock + s) * Lanes * 4 + 32 * g;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(step),
                              q6 ? q6_K_group_step(group, j, s) : k_group_step(group, fifth, j, s));
        }
    }
}

bool k_quant(Weights kind) {
  return in_rows(kind) == Weights::Q4_K || in_rows(kind) == Weights::Q5_K || in_rows(kind) == Weights::Q6_K;
}

FOUNDRY_VNNI_TARGET void pack_groups_vnni(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                                          Panel& p) {
  if (k_quant(kind)) return pack_k_groups<16>(kind, w, row_bytes, n, k, p);
  const BlockHeader h = group_header(kind);
  const int64_t blocks = k / 32, group_block = 8 * row_bytes / blocks;
  p.levels.resize(size_t(blocks * kStepsPerBlock * 64));
  p.scales.resize(size_t(blocks * 16));
  if (h.min) p.mins.resize(p.scales.size());
  const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
  // Rows 0-7 from the first group, 8-15 from the second (n = 8: rows 8-15 missing, read from the first).
  const uint8_t* second = n > 8 ? w + 8 * row_bytes : w;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t *first_block = w + b * group_block, *second_block = second + b * group_block;
    for (int f = 0; f < (h.min ? 2 : 1); ++f) {  // the scales, then the minimums
      float* out = (f ? p.mins : p.scales).data() + b * 16;
      _mm256_storeu_ps(out, group_halves(first_block + 16 * f));
      _mm256_storeu_ps(out + 8, n > 8 ? group_halves(second_block + 16 * f) : _mm256_setzero_ps());
    }
    auto* out = reinterpret_cast<__m512i*>(p.levels.data() + b * kStepsPerBlock * 64);
    for (int s = 0; s < 8; ++s) {
      const __m512i o = _mm512_inserti64x4(_mm512_castsi256_si512(group_step(first_block, h, s)),
                                           group_step(second_block, h, s), 1);
      _mm512_storeu_si512(out + s, h.nibbles ? o : _mm512_xor_si512(o, flip));
    }
  }
}

FOUNDRY_AVX2_TARGET void pack_groups_avx2(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                                          Panel& p) {
  if (k_quant(kind)) return pack_k_groups<8>(kind, w, row_bytes, n, k, p);
  const BlockHeader h = group_header(kind);
  const int64_t blocks = k / 32, group_block = 8 * row_bytes / blocks;
  p.levels.resize(size_t(blocks * kStepsPerBlock * 32));
  if (!h.nibbles) p.signs.resize(p.levels.size());
  p.scales.resize(size_t(blocks * 8));
  if (h.min) p.mins.resize(p.scales.size());
  for (int64_t b = 0; b < blocks; ++b) {  // a whole group: panels of 8 rows, rows a multiple of 8
    const uint8_t* block = w + b * group_block;
    _mm256_storeu_ps(p.scales.data() + b * 8, group_halves(block));
    if (h.min) _mm256_storeu_ps(p.mins.data() + b * 8, group_halves(block + 16));
    auto* out = reinterpret_cast<__m256i*>(p.levels.data() + b * kStepsPerBlock * 32);
    for (int s = 0; s < 8; ++s) {
      const __m256i o = group_step(block, h, s);
      if (h.nibbles) {
        _mm256_storeu_si256(out + s, o);
      } else {
        _mm256_storeu_si256(out + s, _mm256_abs_epi8(o));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.signs.data() + b * kStepsPerBlock * 32) + s, o);
      }
    }
  }
}

// Rows [r0, r0 + n) of w (n <= 16) into a VNNI panel: each block's rows of levels are loaded a row
// at a time and transposed into the step vectors in registers (gathering each step's dwords
// measured 40% of the kernel's time at 128 activation rows).
FOUNDRY_VNNI_TARGET void pack_panel_vnni(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                                         Panel& p) {
  if (grouped(kind)) return pack_groups_vnni(kind, w, row_bytes, n, k, p);
  if (unpacked_by_blocks(kind))
    return pack_panel_by_blocks<16>(kind, w, row_bytes, n, k, p, transpose_rows16);
  const int64_t blocks = k / 32;
  p.levels.resize(size_t(blocks * kStepsPerBlock * 64));
  p.scales.resize(size_t(blocks * 16));
  const uint8_t* rows[16];
  panel_rows<16>(w, row_bytes, n, rows);
  const __m512i low_mask = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(int8_t(0x80));
  const auto out = [&](int64_t b) { return reinterpret_cast<__m512i*>(p.levels.data() + b * kStepsPerBlock * 64); };
  const uint8_t* q[16];
  if (kind == Weights::Q4_K) {
    p.mins.resize(p.scales.size());
    for (int64_t sb = 0; sb < k / detail::kQK_K; ++sb) {
      const int64_t at = sb * detail::kQ4_KBytes, first = sb * kSubBlocks;
      for (int i = 0; i < 16; ++i) q4_K_factors<16>(rows[i] + at, i, i < n, first, p);
      // 4 chunks of 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high.
      for (int c = 0; c < 4; ++c) {
        for (int i = 0; i < 16; ++i) q[i] = rows[i] + at + 16 + 32 * c;
        __m512i o[8];
        rows16_bytes32(q, o);
        for (int s = 0; s < 8; ++s) {
          _mm512_storeu_si512(out(first + 2 * c) + s, _mm512_and_si512(o[s], low_mask));
          _mm512_storeu_si512(out(first + 2 * c + 1) + s, _mm512_and_si512(_mm512_srli_epi16(o[s], 4), low_mask));
        }
      }
    }
    return;
  }
  const int64_t block_bytes = kind == Weights::Q4_0 ? kQ4Bytes : kQ8Bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * block_bytes;
    for (int i = 0; i < 16; ++i) {
      p.scales[size_t(b * 16 + i)] = i < n ? f16_at(rows[i] + at) : 0.f;
      q[i] = rows[i] + at + 2;
    }
    if (kind == Weights::Q4_0) {
      // Byte t holds level t (low nibble) and level t + 16 (high): steps 0-3 are the low nibbles
      // of dwords 0-3, steps 4-7 their high nibbles, which are levels 16 + 4(s - 4) = 4s..
      __m512i o[4];
      rows16_bytes16(q, o);
      for (int s = 0; s < 4; ++s) {
        _mm512_storeu_si512(out(b) + s, _mm512_and_si512(o[s], low_mask));
        _mm512_storeu_si512(out(b) + s + 4, _mm512_and_si512(_mm512_srli_epi16(o[s], 4), low_mask));
      }
    } else {  // level + 128: the sign bit flipped
      __m512i o[8];
      rows16_bytes32(q, o);
      for (int s = 0; s < 8; ++s) _mm512_storeu_si512(out(b) + s, _mm512_xor_si512(o[s], flip));
    }
  }
}

// The same for an AVX2 panel of 8 rows; q8_0 as magnitudes plus the signed levels.
FOUNDRY_AVX2_TARGET void pack_panel_avx2(Weights kind, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                                         Panel& p) {
  if (grouped(kind)) return pack_groups_avx2(kind, w, row_bytes, n, k, p);
  if (unpacked_by_blocks(kind))
    return pack_panel_by_blocks<8>(kind, w, row_bytes, n, k, p, transpose_rows8);
  const int64_t blocks = k / 32;
  p.levels.resize(size_t(blocks * kStepsPerBlock * 32));
  if (kind == Weights::Q8_0Magnitude) p.signs.resize(p.levels.size());
  p.scales.resize(size_t(blocks * 8));
  const uint8_t* rows[8];
  panel_rows<8>(w, row_bytes, n, rows);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const auto out = [&](int64_t b) { return reinterpret_cast<__m256i*>(p.levels.data() + b * kStepsPerBlock * 32); };
  const uint8_t* q[8];
  if (kind == Weights::Q4_K) {
    p.mins.resize(p.scales.size());
    for (int64_t sb = 0; sb < k / detail::kQK_K; ++sb) {
      const int64_t at = sb * detail::kQ4_KBytes, first = sb * kSubBlocks;
      for (int i = 0; i < 8; ++i) q4_K_factors<8>(rows[i] + at, i, i < n, first, p);
      for (int c = 0; c < 4; ++c) {
        for (int i = 0; i < 8; ++i) q[i] = rows[i] + at + 16 + 32 * c;
        __m256i o[8];
        rows8_bytes32(q, o);
        for (int s = 0; s < 8; ++s) {
          _mm256_storeu_si256(out(first + 2 * c) + s, _mm256_and_si256(o[s], low_mask));
          _mm256_storeu_si256(out(first + 2 * c + 1) + s, _mm256_and_si256(_mm256_srli_epi16(o[s], 4), low_mask));
        }
      }
    }
    return;
  }
  const int64_t block_bytes = kind == Weights::Q4_0 ? kQ4Bytes : kQ8Bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * block_bytes;
    for (int i = 0; i < 8; ++i) {
      p.scales[size_t(b * 8 + i)] = i < n ? f16_at(rows[i] + at) : 0.f;
      q[i] = rows[i] + at + 2;
    }
    if (kind == Weights::Q4_0) {
      __m256i o[4];
      rows8_bytes16(q, o);
      for (int s = 0; s < 4; ++s) {
        _mm256_storeu_si256(out(b) + s, _mm256_and_si256(o[s], low_mask));
        _mm256_storeu_si256(out(b) + s + 4, _mm256_and_si256(_mm256_srli_epi16(o[s], 4), low_mask));
      }
    } else {
      __m256i o[8];
      rows8_bytes32(q, o);
      auto* signs = reinterpret_cast<__m256i*>(p.signs.data() + b * kStepsPerBlock * 32);
      for (int s = 0; s < 8; ++s) {
        _mm256_storeu_si256(out(b) + s, _mm256_abs_epi8(o[s]));
        _mm256_storeu_si256(signs + s, o[s]);
      }
    }
  }
}

// The tile's activation rows: row c's levels at levels + c * k, its block b's numbers at index
// c * blocks + b of the Activations' vectors.
struct Tile {
  const int8_t* levels;
  int64_t k;
  const float* scale;
  const int32_t* start;
  const float* level_sum;
  int64_t blocks;
};

// y[c * y_stride + i] for the panel's rows i < 16 (mask) and the tile's N activation rows; kMins
// adds the minimum terms; kHalves = 2 (q6_K) sums each half block on its own, with its own scale.
template <int N, int kHalves, bool kMins>
FOUNDRY_VNNI_TARGET void tile_vnni(const Panel& p, const Tile& x, float* y, int64_t y_stride, __mmask16 mask) {
  constexpr int kSteps = kStepsPerBlock / kHalves;
  __m512 acc[N];
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < x.blocks; ++b) {
    const auto* lv = reinterpret_cast<const __m512i*>(p.levels.data() + b * kStepsPerBlock * 64);
    __m512i w[kStepsPerBlock];
    for (int s = 0; s < kStepsPerBlock; ++s) w[s] = _mm512_loadu_si512(lv + s);
    __m512 ws[kHalves], wm[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      ws[h] = _mm512_loadu_ps(p.scales.data() + (b * kHalves + h) * 16);
      wm[h] = kMins ? _mm512_loadu_ps(p.mins.data() + (b * kHalves + h) * 16) : _mm512_setzero_ps();
    }
    #pragma GCC unroll 16
    for (int c = 0; c < N; ++c) {
      const int8_t* a = x.levels + c * x.k + b * 32;
      const int64_t at = c * x.blocks + b;
      const __m512 xs = _mm512_set1_ps(x.scale[at]);
      for (int h = 0; h < kHalves; ++h) {
        __m512i sum = _mm512_set1_epi32(h == 0 ? x.start[at] : 0);
        #pragma GCC unroll 8
        for (int s = h * kSteps; s < (h + 1) * kSteps; ++s)
          sum = _mm512_dpbusd_epi32(sum, w[s], _mm512_set1_epi32(dword_at(a + 4 * s)));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws[h], xs), acc[c]);
        if constexpr (kMins) acc[c] = _mm512_fmadd_ps(wm[h], _mm512_set1_ps(x.level_sum[at * kHalves + h]), acc[c]);
      }
    }
  }
  for (int c = 0; c < N; ++c) _mm512_mask_storeu_ps(y + c * y_stride, mask, acc[c]);
}

// The same on 8 rows, AVX2. Unsigned levels of kBits bits: the int16 pairs of kGroup steps summed
// before they go to int32 (2 x (2^kBits - 1) x 128 per step and pair: 8 steps for 4-bit levels, 4
// for 5-bit, 2 for 6-bit). kBits = 8: q8_0's magnitudes, each step's pairs to int32 at once.
template <int N, int kBits, int kHalves, bool kMins>
FOUNDRY_AVX2_TARGET void tile_avx2(const Panel& p, const Tile& x, float* y, int64_t y_stride, int rows) {
  constexpr int kSteps = kStepsPerBlock / kHalves;
  constexpr int kGroup = kBits == 4 ? 8 : kBits == 5 ? 4 : kBits == 6 ? 2 : 1;
  static_assert(kSteps % kGroup == 0);
  __m256 acc[N];
  for (int c = 0; c < N; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < x.blocks; ++b) {
    const auto* lv = reinterpret_cast<const __m256i*>(p.levels.data() + b * kStepsPerBlock * 32);
    const auto* sg = kBits == 8 ? reinterpret_cast<const __m256i*>(p.signs.data() + b * kStepsPerBlock * 32) : nullptr;
    __m256i w[kStepsPerBlock];
    for (int s = 0; s < kStepsPerBlock; ++s) w[s] = _mm256_loadu_si256(lv + s);
    __m256 ws[kHalves], wm[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      ws[h] = _mm256_loadu_ps(p.scales.data() + (b * kHalves + h) * 8);
      wm[h] = kMins ? _mm256_loadu_ps(p.mins.data() + (b * kHalves + h) * 8) : _mm256_setzero_ps();
    }
    #pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const int8_t* a = x.levels + c * x.k + b * 32;
      const int64_t at = c * x.blocks + b;
      const __m256 xs = _mm256_set1_ps(x.scale[at]);
      for (int h = 0; h < kHalves; ++h) {
        __m256i sum = _mm256_set1_epi32(h == 0 ? x.start[at] : 0);
        if constexpr (kBits == 8) {
          #pragma GCC unroll 8
          for (int s = 0; s < kStepsPerBlock; ++s) {
            const __m256i signed_a = _mm256_sign_epi8(_mm256_set1_epi32(dword_at(a + 4 * s)), _mm256_loadu_si256(sg + s));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(w[s], signed_a), ones));
          }
        } else {
          #pragma GCC unroll 8
          for (int g = h * kSteps; g < (h + 1) * kSteps; g += kGroup) {
            __m256i pairs = _mm256_maddubs_epi16(w[g], _mm256_set1_epi32(dword_at(a + 4 * g)));
            #pragma GCC unroll 8
            for (int s = g + 1; s < g + kGroup; ++s)
              pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[s], _mm256_set1_epi32(dword_at(a + 4 * s))));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
          }
        }
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws[h], xs), acc[c]);
        if constexpr (kMins) acc[c] = _mm256_fmadd_ps(wm[h], _mm256_set1_ps(x.level_sum[at * kHalves + h]), acc[c]);
      }
    }
  }
  for (int c = 0; c < N; ++c) {
    if (rows == 8) {
      _mm256_storeu_ps(y + c * y_stride, acc[c]);
    } else {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[c]);
      std::copy_n(out, rows, y + c * y_stride);
    }
  }
}

// Kernel<N> for the tile's N = n activation rows (1..kTile).
template <int N, class Run>
void run_tile(int n, Run&& run) {
  if constexpr (N > 0) {
    if (n == N) return run.template operator()<N>();
    run_tile<N - 1>(n, run);
  }
}

using PackPanel = void (*)(Weights, const uint8_t*, int64_t, int64_t, int64_t, Panel&);

// Nothing to set up around a thread's run of panels.
struct NoScope {};

// Threads split the weight panels; each unpacks its panel once and runs every tile of activation
// rows against it. A ChunkScope lives while a thread runs its chunk of panels (AMX: the tile
// configuration). `on_this_thread`: every panel on the calling thread.
template <int Lanes, int kTile, class ChunkScope = NoScope, class TileKernel>
void gemm_panels(Weights kind, PackPanel pack, const uint8_t* w, int64_t rows, int64_t k, const Activations& a, int64_t m,
                 float* y, int64_t ldy, TileKernel&& kernel, bool on_this_thread = false) {
  const int64_t blocks = k / 32, row_bytes = weight_row_bytes(kind, k);
  const int64_t panels = (rows + Lanes - 1) / Lanes;
  const auto chunk = [&](int64_t lo, int64_t hi) {
    [[maybe_unused]] const ChunkScope scope{};
    thread_local Panel p;
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t r0 = q * Lanes, n = std::min<int64_t>(Lanes, rows - r0);
      pack(kind, w + r0 * row_bytes, row_bytes, n, k, p);
      // The next panel's rows (one contiguous run of bytes) fetched while this one computes: the
      // row-at-a-time loads of 16 rows at once are streams the hardware prefetcher does not follow.
      if (q + 1 < hi) {
        const uint8_t* next = w + (r0 + Lanes) * row_bytes;
        const int64_t bytes = std::min<int64_t>(Lanes, rows - r0 - Lanes) * row_bytes;
        for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T1);
      }
      for (int64_t c0 = 0; c0 < m; c0 += kTile) {
        const Tile x{a.levels.data() + c0 * k, k, a.scale.data() + c0 * blocks, a.start.data() + c0 * blocks,
                     a.level_sum.size() == 0 ? nullptr : a.level_sum.data() + c0 * blocks * a.halves, blocks};
        run_tile<kTile>(int(std::min<int64_t>(kTile, m - c0)),
                        [&]<int N>() { kernel.template operator()<N>(p, x, y + c0 * ldy + r0, ldy, int(n)); });
      }
    }
  };
  if (on_this_thread) return chunk(0, panels);
  parallel_for(0, panels, 1, chunk);
}

template <int kHalves, bool kMins>
void gemm_vnni(Weights kind, const uint8_t* w, int64_t rows, int64_t k, const Activations& a, int64_t m, float* y, int64_t ldy) {
  auto kernel = [&]<int N>(const Panel& p, const Tile& t, float* out, int64_t stride, int n) {
    tile_vnni<N, kHalves, kMins>(p, t, out, stride, __mmask16((1u << n) - 1));
  };
  gemm_panels<16, 16>(kind, pack_panel_vnni, w, rows, k, a, m, y, ldy, kernel);
}


// ---- AMX-INT8 ----
// One tdpbsud multiplies a 32-value block of 16 activation rows (tile A: 16 rows of 32 signed
// levels, loaded in place from the activation matrix, k bytes apart) by the same block of the
// panel's 16 weight rows (tile B: the panel's 8 step vectors as they are, row i's 4 unsigned levels
// in dword i of each) into 16 x 16 int32 sums (tile C): the work of 128 vpdpbusd. A block's sums
// need the block's own scales, so each C is stored and read back by the VNNI kernel's float work,
// in its order: the two kernels give the same bits. Two C tiles take alternate blocks, so one
// block's products can run while the previous block's sums are scaled.

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes a row, per tile
  uint8_t rows[16] = {};
};

// Tiles 0, 1: C (16 activation rows x 16 int32); 2, 3: A (16 rows x 32 levels); 4, 5: B (8 steps
// x 64); 6, 7: A and B of a half block (q6_K's two scales a block: 16 levels, 4 steps).
TileConfig amx_tile_config() {
  TileConfig c;
  for (int t : {0, 1}) c.rows[t] = 16, c.colsb[t] = 64;
  for (int t : {2, 3}) c.rows[t] = 16, c.colsb[t] = 32;
  for (int t : {4, 5}) c.rows[t] = kStepsPerBlock, c.colsb[t] = 64;
  c.rows[6] = 16, c.colsb[6] = 16;
  c.rows[7] = kStepsPerBlock / 2, c.colsb[7] = 64;
  return c;
}

// The tile instructions' operands are tile numbers written into the instruction, so each use is
// spelled out: C tile C = A tile A (16 rows, `a` on, `stride` apart) x B tile B (rows 64 bytes
// apart from `b`). The kernel writes none of the memory the tiles load (the panel and the
// activations are written before it starts). The stores name the 1 KB they write (GCC's
// _tile_stored clobbers all memory: see tile_amx).
#define FOUNDRY_TILE_PRODUCT(C, A, B, a, stride, b)                                                               \
  __asm__ __volatile__("tilezero %%tmm" #C "\n\ttileloadd (%0,%1,1), %%tmm" #A "\n\ttileloadd (%2,%3,1), %%tmm" #B \
                       "\n\ttdpbsud %%tmm" #B ", %%tmm" #A ", %%tmm" #C ::"r"(a),                                  \
                       "r"(stride), "r"(b), "r"(int64_t(64)))
#define FOUNDRY_TILE_STORE(C, c) \
  __asm__ __volatile__("tilestored %%tmm" #C ", (%1,%2,1)" : "=m"(c) : "r"(&c[0][0]), "r"(int64_t(64)))

struct AmxTiles {
  // Whole blocks (32 levels) into C tile 0 or 1.
  FOUNDRY_AMX_TARGET void multiply0(const int8_t* a, int64_t stride, const uint8_t* b) { FOUNDRY_TILE_PRODUCT(0, 2, 4, a, stride, b); }
  FOUNDRY_AMX_TARGET void multiply1(const int8_t* a, int64_t stride, const uint8_t* b) { FOUNDRY_TILE_PRODUCT(1, 3, 5, a, stride, b); }
  // Half blocks (16 levels: A 16 bytes a row, B 4 steps) into C tile 0 or 1, through tiles 6 and 7.
  FOUNDRY_AMX_TARGET void multiply_half0(const int8_t* a, int64_t stride, const uint8_t* b) {
    FOUNDRY_TILE_PRODUCT(0, 6, 7, a, stride, b);
  }
  FOUNDRY_AMX_TARGET void multiply_half1(const int8_t* a, int64_t stride, const uint8_t* b) {
    FOUNDRY_TILE_PRODUCT(1, 6, 7, a, stride, b);
  }
  FOUNDRY_AMX_TARGET void store0(int32_t (&c)[16][16]) { FOUNDRY_TILE_STORE(0, c); }
  FOUNDRY_AMX_TARGET void store1(int32_t (&c)[16][16]) { FOUNDRY_TILE_STORE(1, c); }
};
#undef FOUNDRY_TILE_PRODUCT
#undef FOUNDRY_TILE_STORE

// A thread's tile configuration while it runs its chunk of panels: set at the start (another
// kernel on the thread, oneDNN's, may have set its own) and released at the end, so that the
// kernel does not save 8 KB of tile state at every context switch after.
struct AmxScope {
  FOUNDRY_AMX_TARGET AmxScope() {
    static const TileConfig config = amx_tile_config();
    _tile_loadconfig(&config);
  }
  FOUNDRY_AMX_TARGET ~AmxScope() { _tile_release(); }
};

// The same operations in scalar code, as the instruction set reference defines TDPBSUD for an A
// tile of K bytes a row: C[m][n] = sum over j < K of sign-extended A[m][j] x zero-extended
// B[j / 4][4n + j % 4].
struct EmulatedTiles {
  int32_t c[2][16][16];
  void multiply(int slot, int bytes, const int8_t* a, int64_t a_stride, const uint8_t* b) {
    for (int row = 0; row < 16; ++row)
      for (int n = 0; n < 16; ++n) {
        int32_t sum = 0;
        for (int j = 0; j < bytes; ++j) sum += int32_t(a[row * a_stride + j]) * int32_t(b[(j / 4) * 64 + 4 * n + j % 4]);
        c[slot][row][n] = sum;
      }
  }
  void multiply0(const int8_t* a, int64_t a_stride, const uint8_t* b) { multiply(0, 32, a, a_stride, b); }
  void multiply1(const int8_t* a, int64_t a_stride, const uint8_t* b) { multiply(1, 32, a, a_stride, b); }
  void multiply_half0(const int8_t* a, int64_t a_stride, const uint8_t* b) { multiply(0, 16, a, a_stride, b); }
  void multiply_half1(const int8_t* a, int64_t a_stride, const uint8_t* b) { multiply(1, 16, a, a_stride, b); }
  void store0(int32_t (&out)[16][16]) { std::memcpy(out, c[0], sizeof(c[0])); }
  void store1(int32_t (&out)[16][16]) { std::memcpy(out, c[1], sizeof(c[1])); }
};

// Block b's (half h's) int32 sums (16 activation rows x the panel's 16 rows) into the
// accumulators, as tile_vnni scales its sums.
template <int N, int kHalves, bool kMins>
FOUNDRY_AMX_TARGET __attribute__((always_inline)) inline void scale_block(__m512 (&acc)[N], const Panel& p, const Tile& x,
                                                                         int64_t b, int h, const int32_t (&sums)[16][16]) {
  const __m512 ws = _mm512_loadu_ps(p.scales.data() + (b * kHalves + h) * 16);
  const __m512 wm = kMins ? _mm512_loadu_ps(p.mins.data() + (b * kHalves + h) * 16) : _mm512_setzero_ps();
  #pragma GCC unroll 16
  for (int c = 0; c < N; ++c) {
    const int64_t at = c * x.blocks + b;
    const __m512i sum = _mm512_add_epi32(_mm512_set1_epi32(h == 0 ? x.start[at] : 0), _mm512_load_si512(sums[c]));
    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_set1_ps(x.scale[at])), acc[c]);
    if constexpr (kMins) acc[c] = _mm512_fmadd_ps(wm, _mm512_set1_ps(x.level_sum[at * kHalves + h]), acc[c]);
  }
}

// tile_amx's int32 sums from the tiles, a thread's buffer, not the stack: with the tile stores'
// asm writing a stack array, GCC 12 kept the accumulators in memory (a load and a store each per
// block); with this buffer it moves them through the stack once per pair of blocks. One for every
// instantiation (a thread runs one tile at a time): a function-local one was 2 KB of every
// thread's TLS block for each of the 96 (192 of the library's 207 KB).
alignas(64) thread_local int32_t t_amx_sums[2][16][16];

// tile_vnni's product with each block's (half block's) int32 sums from the tiles.
template <class Tiles, int N, int kHalves, bool kMins>
FOUNDRY_AMX_TARGET void tile_amx(Tiles& tiles, const Panel& p, const Tile& x, float* y, int64_t y_stride,
                                 __mmask16 mask) {
  int32_t (&sums)[2][16][16] = t_amx_sums;
  __m512 acc[N];
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  const auto levels = [&](int64_t b) { return p.levels.data() + b * kStepsPerBlock * 64; };
  if constexpr (kHalves == 2) {  // a block's halves in C tiles 0 and 1
    for (int64_t b = 0; b < x.blocks; ++b) {
      tiles.multiply_half0(x.levels + b * 32, x.k, levels(b));
      tiles.multiply_half1(x.levels + b * 32 + 16, x.k, levels(b) + kStepsPerBlock / 2 * 64);
      tiles.store0(sums[0]);
      scale_block<N, 2, kMins>(acc, p, x, b, 0, sums[0]);
      tiles.store1(sums[1]);
      scale_block<N, 2, kMins>(acc, p, x, b, 1, sums[1]);
    }
  } else {  // pairs of blocks in C tiles 0 and 1, an odd last block in 0
    int64_t b = 0;
    for (; b + 1 < x.blocks; b += 2) {
      tiles.multiply0(x.levels + b * 32, x.k, levels(b));
      tiles.multiply1(x.levels + (b + 1) * 32, x.k, levels(b + 1));
      tiles.store0(sums[0]);
      scale_block<N, 1, kMins>(acc, p, x, b, 0, sums[0]);
      tiles.store1(sums[1]);
      scale_block<N, 1, kMins>(acc, p, x, b + 1, 0, sums[1]);
    }
    if (b < x.blocks) {
      tiles.multiply0(x.levels + b * 32, x.k, levels(b));
      tiles.store0(sums[0]);
      scale_block<N, 1, kMins>(acc, p, x, b, 0, sums[0]);
    }
  }
  for (int c = 0; c < N; ++c) _mm512_mask_storeu_ps(y + c * y_stride, mask, acc[c]);
}

// The tile kernel over the VNNI panels, its tile operations from Tiles (AmxTiles inside an
// AmxScope, or EmulatedTiles with nothing to set up).
template <class Tiles, class Scope, int kHalves, bool kMins>
void gemm_tiles(Weights kind, const uint8_t* w, int64_t rows, int64_t k, const Activations& a, int64_t m, float* y,
                int64_t ldy, bool on_this_thread) {
  auto kernel = [&]<int N>(const Panel& p, const Tile& t, float* out, int64_t stride, int n) {
    Tiles tiles;
    tile_amx<Tiles, N, kHalves, kMins>(tiles, p, t, out, stride, __mmask16((1u << n) - 1));
  };
  gemm_panels<16, 16, Scope>(kind, pack_panel_vnni, w, rows, k, a, m, y, ldy, kernel, on_this_thread);
}

template <int kHalves, bool kMins>
void gemm_amx(bool emulated, Weights kind, const uint8_t* w, int64_t rows, int64_t k, const Activations& a, int64_t m,
              float* y, int64_t ldy, bool on_this_thread = false) {
  if (emulated) return gemm_tiles<EmulatedTiles, NoScope, kHalves, kMins>(kind, w, rows, k, a, m, y, ldy, on_this_thread);
  gemm_tiles<AmxTiles, AmxScope, kHalves, kMins>(kind, w, rows, k, a, m, y, ldy, on_this_thread);
}

// Activation rows a tile: q8_0's block (8 weight vectors, 8 of signs) meets 8 rows, the others' 4.
// Over Llama-110M's matrices (m = 128, Zen 5 capped to AVX2, in-process A/B) 8 rows ran q8_0 at
// 67-69 GMAC/s against 57-58 with 4 at 1 thread in three of four pairs (even in the fourth), 2
// threads about even (102 against 100); q4_0 and q4_K ran 10-13% slower with 8.
template <int kBits, int kHalves, bool kMins>
void gemm_avx2(Weights kind, const uint8_t* w, int64_t rows, int64_t k, const Activations& a, int64_t m, float* y, int64_t ldy) {
  auto kernel = [&]<int N>(const Panel& p, const Tile& t, float* out, int64_t stride, int n) {
    tile_avx2<N, kBits, kHalves, kMins>(p, t, out, stride, n);
  };
  gemm_panels<8, kBits == 8 ? 8 : 4>(kind, pack_panel_avx2, w, rows, k, a, m, y, ldy, kernel);
}

// A format's kernel: its levels' width (kBits), scales a block (kHalves) and whether it has a
// minimum are all that differ between formats, beside the activation numbers it reads.
template <int kBits, int kHalves, bool kMins>
void gemm_levels(BlockGemmIsa isa, Weights kind, const uint8_t* w, int64_t rows, int64_t k, const Activations& a,
                 int64_t m, float* y, int64_t ldy) {
  const bool amx = isa == BlockGemmIsa::AMX || isa == BlockGemmIsa::AMXEmulated;
  if (amx) return gemm_amx<kHalves, kMins>(isa == BlockGemmIsa::AMXEmulated, kind, w, rows, k, a, m, y, ldy);
  if (isa != BlockGemmIsa::AVX2) return gemm_vnni<kHalves, kMins>(kind, w, rows, k, a, m, y, ldy);
  gemm_avx2<kBits, kHalves, kMins>(kind, w, rows, k, a, m, y, ldy);
}

// The CPU's AMX-TILE and AMX-INT8 bits (CPUID leaf 7, EDX bits 24 and 25), and Linux's grant of
// the tile data state to this process (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16 on): without
// it the first tile instruction faults.
// FOUNDRY_FORCE_AMX_CHECK=1 skips the CPUID test: on a CPU without tiles the check's first tile
// instruction then faults, which tests the fallback (tests/python/test_isa_cap.py).
bool amx_int8_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const char* force = std::getenv("FOUNDRY_FORCE_AMX_CHECK");
  if (force && std::string(force) == "1") return true;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !((edx >> 24) & 1) || !((edx >> 25) & 1)) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The thread running amx_matches_vnni, and where it resumes if a tile instruction faults there.
pthread_t checking_thread;
sigjmp_buf tile_fault;

void on_tile_fault(int sig) {
  if (pthread_equal(pthread_self(), checking_thread)) siglongjmp(tile_fault, 1);
  std::signal(sig, SIG_DFL);  // another thread's fault: as if no handler had been set
  std::raise(sig);
}

// A q4_0, a q4_1 and a q6_K product (two panels, one partial; q4_0 / q4_1 an odd block count: a
// pair of blocks and one alone; q6_K half blocks; a whole and a partial tile of activation rows)
// through the tiles on this thread and through the VNNI kernel: the same bits, or the tiles are
// not used. A fault in a tile instruction (SIGILL, SIGSEGV: a tile configuration the CPU refuses)
// counts as a mismatch.
bool amx_matches_vnni() {
  constexpr int64_t rows = 20, m = 19;
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::vector<uint8_t>> weights, activations;
  for (const BlockFormat format : {BlockFormat::Q4_0, BlockFormat::Q4_1, BlockFormat::Q6_K}) {
    const int64_t k = format == BlockFormat::Q6_K ? 256 : 96;
    const BlockFormatTraits& t = traits(format);
    const BlockFormatTraits& act = traits(t.dot_format);
    std::vector<float> wf(size_t(rows * k)), xf(size_t(m * k));
    for (float& v : wf) v = nd(rng);
    for (float& v : xf) v = nd(rng);
    const int64_t row_bytes = quantized_bytes(t, 1, k), act_bytes = quantized_bytes(act, 1, k);
    weights.emplace_back(size_t(rows * row_bytes));
    activations.emplace_back(size_t(m * act_bytes));
    for (int64_t r = 0; r < rows; ++r) t.quantize(wf.data() + r * k, weights.back().data() + r * row_bytes, k);
    for (int64_t i = 0; i < m; ++i) act.quantize(xf.data() + i * k, activations.back().data() + i * act_bytes, k);
  }
  const Activations q4_0 = activations_q8_0(activations[0].data(), m, 96, 8, false);
  const Activations q4_1 = activations_q8_0(activations[1].data(), m, 96, 0, true);
  const Activations q6_K = activations_q8_K(activations[2].data(), m, 256, 2);
  std::vector<float> tiles[3], vnni[3];
  for (int i = 0; i < 3; ++i) tiles[i].assign(size_t(m * rows), 0.f), vnni[i].assign(size_t(m * rows), 1.f);
  gemm_vnni<1, false>(Weights::Q4_0, weights[0].data(), rows, 96, q4_0, m, vnni[0].data(), rows);
  gemm_vnni<1, true>(Weights::Q4_1, weights[1].data(), rows, 96, q4_1, m, vnni[1].data(), rows);
  gemm_vnni<2, true>(Weights::Q6_K, weights[2].data(), rows, 256, q6_K, m, vnni[2].data(), rows);
  struct sigaction fault = {}, old_ill = {}, old_segv = {};
  fault.sa_handler = on_tile_fault;
  sigemptyset(&fault.sa_mask);
  checking_thread = pthread_self();
  sigaction(SIGILL, &fault, &old_ill);
  sigaction(SIGSEGV, &fault, &old_segv);
  bool ran = false;
  if (sigsetjmp(tile_fault, 1) == 0) {
    gemm_amx<1, false>(false, Weights::Q4_0, weights[0].data(), rows, 96, q4_0, m, tiles[0].data(), rows, true);
    gemm_amx<1, true>(false, Weights::Q4_1, weights[1].data(), rows, 96, q4_1, m, tiles[1].data(), rows, true);
    gemm_amx<2, true>(false, Weights::Q6_K, weights[2].data(), rows, 256, q6_K, m, tiles[2].data(), rows, true);
    ran = true;
  }
  sigaction(SIGILL, &old_ill, nullptr);
  sigaction(SIGSEGV, &old_segv, nullptr);
  if (!ran) return false;
  for (int i = 0; i < 3; ++i)
    if (std::memcmp(tiles[i].data(), vnni[i].data(), tiles[i].size() * sizeof(float)) != 0) return false;
  return true;
}

}  // namespace

bool amx_int8_available() {
  static const bool ok = [] {
    if (!vnni_available() || std::getenv("FOUNDRY_DISABLE_AMX") != nullptr || !amx_int8_cpu()) return false;
    if (amx_matches_vnni()) return true;
    std::fprintf(stderr, "foundry: the AMX-INT8 kernels' first product faulted or differed from the VNNI kernels'; "
                 "using VNNI\n");
    return false;
  }();
  return ok;
}

void gemm_blocks_x86(BlockFormat format, BlockGemmIsa isa, const void* w, int64_t rows, int64_t k, const void* xq,
                     int64_t m, float* y, bool grouped, int64_t y_stride) {
  const int64_t ldy = y_stride > 0 ? y_stride : rows;
  const bool vnni = isa != BlockGemmIsa::AVX2;
  FOUNDRY_CHECK(!grouped || (has_row_groups(format) && rows % 8 == 0),
                "gemm_blocks_x86: groups of 8 rows take a q4_0, q4_1, q5_0, q5_1 or q8_0 matrix of whole groups");
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const uint8_t*>(xq);
  const auto q8_0 = [&](int32_t offset, bool sums) { return activations_q8_0(x, m, k, offset, sums); };
  const auto q8_K = [&](int halves) { return activations_q8_K(x, m, k, halves); };
  switch (format) {
    case BlockFormat::Q4_0:
      return gemm_levels<4, 1, false>(isa, in_groups(Weights::Q4_0, grouped), wb, rows, k, q8_0(8, false), m, y, ldy);
    case BlockFormat::Q4_1:
      return gemm_levels<4, 1, true>(isa, in_groups(Weights::Q4_1, grouped), wb, rows, k, q8_0(0, true), m, y, ldy);
    case BlockFormat::Q5_0:
      return gemm_levels<5, 1, false>(isa, in_groups(Weights::Q5_0, grouped), wb, rows, k, q8_0(16, false), m, y, ldy);
    case BlockFormat::Q5_1:
      return gemm_levels<5, 1, true>(isa, in_groups(Weights::Q5_1, grouped), wb, rows, k, q8_0(0, true), m, y, ldy);
    case BlockFormat::Q8_0:  // VNNI / AMX: levels + 128 and an offset; AVX2: magnitudes times signed activations
      if (vnni)
        return gemm_levels<8, 1, false>(isa, in_groups(Weights::Q8_0Offset, grouped), wb, rows, k, q8_0(128, false), m, y, ldy);
      return gemm_avx2<8, 1, false>(in_groups(Weights::Q8_0Magnitude, grouped), wb, rows, k, q8_0(0, false), m, y, ldy);
    case BlockFormat::Q4_K: return gemm_levels<4, 1, true>(isa, in_groups(Weights::Q4_K, grouped), wb, rows, k, q8_K(1), m, y, ldy);
    case BlockFormat::Q5_K: return gemm_levels<5, 1, true>(isa, in_groups(Weights::Q5_K, grouped), wb, rows, k, q8_K(1), m, y, ldy);
    case BlockFormat::Q6_K: return gemm_levels<6, 2, true>(isa, in_groups(Weights::Q6_K, grouped), wb, rows, k, q8_K(2), m, y, ldy);
    default: FOUNDRY_CHECK(false, "gemm_blocks_x86: no integer GEMM for this format");
  }
}

#else

bool amx_int8_available() { return false; }

void gemm_blocks_x86(BlockFormat, BlockGemmIsa, const void*, int64_t, int64_t, const void*, int64_t, float*, bool, int64_t) {}

#endif

}  // namespace foundry::quant

// Lossless packing of bfloat16 rows and its decode kernels (bf16_packed.h says the layout).
#include "quant/bf16_packed.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/isa.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_AVX512_TARGET __attribute__((target("avx512f,avx512bw,fma")))
#define FOUNDRY_HAVE_PACKED_BF16_X86 1
#else
#define FOUNDRY_HAVE_PACKED_BF16_X86 0
#endif

namespace foundry::quant {

namespace {

constexpr int64_t kBlock = kPackedBF16Block, kBlockBytes = 96, kWholeBytes = 2 * kBlock;

int64_t header_bytes(int64_t k) { return (k / kBlock + 31) / 32 * 32; }

int exponent(uint16_t v) { return (v >> 7) & 0xFF; }

// The value at byte position p of a block (bf16_packed.h): positions 16j + r, r < 8, hold the
// even and odd 16-bit words of the low byte-interleave of 128-bit lane j, r >= 8 the high one's.
int value_at(int p) {
  const int j = p / 16, r = p % 16, half = r / 8, odd = r % 2, t = (r % 8) / 2;
  return 32 * half + 16 * odd + 4 * j + t;
}

// Whether block `v` (64 values) is stored whole, and its largest exponent's top 7 bits.
bool stored_whole(const uint16_t* v, int& top) {
  int hi = 0, lo = 255;
  for (int64_t i = 0; i < kBlock; ++i) {
    hi = std::max(hi, exponent(v[i]) >> 1);
    lo = std::min(lo, exponent(v[i]) >> 1);
  }
  top = hi;
  return hi == 0 || hi - lo > 7;
}

int64_t row_escapes(const uint16_t* row, int64_t k) {
  int64_t n = 0;
  int top = 0;
  for (int64_t b = 0; b < k / kBlock; ++b) n += stored_whole(row + b * kBlock, top);
  return n;
}

const uint16_t* whole_block(const uint8_t* block) {
  int64_t offset;
  std::memcpy(&offset, block, sizeof offset);
  return reinterpret_cast<const uint16_t*>(block + offset);
}

void check_k(int64_t k) {
  FOUNDRY_CHECK_AS(ValueError, k > 0 && k % kBlock == 0, "packed bf16: rows of {} values are not whole blocks of {}", k,
                   kBlock);
}

}  // namespace

int64_t packed_bf16_row_bytes(int64_t k) {
  check_k(k);
  return header_bytes(k) + k / kBlock * kBlockBytes;
}

int64_t PackedBF16Plan::bytes() const { return rows * packed_bf16_row_bytes(k) + escapes() * kWholeBytes; }

PackedBF16Plan plan_packed_bf16(const uint16_t* w, int64_t rows, int64_t k) {
  check_k(k);
  PackedBF16Plan plan{rows, k, std::vector<int64_t>(size_t(rows + 1), 0)};
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) plan.first[size_t(r + 1)] = row_escapes(w + r * k, k);
  });
  for (int64_t r = 0; r < rows; ++r) plan.first[size_t(r + 1)] += plan.first[size_t(r)];
  return plan;
}

void pack_bf16(const uint16_t* w, const PackedBF16Plan& plan, uint8_t* out, int64_t out_bytes) {
  const int64_t rows = plan.rows, k = plan.k, row_bytes = packed_bf16_row_bytes(k), blocks = k / kBlock;
  FOUNDRY_CHECK_AS(ValueError, out_bytes == plan.bytes(), "pack_bf16: {} bytes for a packed [{}, {}] matrix that needs {}",
                   out_bytes, rows, k, plan.bytes());
  uint8_t* tail = out + rows * row_bytes;
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      uint8_t* row = out + r * row_bytes;
      std::memset(row, 0, size_t(row_bytes));
      int64_t slot = plan.first[size_t(r)];
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t* v = w + r * k + b * kBlock;
        uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
        int top = 0;
        if (stored_whole(v, top)) {
          uint8_t* whole = tail + slot++ * kWholeBytes;
          std::memcpy(whole, v, size_t(kWholeBytes));
          const int64_t offset = whole - block;
          std::memcpy(block, &offset, sizeof offset);
          continue;  // header byte 0
        }
        row[b] = uint8_t(top);
        for (int p = 0; p < 64; ++p) {
          const uint16_t x = v[value_at(p)];
          const int nibble = (x >> 15) << 3 | (top - (exponent(x) >> 1));
          block[p % 32] |= uint8_t(nibble << (p < 32 ? 0 : 4));
          block[32 + p] = uint8_t(x & 0xFF);
        }
      }
    }
  });
}

namespace {

void unpack_row_scalar(const uint8_t* row, int64_t k, uint16_t* out) {
  const int64_t blocks = k / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
    uint16_t* v = out + b * kBlock;
    const int top = row[b];
    if (top == 0) {
      std::memcpy(v, whole_block(block), size_t(kWholeBytes));
      continue;
    }
    for (int p = 0; p < 64; ++p) {
      const int nibble = (block[p % 32] >> (p < 32 ? 0 : 4)) & 0xF;
      const int high = (nibble & 8) << 4 | (top - (nibble & 7));
      v[value_at(p)] = uint16_t(high << 8 | block[32 + p]);
    }
  }
}

// The portable form: the row unpacked, then summed in order.
void rows_scalar(const uint8_t* w, int64_t k, const float* x, int64_t r0, int64_t r1, float* y) {
  std::vector<uint16_t> v(static_cast<size_t>(k));
  const int64_t row_bytes = packed_bf16_row_bytes(k);
  for (int64_t r = r0; r < r1; ++r) {
    unpack_row_scalar(w + r * row_bytes, k, v.data());
    float s = 0.f;
    for (int64_t i = 0; i < k; ++i) s += std::bit_cast<float>(uint32_t(v[size_t(i)]) << 16) * x[i];
    y[r] = s;
  }
}

#if FOUNDRY_HAVE_PACKED_BF16_X86

constexpr int64_t kAhead = avx2::kStreamAhead;

// AVX-512. A block's 64 high bytes (sign, exponent >> 1) from its nibbles: nibble p is byte p % 32's
// low (p < 32) or high half; high = (nibble & 8) << 4 | (top - (nibble & 7)) (computed: a vpshufb
// table lookup read 15% slower on a Zen 5, its shuffle port busy with the interleaves).
FOUNDRY_AVX512_TARGET inline __m512i high_bytes_512(const uint8_t* block, int top) {
  const __m512i both = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block)));
  const __m512i n = _mm512_and_si512(_mm512_mask_srli_epi16(both, 0xFFFF0000u, both, 4), _mm512_set1_epi8(0x0F));
  const __m512i e = _mm512_sub_epi8(_mm512_set1_epi8(int8_t(top)), _mm512_and_si512(n, _mm512_set1_epi8(7)));
  // e | (n << 4 & 0x80): n < 16 in every byte, so the 16-bit shift moves no bit across bytes.
  return _mm512_ternarylogic_epi32(e, _mm512_slli_epi16(n, 4), _mm512_set1_epi8(int8_t(0x80)), 0xF8);
}

// The block's bf16 words: w0 the low byte-interleave of each 128-bit lane, w1 the high one.
struct Words512 {
  __m512i w0, w1;
};
FOUNDRY_AVX512_TARGET inline Words512 words_512(const uint8_t* block, int top) {
  const __m512i high = high_bytes_512(block, top);
  // Two 32-byte loads: a 64-byte one would straddle two cache lines in every other block.
  const __m512i low = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64)), 1);
  return {_mm512_unpacklo_epi8(low, high), _mm512_unpackhi_epi8(low, high)};
}

FOUNDRY_AVX512_TARGET inline __m512 even_words_512(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
FOUNDRY_AVX512_TARGET inline __m512 odd_words_512(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
}

// A block stored whole, in its values' order.
FOUNDRY_AVX512_TARGET inline void whole_512(const uint16_t* v, const float* x, __m512& s0, __m512& s1) {
  for (int g = 0; g < 2; ++g) {
    const auto* p = reinterpret_cast<const __m256i*>(v + 32 * g);
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p + 1)), 16));
    s0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + 32 * g), s0);
    s1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 32 * g + 16), s1);
  }
}

// One block of a row: its 64 values' products added to the row's accumulators, s0 over values
// [32j, 32j + 16) and s1 over [32j + 16, 32j + 32), as GemvRows sums a bf16 row 16 lanes wide.
// The even words of w0 are values 0-15, its odd ones 16-31; w1's 32-47 and 48-63.
FOUNDRY_AVX512_TARGET inline void block_512(const uint8_t* row, int64_t head, int64_t b, const float* x, __m512& s0,
                                            __m512& s1) {
  const uint8_t* block = row + head + b * kBlockBytes;
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead, _MM_HINT_NTA);
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead + 64, _MM_HINT_NTA);
  const float* xb = x + b * kBlock;
  if (row[b] == 0) return whole_512(whole_block(block), xb, s0, s1);
  const Words512 w = words_512(block, row[b]);
  s0 = _mm512_fmadd_ps(even_words_512(w.w0), _mm512_loadu_ps(xb), s0);
  s1 = _mm512_fmadd_ps(odd_words_512(w.w0), _mm512_loadu_ps(xb + 16), s1);
  s0 = _mm512_fmadd_ps(even_words_512(w.w1), _mm512_loadu_ps(xb + 32), s0);
  s1 = _mm512_fmadd_ps(odd_words_512(w.w1), _mm512_loadu_ps(xb + 48), s1);
}

// Rows first + s * stride + j for s < kRows, j < count: kRows rows a step, kRows streams at once
// (one core keeps more reads in flight across four than along one; kernels::gemv_quarters_16).
template <int kRows>
FOUNDRY_AVX512_TARGET void rows_avx512(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                                       int64_t count, float* y) {
  const int64_t row_bytes = packed_bf16_row_bytes(k), head = header_bytes(k), blocks = k / kBlock;
  for (int64_t j = 0; j < count; ++j) {
    const uint8_t* row[kRows];
    __m512 s0[kRows], s1[kRows];
    for (int i = 0; i < kRows; ++i) {
      row[i] = w + (first + j + i * stride) * row_bytes;
      s0[i] = s1[i] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < blocks; ++b)
#pragma GCC unroll 4  // the rows' accumulators in registers (a loop over them kept them in memory)
      for (int i = 0; i < kRows; ++i) block_512(row[i], head, b, x, s0[i], s1[i]);
    for (int i = 0; i < kRows; ++i) y[first + j + i * stride] = _mm512_reduce_add_ps(_mm512_add_ps(s0[i], s1[i]));
  }
}

// A row's bf16 values in their order: each interleave's words put back by one permutation.
FOUNDRY_AVX512_TARGET void unpack_avx512(const uint8_t* row, int64_t k, uint16_t* out) {
  alignas(64) int16_t order[32];  // word i of the output from word order[i] of an interleave
  for (int w = 0; w < 32; ++w) {
    const int lane = w / 8, t = (w % 8) / 2, odd = w % 2;
    order[16 * odd + 4 * lane + t] = int16_t(w);
  }
  const __m512i idx = _mm512_load_si512(order);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
    if (row[b] == 0) {
      std::memcpy(out + b * kBlock, whole_block(block), size_t(kWholeBytes));
      continue;
    }
    const Words512 w = words_512(block, row[b]);
    _mm512_storeu_si512(out + b * kBlock, _mm512_permutexvar_epi16(idx, w.w0));
    _mm512_storeu_si512(out + b * kBlock + 32, _mm512_permutexvar_epi16(idx, w.w1));
  }
}

bool avx512_kernel() {
  static const bool ok = max_isa() == MaxIsa::Native && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw");
  return ok;
}

#else
bool avx512_kernel() { return false; }
#endif

}  // namespace

void unpack_bf16_row(const uint8_t* row, int64_t k, uint16_t* out) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return unpack_avx512(row, k, out);
#endif
  unpack_row_scalar(row, k, out);
}

void gemv_packed_bf16_rows(const uint8_t* w, int64_t k, const float* x, int64_t r0, int64_t r1, float* y) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return rows_avx512<1>(w, k, x, r0, 0, r1 - r0, y);
#endif
  rows_scalar(w, k, x, r0, r1, y);
}

void gemv_packed_bf16_quarters(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                               int64_t count, float* y) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return rows_avx512<4>(w, k, x, first, stride, count, y);
#endif
  for (int64_t s = 0; s < 4; ++s) rows_scalar(w, k, x, first + s * stride, first + s * stride + count, y);
}

bool packed_bf16_preferred() {
  static const bool on = avx512_kernel() && std::getenv("FOUNDRY_ROW_LAYOUT") == nullptr;
  return on;
}

}  // namespace foundry::quant

// Lossless packing of bfloat16 rows and its decode kernels (bf16_packed.h says the layout).
#include "quant/bf16_packed.h"

#include <algorithm>
#include <atomic>
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
#define FOUNDRY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FOUNDRY_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi2,fma")))
#define FOUNDRY_HAVE_PACKED_BF16_X86 1
#else
#define FOUNDRY_HAVE_PACKED_BF16_X86 0
#endif

namespace foundry::quant {

namespace {

constexpr int64_t kBlock = kPackedBF16Block, kBlockBytes = 96, kWholeBytes = 2 * kBlock;

int64_t header_bytes(int64_t k) { return (k / kBlock + 31) / 32 * 32; }

int exponent(uint16_t v) { return (v >> 7) & 0xFF; }

// The value at position p of block half g (bf16_packed.h).
int value_at(int g, int p) { return 32 * g + (p & 1 ? 16 + p / 2 : p / 2); }

// Whether block `v` (64 values) is stored whole, and its largest exponent.
bool stored_whole(const uint16_t* v, int& largest) {
  int hi = 0, lo = 255;
  for (int64_t i = 0; i < kBlock; ++i) {
    hi = std::max(hi, exponent(v[i]));
    lo = std::min(lo, exponent(v[i]));
  }
  largest = hi;
  return hi == 0 || hi - lo > 15;
}

int64_t row_escapes(const uint16_t* row, int64_t k) {
  int64_t n = 0;
  int largest = 0;
  for (int64_t b = 0; b < k / kBlock; ++b) n += stored_whole(row + b * kBlock, largest);
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

int64_t packed_bf16_escapes(const uint16_t* w, int64_t rows, int64_t k) {
  check_k(k);
  std::atomic<int64_t> n{0};
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    int64_t part = 0;
    for (int64_t r = lo; r < hi; ++r) part += row_escapes(w + r * k, k);
    n += part;
  });
  return n.load();
}

int64_t packed_bf16_bytes(int64_t rows, int64_t k, int64_t escapes) {
  return rows * packed_bf16_row_bytes(k) + escapes * kWholeBytes;
}

void pack_bf16(const uint16_t* w, int64_t rows, int64_t k, uint8_t* out, int64_t out_bytes) {
  const int64_t row_bytes = packed_bf16_row_bytes(k), blocks = k / kBlock;
  // Each row's first slot in the tail: the counts' running sum.
  std::vector<int64_t> first(size_t(rows + 1), 0);
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) first[size_t(r + 1)] = row_escapes(w + r * k, k);
  });
  for (int64_t r = 0; r < rows; ++r) first[size_t(r + 1)] += first[size_t(r)];
  FOUNDRY_CHECK_AS(ValueError, out_bytes == packed_bf16_bytes(rows, k, first.back()),
                   "pack_bf16: {} bytes for a packed [{}, {}] matrix that needs {}", out_bytes, rows, k,
                   packed_bf16_bytes(rows, k, first.back()));
  uint8_t* tail = out + rows * row_bytes;
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      uint8_t* row = out + r * row_bytes;
      std::memset(row, 0, size_t(row_bytes));
      int64_t slot = first[size_t(r)];
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t* v = w + r * k + b * kBlock;
        uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
        int largest = 0;
        if (stored_whole(v, largest)) {
          uint8_t* whole = tail + slot++ * kWholeBytes;
          std::memcpy(whole, v, size_t(kWholeBytes));
          const int64_t offset = whole - block;
          std::memcpy(block, &offset, sizeof offset);
          continue;  // header byte 0
        }
        row[b] = uint8_t(largest);
        for (int g = 0; g < 2; ++g)
          for (int p = 0; p < 32; ++p) {
            const uint16_t x = v[value_at(g, p)];
            block[p] |= uint8_t((largest - exponent(x)) << (4 * g));
            block[32 + 32 * g + p] = uint8_t(((x & 0x7F) << 1) | (x >> 15));
          }
      }
    }
  });
}

void check_packed_bf16(const uint8_t* w, int64_t rows, int64_t k, int64_t bytes) {
  const int64_t row_bytes = packed_bf16_row_bytes(k);
  FOUNDRY_CHECK_AS(ValueError, rows >= 0 && bytes >= rows * row_bytes && (bytes - rows * row_bytes) % kWholeBytes == 0,
                   "packed bf16: {} bytes cannot hold a packed [{}, {}] matrix", bytes, rows, k);
  const uint8_t* tail = w + rows * row_bytes;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / kBlock; ++b) {
      const uint8_t* row = w + r * row_bytes;
      if (row[b] != 0) continue;
      const auto* whole = reinterpret_cast<const uint8_t*>(whole_block(row + header_bytes(k) + b * kBlockBytes));
      FOUNDRY_CHECK_AS(ValueError, whole >= tail && whole + kWholeBytes <= w + bytes && (whole - tail) % kWholeBytes == 0,
                       "packed bf16: block {} of row {} points outside the matrix's tail", b, r);
    }
}

namespace {

void unpack_row_scalar(const uint8_t* row, int64_t k, uint16_t* out) {
  const int64_t blocks = k / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
    uint16_t* v = out + b * kBlock;
    const int largest = row[b];
    if (largest == 0) {
      std::memcpy(v, whole_block(block), size_t(kWholeBytes));
      continue;
    }
    for (int g = 0; g < 2; ++g)
      for (int p = 0; p < 32; ++p) {
        const int e = largest - ((block[p] >> (4 * g)) & 0xF);
        const uint8_t sm = block[32 + 32 * g + p];
        v[value_at(g, p)] = uint16_t((sm & 1) << 15 | e << 7 | sm >> 1);
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

// AVX-512: a block half's 32 positions are one vector of 16-bit lanes; its even lanes widen to
// values 0-15 of the half, its odd lanes to values 16-31. Two accumulators, s0 over values
// [32j, 32j + 16) and s1 over [32j + 16, 32j + 32), as GemvRows sums a bf16 row 16 lanes wide.
FOUNDRY_AVX512_TARGET inline void half_512(__m512i words, const float* x, __m512& s0, __m512& s1) {
  const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
  const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
  s0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), s0);
  s1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), s1);
}

FOUNDRY_AVX512_TARGET inline void widened_512(const uint16_t* v, const float* x, __m512& s0, __m512& s1) {
  for (int g = 0; g < 2; ++g) {
    const auto* p = reinterpret_cast<const __m256i*>(v + 32 * g);
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p + 1)), 16));
    s0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + 32 * g), s0);
    s1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 32 * g + 16), s1);
  }
}

// A packed block's two halves as bf16 words at their positions; `largest` its exponent byte.
struct Halves512 {
  __m512i h0, h1;
};
FOUNDRY_AVX512_TARGET inline Halves512 halves_512(const uint8_t* block, int largest) {
  const __m512i field = _mm512_set1_epi16(0x780), top = _mm512_set1_epi16(int16_t(largest << 7));
  const __m512i d = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block)));
  const __m512i e0 = _mm512_sub_epi16(top, _mm512_and_si512(_mm512_slli_epi16(d, 7), field));
  const __m512i e1 = _mm512_sub_epi16(top, _mm512_and_si512(_mm512_slli_epi16(d, 3), field));
  const __m512i m0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32)));
  const __m512i m1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64)));
  // (mantissa << 1 | sign) rotated right by one: sign << 15 | mantissa.
  return {_mm512_or_si512(_mm512_shldi_epi16(m0, m0, 15), e0), _mm512_or_si512(_mm512_shldi_epi16(m1, m1, 15), e1)};
}

// One block of a row: its 64 values' products added to the row's accumulators.
FOUNDRY_AVX512_TARGET inline void block_512(const uint8_t* row, int64_t head, int64_t b, const float* x, __m512& s0,
                                            __m512& s1) {
  const uint8_t* block = row + head + b * kBlockBytes;
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead, _MM_HINT_NTA);
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead + 64, _MM_HINT_NTA);
  const float* xb = x + b * kBlock;
  if (row[b] == 0) return widened_512(whole_block(block), xb, s0, s1);
  const Halves512 h = halves_512(block, row[b]);
  half_512(h.h0, xb, s0, s1);
  half_512(h.h1, xb + 32, s0, s1);
}

// A row's bf16 values in their order: a half's words back in order by one permutation (its even
// positions hold values 0-15, its odd ones 16-31).
FOUNDRY_AVX512_TARGET void unpack_avx512(const uint8_t* row, int64_t k, uint16_t* out) {
  alignas(64) int16_t order[32];
  for (int i = 0; i < 32; ++i) order[i] = int16_t(i < 16 ? 2 * i : 2 * (i - 16) + 1);
  const __m512i idx = _mm512_load_si512(order);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
    if (row[b] == 0) {
      std::memcpy(out + b * kBlock, whole_block(block), size_t(kWholeBytes));
      continue;
    }
    const Halves512 h = halves_512(block, row[b]);
    _mm512_storeu_si512(out + b * kBlock, _mm512_permutexvar_epi16(idx, h.h0));
    _mm512_storeu_si512(out + b * kBlock + 32, _mm512_permutexvar_epi16(idx, h.h1));
  }
}

// Rows first + s * stride + j for s < 4, j < count, four rows a step: four streams at once (one
// core keeps more reads in flight across four than along one; kernels::gemv_quarters_16).
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
      for (int i = 0; i < kRows; ++i) block_512(row[i], head, b, x, s0[i], s1[i]);
    for (int i = 0; i < kRows; ++i) y[first + j + i * stride] = _mm512_reduce_add_ps(_mm512_add_ps(s0[i], s1[i]));
  }
}

// AVX2: 16 positions a vector. Positions 0-15 of a half widen to its values 0-7 (even lanes) and
// 16-23 (odd); positions 16-31 to 8-15 and 24-31. s0 takes values [16j, 16j + 8), s1 [16j + 8,
// 16j + 16), in order, as GemvRows sums a bf16 row 8 lanes wide.
FOUNDRY_AVX2_TARGET inline __m256 even_lanes(__m256i words) { return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16)); }
FOUNDRY_AVX2_TARGET inline __m256 odd_lanes(__m256i words) {
  return _mm256_castsi256_ps(_mm256_and_si256(words, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}

FOUNDRY_AVX2_TARGET inline __m256i words_avx2(const uint8_t* sign_mantissa, __m256i exponents) {
  const __m256i m = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sign_mantissa)));
  return _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(m, 1), _mm256_slli_epi16(m, 15)), exponents);
}

FOUNDRY_AVX2_TARGET inline void block_avx2(const uint8_t* row, int64_t head, int64_t b, const float* x, __m256& s0,
                                           __m256& s1) {
  const uint8_t* block = row + head + b * kBlockBytes;
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead, _MM_HINT_NTA);
  _mm_prefetch(reinterpret_cast<const char*>(block) + kAhead + 64, _MM_HINT_NTA);
  const float* xb = x + b * kBlock;
  if (row[b] == 0) {
    const uint16_t* v = whole_block(block);
    for (int64_t i = 0; i < kBlock; i += 16) {
      const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
      const __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i + 8)));
      s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)), _mm256_loadu_ps(xb + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(hi, 16)), _mm256_loadu_ps(xb + i + 8), s1);
    }
    return;
  }
  const __m256i field = _mm256_set1_epi16(0x780), top = _mm256_set1_epi16(int16_t(row[b] << 7));
  for (int q = 0; q < 2; ++q) {  // positions 16q..16q+15 of both halves
    const __m256i d = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * q)));
    const __m256i e0 = _mm256_sub_epi16(top, _mm256_and_si256(_mm256_slli_epi16(d, 7), field));
    const __m256i e1 = _mm256_sub_epi16(top, _mm256_and_si256(_mm256_slli_epi16(d, 3), field));
    const __m256i h0 = words_avx2(block + 32 + 16 * q, e0), h1 = words_avx2(block + 64 + 16 * q, e1);
    __m256& s = q == 0 ? s0 : s1;  // q 0: values 0-7 and 16-23 of each half; q 1: 8-15 and 24-31
    s = _mm256_fmadd_ps(even_lanes(h0), _mm256_loadu_ps(xb + 8 * q), s);
    s = _mm256_fmadd_ps(odd_lanes(h0), _mm256_loadu_ps(xb + 16 + 8 * q), s);
    s = _mm256_fmadd_ps(even_lanes(h1), _mm256_loadu_ps(xb + 32 + 8 * q), s);
    s = _mm256_fmadd_ps(odd_lanes(h1), _mm256_loadu_ps(xb + 48 + 8 * q), s);
  }
}

// Positions 0-15 (16-31) of a half: values 0-7 and 16-23 (8-15 and 24-31), even and odd lanes.
FOUNDRY_AVX2_TARGET inline void store_positions_avx2(__m256i words, uint16_t* half, int q) {
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, split), 0xD8);  // evens, then odds
  _mm_storeu_si128(reinterpret_cast<__m128i*>(half + 8 * q), _mm256_castsi256_si128(v));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(half + 16 + 8 * q), _mm256_extracti128_si256(v, 1));
}

FOUNDRY_AVX2_TARGET void unpack_avx2(const uint8_t* row, int64_t k, uint16_t* out) {
  const __m256i field = _mm256_set1_epi16(0x780);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const uint8_t* block = row + header_bytes(k) + b * kBlockBytes;
    if (row[b] == 0) {
      std::memcpy(out + b * kBlock, whole_block(block), size_t(kWholeBytes));
      continue;
    }
    const __m256i top = _mm256_set1_epi16(int16_t(row[b] << 7));
    for (int q = 0; q < 2; ++q) {
      const __m256i d = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * q)));
      const __m256i e0 = _mm256_sub_epi16(top, _mm256_and_si256(_mm256_slli_epi16(d, 7), field));
      const __m256i e1 = _mm256_sub_epi16(top, _mm256_and_si256(_mm256_slli_epi16(d, 3), field));
      store_positions_avx2(words_avx2(block + 32 + 16 * q, e0), out + b * kBlock, q);
      store_positions_avx2(words_avx2(block + 64 + 16 * q, e1), out + b * kBlock + 32, q);
    }
  }
}

template <int kRows>
FOUNDRY_AVX2_TARGET void rows_avx2(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                                   int64_t count, float* y) {
  const int64_t row_bytes = packed_bf16_row_bytes(k), head = header_bytes(k), blocks = k / kBlock;
  for (int64_t j = 0; j < count; ++j) {
    const uint8_t* row[kRows];
    __m256 s0[kRows], s1[kRows];
    for (int i = 0; i < kRows; ++i) {
      row[i] = w + (first + j + i * stride) * row_bytes;
      s0[i] = s1[i] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < blocks; ++b)
      for (int i = 0; i < kRows; ++i) block_avx2(row[i], head, b, x, s0[i], s1[i]);
    for (int i = 0; i < kRows; ++i) y[first + j + i * stride] = avx2::sum_lanes(_mm256_add_ps(s0[i], s1[i]));
  }
}

bool avx512_kernel() {
  static const bool ok = max_isa() == MaxIsa::Native && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi2");
  return ok;
}

bool avx2_kernel() {
  static const bool ok = max_isa() != MaxIsa::SSE4 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

#else
bool avx512_kernel() { return false; }
bool avx2_kernel() { return false; }
#endif

}  // namespace

void unpack_bf16_row(const uint8_t* row, int64_t k, uint16_t* out) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return unpack_avx512(row, k, out);
  if (avx2_kernel()) return unpack_avx2(row, k, out);
#endif
  unpack_row_scalar(row, k, out);
}

void gemv_packed_bf16_rows(const uint8_t* w, int64_t k, const float* x, int64_t r0, int64_t r1, float* y) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return rows_avx512<1>(w, k, x, r0, 0, r1 - r0, y);
  if (avx2_kernel()) return rows_avx2<1>(w, k, x, r0, 0, r1 - r0, y);
#endif
  rows_scalar(w, k, x, r0, r1, y);
}

void gemv_packed_bf16_quarters(const uint8_t* w, int64_t k, const float* x, int64_t first, int64_t stride,
                               int64_t count, float* y) {
#if FOUNDRY_HAVE_PACKED_BF16_X86
  if (avx512_kernel()) return rows_avx512<4>(w, k, x, first, stride, count, y);
  if (avx2_kernel()) return rows_avx2<4>(w, k, x, first, stride, count, y);
#endif
  for (int64_t s = 0; s < 4; ++s) rows_scalar(w, k, x, first + s * stride, first + s * stride + count, y);
}

bool packed_bf16_preferred() {
  static const bool on = (avx512_kernel() || avx2_kernel()) && std::getenv("FOUNDRY_ROW_LAYOUT") == nullptr;
  return on;
}

}  // namespace foundry::quant

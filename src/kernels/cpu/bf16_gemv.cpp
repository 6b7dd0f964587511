// bf16 matrix-vector products on CPUs with AVX-512 BF16 (vdpbf16ps: 32 bf16 pairs multiplied and
// summed into 16 float lanes per instruction, against Highway's two shifts, two masks and two FMAs
// for the same work in quant/q8_simd.cpp's DotBF16, which serves every other CPU). Decode with
// bf16 weights (`--quantize bf16`, or a bf16 model computed in bf16) streams the weight rows once
// per token: gemm() (M == 1) and quant::gemv use this kernel.
#include <algorithm>
#include <cstring>

#include "foundry/core/parallel.h"
#include "kernels/cpu/bf16_gemv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FOUNDRY_BF16_KERNELS 1
#define FOUNDRY_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define FOUNDRY_BF16_KERNELS 0
#endif

namespace foundry::kernels {

#if FOUNDRY_BF16_KERNELS

namespace {

constexpr int64_t kPrefetchBytes = 1024;  // the weights stream once: fetch this far ahead

FOUNDRY_AVX512_BF16_TARGET inline __m512 dot_step(__m512 acc, const uint16_t* w, const uint16_t* x) {
  return _mm512_dpbf16_ps(acc, (__m512bh)(_mm512_loadu_si512(w)),
                          (__m512bh)(_mm512_loadu_si512(x)));
}

// sum_i w_i x_i over k bf16 values: four independent accumulators (the instruction's latency), a
// masked step for the last k % 32.
FOUNDRY_AVX512_BF16_TARGET float dot_bf16_row(const uint16_t* w, const uint16_t* x, int64_t k) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 128 <= k; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes + 128, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes + 192, _MM_HINT_T0);
    acc0 = dot_step(acc0, w + i, x + i);
    acc1 = dot_step(acc1, w + i + 32, x + i + 32);
    acc2 = dot_step(acc2, w + i + 64, x + i + 64);
    acc3 = dot_step(acc3, w + i + 96, x + i + 96);
  }
  for (; i + 32 <= k; i += 32) acc0 = dot_step(acc0, w + i, x + i);
  if (i < k) {
    const __mmask32 m = _cvtu32_mask32((1u << (k - i)) - 1u);
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)(_mm512_maskz_loadu_epi16(m, w + i)),
                            (__m512bh)(_mm512_maskz_loadu_epi16(m, x + i)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// Four rows (ld apart) against x: x's vectors are loaded once per step for the four rows, two
// accumulators per row (eight independent chains). With `prefetch_next`, the same columns of the
// next four rows are fetched while these are read (rows of a few KB end before the hardware
// prefetcher ramps up on the next ones), as the float32 gemv does.
FOUNDRY_AVX512_BF16_TARGET void dot4_bf16_rows(const uint16_t* w, int64_t ld, const uint16_t* x, int64_t k,
                                               bool prefetch_next, float* y) {
  __m512 acc[4][2];
  for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
  const char* next = reinterpret_cast<const char*>(w + 4 * ld);
  const int64_t row_bytes = ld * 2;
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    if (prefetch_next) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        _mm_prefetch(next + r * row_bytes + 2 * i, _MM_HINT_T0);
        _mm_prefetch(next + r * row_bytes + 2 * i + 64, _MM_HINT_T0);
      }
    }
    const __m512i x0 = _mm512_loadu_si512(x + i), x1 = _mm512_loadu_si512(x + i + 32);
#pragma GCC unroll 4  // the accumulators stay in registers
    for (int r = 0; r < 4; ++r) {
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)_mm512_loadu_si512(w + r * ld + i), (__m512bh)x0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)_mm512_loadu_si512(w + r * ld + i + 32), (__m512bh)x1);
    }
  }
  for (; i < k; i += 32) {  // the last k % 64: a whole step of 32, then a masked one
    const __mmask32 m = k - i >= 32 ? ~__mmask32(0) : _cvtu32_mask32((1u << (k - i)) - 1u);
    const __m512i xv = _mm512_maskz_loadu_epi16(m, x + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * ld + i), (__m512bh)xv);
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

}  // namespace

bool avx512_bf16_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

void gemv_bf16_avx512_rows(const void* w, int64_t rows, int64_t k, int64_t ld, const void* x, int64_t r0, int64_t r1,
                           float* y) {
  const auto* base = static_cast<const uint16_t*>(w);
  const auto* xb = static_cast<const uint16_t*>(x);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) dot4_bf16_rows(base + r * ld, ld, xb, k, r + 8 <= rows, y + r);
  for (; r < r1; ++r) y[r] = dot_bf16_row(base + r * ld, xb, k);
}

void gemv_bf16_avx512(const void* w, int64_t rows, int64_t k, int64_t ld, const void* x, float* y) {
  // Groups of four rows; ~32 KB of weights per chunk and up to 16 chunks per thread, as the
  // float32 gemv (finer chunks even out the threads' shares); the prefetch runs on past a chunk's
  // end into the matrix's next rows.
  const int64_t groups = (rows + 3) / 4;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(8 * k, 1));
  parallel_for(0, groups, grain, 16, [&](int64_t b, int64_t e) {
    gemv_bf16_avx512_rows(w, rows, k, ld, x, 4 * b, std::min(rows, 4 * e), y);
  });
}

#else

bool avx512_bf16_available() { return false; }
void gemv_bf16_avx512(const void*, int64_t, int64_t, int64_t, const void*, float*) {}
void gemv_bf16_avx512_rows(const void*, int64_t, int64_t, int64_t, const void*, int64_t, int64_t, float*) {}

#endif

}  // namespace foundry::kernels

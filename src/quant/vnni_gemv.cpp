// Matrix-vector products of q8_0 and q4_0 weights (ggml's layouts, used in place) with a q8_0
// activation row on CPUs with AVX-512 VNNI (vpdpbusd: 64 u8 x s8 products summed into 16 int32
// lanes per instruction), two 32-value blocks per 512-bit step. Chosen at run time
// (vnni_available(), from CPUID); the Highway kernels in q8_simd.cpp serve every other CPU.
//
// The activation row is prepared once per product: its int8 levels contiguous (64 bytes per two
// blocks), each block's float scale spread over the 8 int32 lanes its products land in, and for
// q4_0 the lanes' 8 * sum(y) (q4_0 stores level + 8 as an unsigned nibble, so
// sum((u - 8) y) = sum(u y) - 8 sum(y)). q8_0 weights are signed: |w| x (y with w's sign).
#include "quant/vnni_gemv.h"

#include <cstring>
#include <utility>
#include <vector>

#include "foundry/core/parallel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FOUNDRY_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_HAVE_VNNI_KERNELS 1
#else
#define FOUNDRY_HAVE_VNNI_KERNELS 0
#endif

namespace foundry::quant {

#if FOUNDRY_HAVE_VNNI_KERNELS

bool vnni_available() {
  // Every AVX-512 CPU has F16C (clang's __builtin_cpu_supports does not know the name).
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
  return ok;
}

namespace {

constexpr int64_t kQ8Bytes = 34, kQ4Bytes = 18;
// Software prefetch distance: the weights stream once, so fetch this far ahead of the loads.
constexpr int64_t kPrefetchBytes = 1024;

struct PreparedActivation {
  std::vector<int8_t> levels;    // k, contiguous
  std::vector<float> scales;     // k / 64 x 16: block 2c's scale in lanes 0-7, block 2c + 1's in 8-15
  std::vector<int32_t> eight_y;  // k / 64 x 16: 8 * (sum of the 4 levels each lane's products cover)
};

FOUNDRY_VNNI_TARGET PreparedActivation prepare(const uint8_t* xq, int64_t k, bool with_sums) {
  PreparedActivation a;
  const int64_t blocks = k / 32;
  a.levels.resize(size_t(k));
  a.scales.resize(size_t(blocks / 2 * 16));
  if (with_sums) a.eight_y.resize(size_t(blocks / 2 * 16));
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = xq + b * kQ8Bytes;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    std::memcpy(a.levels.data() + b * 32, blk + 2, 32);
    if (b / 2 * 2 + 1 >= blocks) continue;  // an odd last block is handled separately
    const float s = _cvtsh_ss(h);
    for (int l = 0; l < 8; ++l) {
      a.scales[size_t(b / 2 * 16 + (b % 2) * 8 + l)] = s;
      if (with_sums) {
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2 + 4 * l);
        a.eight_y[size_t(b / 2 * 16 + (b % 2) * 8 + l)] = 8 * (q[0] + q[1] + q[2] + q[3]);
      }
    }
  }
  return a;
}

FOUNDRY_VNNI_TARGET inline __m512 pair_scales(const uint8_t* w, int64_t block_bytes) {
  uint16_t ha, hb;
  std::memcpy(&ha, w, 2);
  std::memcpy(&hb, w + block_bytes, 2);
  return _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(ha)), _mm256_set1_ps(_cvtsh_ss(hb)), 1);
}

FOUNDRY_VNNI_TARGET float dot_q8_0_row(const uint8_t* w, const PreparedActivation& a, const uint8_t* xq, int64_t k) {
  const int64_t pairs = k / 64;
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();  // two chains: FMA latency
  for (int64_t c = 0; c < pairs; ++c, w += 2 * kQ8Bytes) {
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + 64, _MM_HINT_T0);
    const __m512i wv = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ8Bytes + 2)), 1);
    const __m512i yv = _mm512_loadu_si512(a.levels.data() + c * 64);
    const __m512i signed_y = _mm512_mask_sub_epi8(yv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), yv);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wv), signed_y);
    const __m512 s = _mm512_mul_ps(pair_scales(w, kQ8Bytes), _mm512_loadu_ps(a.scales.data() + c * 16));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc);
    std::swap(acc, acc2);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
  if ((k / 32) % 2) {  // the odd last block, in scalar
    const uint8_t* yb = xq + (k / 32 - 1) * kQ8Bytes;
    uint16_t hw, hy;
    std::memcpy(&hw, w, 2);
    std::memcpy(&hy, yb, 2);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += int32_t(int8_t(w[2 + j])) * int32_t(int8_t(yb[2 + j]));
    sum += float(s) * _cvtsh_ss(hw) * _cvtsh_ss(hy);
  }
  return sum;
}

FOUNDRY_VNNI_TARGET float dot_q4_0_row(const uint8_t* w, const PreparedActivation& a, const uint8_t* xq, int64_t k) {
  const int64_t pairs = k / 64;
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
  for (int64_t c = 0; c < pairs; ++c, w += 2 * kQ4Bytes) {
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    // [a(16 bytes) b(16 bytes)] -> low nibbles [a_lo b_lo], high [a_hi b_hi] -> [a_lo a_hi b_lo b_hi].
    const __m256i ab = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kQ4Bytes + 2)), 1);
    const __m256i lo = _mm256_and_si256(ab, low_mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ab, 4), low_mask);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // [a_lo b_lo a_hi b_hi]
    const __m512i u = _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));
    const __m512i yv = _mm512_loadu_si512(a.levels.data() + c * 64);
    const __m512i dot = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yv),
                                         _mm512_loadu_si512(a.eight_y.data() + c * 16));
    const __m512 s = _mm512_mul_ps(pair_scales(w, kQ4Bytes), _mm512_loadu_ps(a.scales.data() + c * 16));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc);
    std::swap(acc, acc2);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
  if ((k / 32) % 2) {
    const uint8_t* yb = xq + (k / 32 - 1) * kQ8Bytes;
    uint16_t hw, hy;
    std::memcpy(&hw, w, 2);
    std::memcpy(&hy, yb, 2);
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      s += (int32_t(w[2 + j] & 0x0F) - 8) * int32_t(int8_t(yb[2 + j]));
      s += (int32_t(w[2 + j] >> 4) - 8) * int32_t(int8_t(yb[2 + 16 + j]));
    }
    sum += float(s) * _cvtsh_ss(hw) * _cvtsh_ss(hy);
  }
  return sum;
}

template <class Dot>
void gemv_vnni(const uint8_t* w, int64_t rows, int64_t k, int64_t block_bytes, const uint8_t* xq, float* y,
               bool with_sums, Dot dot) {
  const PreparedActivation a = prepare(xq, k, with_sums);
  const int64_t row_bytes = k / 32 * block_bytes;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) y[r] = dot(w + r * row_bytes, a, xq, k);
  });
}

}  // namespace

void gemv_q8_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  gemv_vnni(static_cast<const uint8_t*>(w), rows, k, kQ8Bytes, static_cast<const uint8_t*>(xq), y, false, dot_q8_0_row);
}

void gemv_q4_0_vnni(const void* w, int64_t rows, int64_t k, const void* xq, float* y) {
  gemv_vnni(static_cast<const uint8_t*>(w), rows, k, kQ4Bytes, static_cast<const uint8_t*>(xq), y, true, dot_q4_0_row);
}

#else

bool vnni_available() { return false; }
void gemv_q8_0_vnni(const void*, int64_t, int64_t, const void*, float*) {}
void gemv_q4_0_vnni(const void*, int64_t, int64_t, const void*, float*) {}

#endif

}  // namespace foundry::quant

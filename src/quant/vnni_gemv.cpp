// Matrix-vector products of q8_0, q4_0, q4_1, q5_0 and q5_1 weights (ggml's layouts, used in
// place) with a q8_0 activation row on CPUs with AVX-512 VNNI (vpdpbusd: 64 u8 x s8 products
// summed into 16 int32 lanes per instruction). Chosen at run time (vnni_available(), from CPUID);
// the AVX2 kernels (avx2_gemv.cpp) and Highway's (q8_simd.cpp) serve every other CPU.
//
// The activation row is prepared once per product in the order each format's step reads weights
// (q8_0: two blocks per 512-bit vector; the nibble formats: four blocks' nibbles per vector).
// q4_1 / q5_0 / q5_1 had run one block a step in 256-bit AVX2 code (the q5 fifth bits through an
// AVX-512 byte mask): decode's products over Llama-110M's weights at 1 thread 15-18 / 14.6-14.9 /
// 17.7-18.5 GB/s, in these steps 27-35 / 24-32 / 23-31 (Zen 5, alternating processes); Llama-110M
// q5_0 decode 0.92x llama.cpp (run U) -> 1.82x right after. The nibble formats' rows go four at a
// time so each step's activation vectors and scales are loaded once for four rows (q8_0's one at a
// time: see vnni_rows for both, measured from memory). On a Zen 5 EPYC at 1 thread (768 columns,
// one 53 MB matrix read repeatedly, so partly from L3): q8_0 29.9 -> 40-44 GB/s, q4_0 12.7 -> 31
// GB/s in groups of four against one row at a time with two blocks per step.
#include "quant/vnni_gemv.h"

#include "core/isa.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "quant/avx2_inline.h"
#define FOUNDRY_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))
#define FOUNDRY_HAVE_VNNI_KERNELS 1
#else
#define FOUNDRY_HAVE_VNNI_KERNELS 0
#endif

namespace foundry::quant {

#if FOUNDRY_HAVE_VNNI_KERNELS

bool vnni_available() {
  // Every AVX-512 CPU has F16C (clang's __builtin_cpu_supports does not know the name).
  static const bool ok = max_isa() == MaxIsa::Native && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
  return ok;
}

namespace {

constexpr int64_t kQ8Bytes = 34;

// The activation row laid out for one format's steps (see each format's prepare): its levels in
// the order the weight vectors' bytes come in, each lane's float scale and, for the nibble
// formats, each lane's level sum (the sum of the levels its products cover) times the format's
// offset (q4_0: 8, q5_0: 16) or times the lane's scale (q4_1 / q5_1, for the blocks' minimums).
struct PreparedActivation {
  std::vector<int8_t> levels;
  std::vector<float> scales;           // 16 per step
  std::vector<int32_t> level_offsets;  // 16 per step (q4_0, q5_0)
  std::vector<float> level_sums;       // 16 per step (q4_1, q5_1)
};

FOUNDRY_VNNI_TARGET inline float activation_scale(const uint8_t* xq, int64_t block) {
  return avx2::f16_at(xq + block * kQ8Bytes);
}

// One row's step: the blocks' integer dot products with the activation in int32 lanes, each
// lane's block scale and (q4_1 / q5_1) block minimum.
struct StepDot {
  __m512i dot;
  __m512 scales;
  __m512 mins;
};

// q8_0 weights, two blocks (64 levels, one vector) per step: lanes 0-7 hold block a's products,
// 8-15 block b's. The weights are signed: |w| x (y with w's sign).
struct Q8_0Step {
  static constexpr BlockFormat kFormat = BlockFormat::Q8_0;
  static constexpr int64_t kBytes = kQ8Bytes, kBlocks = 2, kRows = 1;
  static constexpr bool kMin = false;
  using Y = __m512i;

  FOUNDRY_VNNI_TARGET static void prepare(const uint8_t* xq, int64_t k, PreparedActivation& a) {
    const int64_t steps = k / 32 / kBlocks;
    a.levels.resize(size_t(steps * 64));
    a.scales.resize(size_t(steps * 16));
    for (int64_t b = 0; b < steps * kBlocks; ++b) {
      std::memcpy(a.levels.data() + b * 32, xq + b * kQ8Bytes + 2, 32);
      std::fill_n(a.scales.begin() + b * 8, 8, activation_scale(xq, b));
    }
  }
  FOUNDRY_VNNI_TARGET static Y load(const PreparedActivation& a, int64_t c) {
    return _mm512_loadu_si512(a.levels.data() + c * 64);
  }
  FOUNDRY_VNNI_TARGET static StepDot dot_and_scales(const uint8_t* w, Y y, const PreparedActivation&, int64_t) {
    const __m512i wv = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ8Bytes + 2)), 1);
    const __m512i signed_y = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), y);
    uint16_t ha, hb;
    std::memcpy(&ha, w, 2);
    std::memcpy(&hb, w + kQ8Bytes, 2);
    return {_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wv), signed_y),
            _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(short(ha))),
                                                    _mm_set1_epi16(short(hb)), 1)),
            _mm512_setzero_ps()};
  }
};

// The 32-value nibble formats, four blocks (128 levels) a step: q4_0 (fp16 d, 16 bytes of
// nibbles), q4_1 (d, fp16 m, nibbles), q5_0 (d, 32 fifth bits, nibbles), q5_1 (d, m, fifth bits,
// nibbles); a value is d (u - 8) (q4_0), d u + m (q4_1), d (u - 16) (q5_0) or d u + m (q5_1) for
// its unsigned level u. Each block's nibbles hold levels 0-15 low and 16-31 high: the four
// blocks' nibble bytes make one vector, its low nibbles dot the activation's levels [a0-15 b0-15
// c0-15 d0-15] and its high nibbles [a16-31 b16-31 ...] into the same lanes (4 per block), the
// q5 kinds' fifth bits added as 16 through byte masks (the low and high 16 bits of each block's 32
// become the two vectors' 64-bit masks). sum((u - o) y) = sum(u y) - o sum(y); the minimums add
// m dy sum(y) per lane. Every block and every field starts at an even byte, so the step's bytes are
// read as 16-bit words: one 64-byte load from its start and one 32-byte load of its last 32 bytes,
// permuted by word (vpermt2w) into the nibbles' vector and the scales' (and the fifth bits').
// Four 16-byte loads with three inserts and a scale vector built from four scalar loads ran q4_0 at
// 33.7 GB/s over L2-resident rows, these at 44; decode's products over Llama-110M-shaped matrices
// from memory at 27.3-29.0 GB/s before, 30.7-35.9 after at 1 thread, 48.7 -> 54.1 at 2 (Zen 5,
// alternating in one process). The same for q8_0's two 34-byte blocks measured 2-16% slower there:
// it keeps its loads.
template <BlockFormat F>
struct NibbleStep {
  using L = NibbleLayout<F>;
  static constexpr BlockFormat kFormat = F;
  static constexpr bool kMin = L::kMin, kFifth = L::kFifth;
  static constexpr int kHeaderWords = int(L::kHeader / 2);  // d [m] [fifth bits]
  static constexpr int kBlockWords = int(L::kBytes / 2);
  static constexpr int64_t kBytes = L::kBytes, kBlocks = 4, kRows = 4;
  static constexpr int kTailWord = 4 * kBlockWords - 16;  // the 32-byte load's first word
  static constexpr int32_t kOffset = L::kOffset;
  struct Y {
    __m512i low, high;
  };
  struct Words {  // vpermt2w indices: word x of the step is x (< 32) or 32 + (x - kTailWord)
    uint16_t nibbles[32], scales[32], fifth[32];
  };
  static constexpr uint16_t word(int x) { return uint16_t(x < 32 ? x : 32 + x - kTailWord); }
  static constexpr Words words() {
    Words t{};
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 8; ++i) t.nibbles[8 * j + i] = word(kBlockWords * j + kHeaderWords + i);
      for (int l = 0; l < 4; ++l) {
        t.scales[4 * j + l] = word(kBlockWords * j);           // d
        t.scales[16 + 4 * j + l] = word(kBlockWords * j + 1);  // m (the _1 kinds)
      }
      const int fifth = kBlockWords * j + 1 + (kMin ? 1 : 0);
      t.fifth[j] = word(fifth);          // bits 0-15: the low nibbles' mask
      t.fifth[4 + j] = word(fifth + 1);  // bits 16-31: the high nibbles'
    }
    return t;
  }
  static constexpr Words kWords = words();

  FOUNDRY_VNNI_TARGET static void prepare(const uint8_t* xq, int64_t k, PreparedActivation& a) {
    const int64_t steps = k / 32 / kBlocks;
    a.levels.resize(size_t(steps * 128));
    a.scales.resize(size_t(steps * 16));
    a.level_offsets.resize(kOffset ? size_t(steps * 16) : 0);
    a.level_sums.resize(kMin ? size_t(steps * 16) : 0);
    const __m256i one_bytes = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < steps * kBlocks; ++b) {
      const uint8_t* y = xq + b * kQ8Bytes + 2;
      int8_t* out = a.levels.data() + b / kBlocks * 128 + b % kBlocks * 16;
      std::memcpy(out, y, 16);
      std::memcpy(out + 64, y + 16, 16);
      const float dy = activation_scale(xq, b);
      std::fill_n(a.scales.begin() + b * 4, 4, dy);
      // Lane l's level sum: values 4l .. 4l + 3 and 16 + 4l .. 16 + 4l + 3.
      const __m256i quads = _mm256_dpbusd_epi32(_mm256_setzero_si256(), one_bytes,
                                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
      const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
      if constexpr (kOffset != 0)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(a.level_offsets.data() + b * 4),
                         _mm_mullo_epi32(sums, _mm_set1_epi32(kOffset)));
      if constexpr (kMin)
        _mm_storeu_ps(a.level_sums.data() + b * 4, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_set1_ps(dy)));
    }
  }
  FOUNDRY_VNNI_TARGET static Y load(const PreparedActivation& a, int64_t c) {
    return {_mm512_loadu_si512(a.levels.data() + c * 128), _mm512_loadu_si512(a.levels.data() + c * 128 + 64)};
  }
  FOUNDRY_VNNI_TARGET static StepDot dot_and_scales(const uint8_t* w, const Y& y, const PreparedActivation& a,
                                                    int64_t c) {
    const __m512i head = _mm512_loadu_si512(w);
    const __m512i tail =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * kTailWord)));
    const __m512i q = _mm512_permutex2var_epi16(head, _mm512_loadu_si512(kWords.nibbles), tail);
    const __m512i low_mask = _mm512_set1_epi8(0x0F);
    __m512i lo = _mm512_and_si512(q, low_mask);
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low_mask);
    if constexpr (kFifth) {
      const __m128i bits =
          _mm512_castsi512_si128(_mm512_permutex2var_epi16(head, _mm512_loadu_si512(kWords.fifth), tail));
      const __m512i sixteen = _mm512_set1_epi8(16);
      lo = _mm512_mask_add_epi8(lo, __mmask64(_mm_cvtsi128_si64(bits)), lo, sixteen);  // lo < 16: add is or
      hi = _mm512_mask_add_epi8(hi, __mmask64(_mm_extract_epi64(bits, 1)), hi, sixteen);
    }
    __m512i uy = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, y.low), hi, y.high);
    if constexpr (kOffset != 0) uy = _mm512_sub_epi32(uy, _mm512_loadu_si512(a.level_offsets.data() + c * 16));
    const __m512i scale_words = _mm512_permutex2var_epi16(head, _mm512_loadu_si512(kWords.scales), tail);
    const __m512 scales = _mm512_cvtph_ps(_mm512_castsi512_si256(scale_words));
    const __m512 mins = kMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(scale_words, 1)) : _mm512_setzero_ps();
    return {uy, scales, mins};
  }
};

// Rows [r, r + R) of the product: the activation's levels and scales are loaded once per step for
// all R rows. The prefetches fetch the same columns `ahead` bytes on (a whole number of rows past
// this group), so each of the R streams is fetched ahead instead of prefetching into the group's
// own next row (rows of a few hundred bytes end before a 1 KB lead matters).
template <class Step, int R>
FOUNDRY_VNNI_TARGET void dot_rows(const uint8_t* w, int64_t row_bytes, int64_t ahead, const PreparedActivation& a,
                                  const uint8_t* xq, int64_t k, float* y) {
  const int64_t blocks = k / 32, steps = blocks / Step::kBlocks;
  constexpr int64_t kStepBytes = Step::kBlocks * Step::kBytes;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < steps; ++c) {
    const typename Step::Y yv = Step::load(a, c);
    const __m512 ys = _mm512_loadu_ps(a.scales.data() + c * 16);
    const __m512 ls = Step::kMin ? _mm512_loadu_ps(a.level_sums.data() + c * 16) : _mm512_setzero_ps();
    #pragma GCC unroll 4  // the accumulators stay in registers (a rolled loop kept them on the stack)
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w + i * row_bytes + c * kStepBytes;
      for (int64_t o = 0; o < kStepBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + o, _MM_HINT_NTA);
      const StepDot d = Step::dot_and_scales(p, yv, a, c);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d.dot), _mm512_mul_ps(d.scales, ys), acc[i]);
      if constexpr (Step::kMin) acc[i] = _mm512_fmadd_ps(d.mins, ls, acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float sum = _mm512_reduce_add_ps(acc[i]);
    // Blocks left over: the scalar reference's dot (its integer sums are these kernels').
    for (int64_t b = steps * Step::kBlocks; b < blocks; ++b)
      sum += traits(Step::kFormat).dot(w + i * row_bytes + b * Step::kBytes, xq + b * kQ8Bytes, 32);
    y[i] = sum;
  }
}

// Rows go in groups of 4; the prefetch lead is about 12 KB (measured on a Zen 5 EPYC, 1 thread,
// q8_0 768-column rows: 29-32 GB/s with a 1 KB lead inside one row at a time; in groups of 4,
// leads of 4 / 8 / 12 / 16-32 rows: 26.6 / 36.4 / 43.6 / 40-42.5 GB/s, single runs), rounded up to
// whole rows, at least 4 rows. Those runs read one 53 MB matrix over and over, which the L3 partly
// serves; over 256 MB of distinct matrices (every product from DRAM) the kernel streams 20-22 GB/s
// at 1 thread whatever the lead (3 KB to 96 KB, or an L2 hint), where a plain sum reads ~30-33.
// The hint is prefetchnta: as fast as prefetcht0 here (in-process A/B over Llama-110M-shaped
// matrices, 1 and 2 threads: 0.98-1.00x), and it leaves the L2 to the rest of the step. After 4 MB
// streamed with prefetcht0 a 256 KB working set read back at 10.4 ns a line (from L3), after
// prefetchnta or plain loads at 4.4-4.9 (still in L2); a decode step's code, allocator and tensor
// records between products are that working set.
// q8_0 goes one row at a time: over Llama-110M-shaped matrices from memory (in-process A/B, Zen 5)
// 23.6 GB/s against 18.6 in groups of 4 at 1 thread, 51.5 against 44.5 at 2; q4_0, whose step
// costs more arithmetic a byte, loses with one row (22.9 against 25.7, 33.9 against 40.9) and keeps
// its groups (Step::kRows).
template <class Step>
void vnni_rows(const uint8_t* w, const PreparedActivation& a, const uint8_t* xq, int64_t k, int64_t r0, int64_t r1,
               float* y) {
  constexpr int64_t kGroup = Step::kRows;
  const int64_t row_bytes = k / 32 * Step::kBytes;
  const int64_t ahead = std::max<int64_t>(kGroup, (12288 + row_bytes - 1) / std::max<int64_t>(row_bytes, 1)) * row_bytes;
  int64_t r = r0;
  for (; r + kGroup <= r1; r += kGroup) dot_rows<Step, kGroup>(w + r * row_bytes, row_bytes, ahead, a, xq, k, y + r);
  for (; r < r1; ++r) dot_rows<Step, 1>(w + r * row_bytes, row_bytes, ahead, a, xq, k, y + r);
}

// The activation as a product's row ranges read it. One per thread, reused: a product is prepared
// and run to its end before its thread prepares the next (five allocations a product otherwise).
struct PreparedProduct {
  const uint8_t* xq = nullptr;
  int64_t k = 0;
  PreparedActivation a;
};

template <class Step>
GemvRowRange prepared_rows(const void* xq, int64_t k) {
  thread_local PreparedProduct p;
  p.xq = static_cast<const uint8_t*>(xq);
  p.k = k;
  Step::prepare(p.xq, k, p.a);
  const PreparedProduct* pp = &p;  // the only capture: std::function keeps it without allocating
  return [pp](const uint8_t* w, int64_t, int64_t r0, int64_t r1, float* y) {
    vnni_rows<Step>(w, pp->a, pp->xq, pp->k, r0, r1, y);
  };
}

}  // namespace

GemvRowRange gemv_vnni_rows(BlockFormat format, const void* xq, int64_t k) {
  return with_byte_block_format(format, [&]<BlockFormat F>() {
    if constexpr (F == BlockFormat::Q8_0) return prepared_rows<Q8_0Step>(xq, k);
    else return prepared_rows<NibbleStep<F>>(xq, k);
  });
}

#else

bool vnni_available() { return false; }
GemvRowRange gemv_vnni_rows(BlockFormat, const void*, int64_t) { return {}; }

#endif

}  // namespace foundry::quant

// bitsandbytes' NF4, LLM.int8 rows and round-to-nearest int4 groups (foundry/quant/weight_only.h),
// plus the in-memory "nf4" row of the format table. NF4 and the nested 8-bit quantization follow
// bitsandbytes' CUDA kernels (kQuantizeBlockwise with dQuantizeNF4 / dQuantize): the block scale is
// a multiply by 1.0f / absmax, NF4 codes count the decision thresholds strictly below the value,
// the 8-bit search is the kernel's binary search with its midpoint test. Compiled with
// -ffp-contract=off, as the codes depend on float32 rounding.
#include "foundry/quant/weight_only.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "foundry/core/error.h"
#include "foundry/core/numeric.h"
#include "quant/formats_internal.h"

namespace foundry::quant {

namespace {

constexpr float kNF4[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                            -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                            0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                            0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
// dQuantizeNF4's decision thresholds (midpoints of neighbouring codes, as the kernel's literals).
constexpr float kNF4Thresholds[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f, 0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};

// create_dynamic_map(signed=True) as bitsandbytes builds it in float32 (values stored in every
// double-quantized file, which dequantization reads back from the file).
constexpr float kDynamicMapSigned[256] = {
    -0x1.fc66660000000p-1f, -0x1.f533340000000p-1f, -0x1.ee00000000000p-1f, -0x1.e6cccc0000000p-1f, -0x1.df999a0000000p-1f,
    -0x1.d866660000000p-1f, -0x1.d133340000000p-1f, -0x1.ca00000000000p-1f, -0x1.c2cccc0000000p-1f, -0x1.bb999a0000000p-1f,
    -0x1.b466660000000p-1f, -0x1.ad33340000000p-1f, -0x1.a600000000000p-1f, -0x1.9ecccc0000000p-1f, -0x1.97999a0000000p-1f,
    -0x1.9066660000000p-1f, -0x1.8933340000000p-1f, -0x1.8200000000000p-1f, -0x1.7acccc0000000p-1f, -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f, -0x1.6533340000000p-1f, -0x1.5e00000000000p-1f, -0x1.56cccc0000000p-1f, -0x1.4f999a0000000p-1f,
    -0x1.4866680000000p-1f, -0x1.4133340000000p-1f, -0x1.3a00000000000p-1f, -0x1.32cccc0000000p-1f, -0x1.2b999a0000000p-1f,
    -0x1.2466680000000p-1f, -0x1.1d33340000000p-1f, -0x1.1600000000000p-1f, -0x1.0ecccc0000000p-1f, -0x1.0799980000000p-1f,
    -0x1.0066660000000p-1f, -0x1.f266640000000p-2f, -0x1.e400000000000p-2f, -0x1.d599980000000p-2f, -0x1.c733340000000p-2f,
    -0x1.b8cccc0000000p-2f, -0x1.aa66660000000p-2f, -0x1.9c00000000000p-2f, -0x1.8d99980000000p-2f, -0x1.7f33340000000p-2f,
    -0x1.70cccc0000000p-2f, -0x1.6266660000000p-2f, -0x1.5400000000000p-2f, -0x1.4599980000000p-2f, -0x1.3733340000000p-2f,
    -0x1.28cccc0000000p-2f, -0x1.1a66680000000p-2f, -0x1.0c00000000000p-2f, -0x1.fb33320000000p-3f, -0x1.de66660000000p-3f,
    -0x1.c1999a0000000p-3f, -0x1.a4cccc0000000p-3f, -0x1.8800000000000p-3f, -0x1.6b33340000000p-3f, -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f, -0x1.14cccc0000000p-3f, -0x1.f000000000000p-4f, -0x1.b666680000000p-4f, -0x1.93d70a0000000p-4f,
    -0x1.8851ee0000000p-4f, -0x1.7cccce0000000p-4f, -0x1.7147ae0000000p-4f, -0x1.65c2900000000p-4f, -0x1.5a3d700000000p-4f,
    -0x1.4eb8540000000p-4f, -0x1.4333340000000p-4f, -0x1.37ae140000000p-4f, -0x1.2c28f60000000p-4f, -0x1.20a3d60000000p-4f,
    -0x1.151eba0000000p-4f, -0x1.09999a0000000p-4f, -0x1.fc28f60000000p-5f, -0x1.e51eba0000000p-5f, -0x1.ce147a0000000p-5f,
    -0x1.b70a3e0000000p-5f, -0x1.a000000000000p-5f, -0x1.88f5c20000000p-5f, -0x1.71eb860000000p-5f, -0x1.5ae1460000000p-5f,
    -0x1.43d70a0000000p-5f, -0x1.2cccce0000000p-5f, -0x1.15c2900000000p-5f, -0x1.fd70a40000000p-6f, -0x1.cf5c2a0000000p-6f,
    -0x1.a147ae0000000p-6f, -0x1.7333340000000p-6f, -0x1.451eba0000000p-6f, -0x1.170a3e0000000p-6f, -0x1.d1eb860000000p-7f,
    -0x1.75c2900000000p-7f, -0x1.3e76c80000000p-7f, -0x1.2c08300000000p-7f, -0x1.19999a0000000p-7f, -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f, -0x1.c49ba60000000p-8f, -0x1.9fbe760000000p-8f, -0x1.7ae1480000000p-8f, -0x1.56041a0000000p-8f,
    -0x1.3126e80000000p-8f, -0x1.0c49ba0000000p-8f, -0x1.ced9140000000p-9f, -0x1.851eb80000000p-9f, -0x1.3b645a0000000p-9f,
    -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f, -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f, -0x1.78d5000000000p-11f,
    -0x1.3dd9820000000p-11f, -0x1.02de020000000p-11f, -0x1.8fc5060000000p-12f, -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f, -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f, -0x1.040bfe0000000p-17f,
    -0x1.b435280000000p-19f, -0x1.27476e0000000p-21f, 0x0.0p+0f, 0x1.27476e0000000p-21f, 0x1.b435280000000p-19f,
    0x1.040bfe0000000p-17f, 0x1.64840c0000000p-16f, 0x1.6f00680000000p-15f, 0x1.15df660000000p-14f, 0x1.743e960000000p-14f,
    0x1.47ae160000000p-13f, 0x1.19ce0a0000000p-12f, 0x1.8fc5060000000p-12f, 0x1.02de020000000p-11f, 0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f, 0x1.b3d07c0000000p-11f, 0x1.eecbfe0000000p-11f, 0x1.4fdf3a0000000p-10f, 0x1.e353f80000000p-10f,
    0x1.3b645a0000000p-9f, 0x1.851eb80000000p-9f, 0x1.ced9140000000p-9f, 0x1.0c49ba0000000p-8f, 0x1.3126e80000000p-8f,
    0x1.56041a0000000p-8f, 0x1.7ae1480000000p-8f, 0x1.9fbe760000000p-8f, 0x1.c49ba60000000p-8f, 0x1.e978d40000000p-8f,
    0x1.072b020000000p-7f, 0x1.19999a0000000p-7f, 0x1.2c08300000000p-7f, 0x1.3e76c80000000p-7f, 0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f, 0x1.170a3e0000000p-6f, 0x1.451eba0000000p-6f, 0x1.7333340000000p-6f, 0x1.a147ae0000000p-6f,
    0x1.cf5c2a0000000p-6f, 0x1.fd70a40000000p-6f, 0x1.15c2900000000p-5f, 0x1.2cccce0000000p-5f, 0x1.43d70a0000000p-5f,
    0x1.5ae1460000000p-5f, 0x1.71eb860000000p-5f, 0x1.88f5c20000000p-5f, 0x1.a000000000000p-5f, 0x1.b70a3e0000000p-5f,
    0x1.ce147a0000000p-5f, 0x1.e51eba0000000p-5f, 0x1.fc28f60000000p-5f, 0x1.09999a0000000p-4f, 0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f, 0x1.2c28f60000000p-4f, 0x1.37ae140000000p-4f, 0x1.4333340000000p-4f, 0x1.4eb8540000000p-4f,
    0x1.5a3d700000000p-4f, 0x1.65c2900000000p-4f, 0x1.7147ae0000000p-4f, 0x1.7cccce0000000p-4f, 0x1.8851ee0000000p-4f,
    0x1.93d70a0000000p-4f, 0x1.b666680000000p-4f, 0x1.f000000000000p-4f, 0x1.14cccc0000000p-3f, 0x1.31999a0000000p-3f,
    0x1.4e66660000000p-3f, 0x1.6b33340000000p-3f, 0x1.8800000000000p-3f, 0x1.a4cccc0000000p-3f, 0x1.c1999a0000000p-3f,
    0x1.de66660000000p-3f, 0x1.fb33320000000p-3f, 0x1.0c00000000000p-2f, 0x1.1a66680000000p-2f, 0x1.28cccc0000000p-2f,
    0x1.3733340000000p-2f, 0x1.4599980000000p-2f, 0x1.5400000000000p-2f, 0x1.6266660000000p-2f, 0x1.70cccc0000000p-2f,
    0x1.7f33340000000p-2f, 0x1.8d99980000000p-2f, 0x1.9c00000000000p-2f, 0x1.aa66660000000p-2f, 0x1.b8cccc0000000p-2f,
    0x1.c733340000000p-2f, 0x1.d599980000000p-2f, 0x1.e400000000000p-2f, 0x1.f266640000000p-2f, 0x1.0066660000000p-1f,
    0x1.0799980000000p-1f, 0x1.0ecccc0000000p-1f, 0x1.1600000000000p-1f, 0x1.1d33340000000p-1f, 0x1.2466680000000p-1f,
    0x1.2b999a0000000p-1f, 0x1.32cccc0000000p-1f, 0x1.3a00000000000p-1f, 0x1.4133340000000p-1f, 0x1.4866680000000p-1f,
    0x1.4f999a0000000p-1f, 0x1.56cccc0000000p-1f, 0x1.5e00000000000p-1f, 0x1.6533340000000p-1f, 0x1.6c66680000000p-1f,
    0x1.73999a0000000p-1f, 0x1.7acccc0000000p-1f, 0x1.8200000000000p-1f, 0x1.8933340000000p-1f, 0x1.9066660000000p-1f,
    0x1.97999a0000000p-1f, 0x1.9ecccc0000000p-1f, 0x1.a600000000000p-1f, 0x1.ad33340000000p-1f, 0x1.b466660000000p-1f,
    0x1.bb999a0000000p-1f, 0x1.c2cccc0000000p-1f, 0x1.ca00000000000p-1f, 0x1.d133340000000p-1f, 0x1.d866660000000p-1f,
    0x1.df999a0000000p-1f, 0x1.e6cccc0000000p-1f, 0x1.ee00000000000p-1f, 0x1.f533340000000p-1f, 0x1.fc66660000000p-1f,
    0x1.0000000000000p+0f,
};

uint8_t nf4_code(float y) {  // NaN (a zero block's 0 * inf) -> 0, as the kernel's comparisons give
  uint8_t q = 0;
  for (float t : kNF4Thresholds) q = uint8_t(q + (y > t ? 1 : 0));
  return q;
}

// dQuantize<0>: binary search over the 256 sorted codes, then the nearer neighbour by midpoint.
uint8_t dynamic_code(const float* code, float y) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f, val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (y > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (y > val) return uint8_t(y > (upper + val) * 0.5f ? upper_pivot : pivot);
  return uint8_t(y < (lower + val) * 0.5f ? lower_pivot : pivot);
}

float fp16_round(float x) { return Half::to_float(Half::from_float(x)); }

// One 64-value block (n <= 64 valid values, the rest zeros): its absmax, and the 64 codes.
float nf4_encode_block(const float* x, int64_t n, uint8_t* codes) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float r = 1.0f / amax;
  for (int64_t i = 0; i < kNF4BlockSize; ++i) codes[i] = nf4_code((i < n ? x[i] : 0.f) * r);
  return amax;
}

}  // namespace

const float* nf4_codebook() { return kNF4; }

const int16_t* nf4_codebook_q15() {
  static const auto table = [] {
    std::array<int16_t, 16> t{};
    for (int c = 0; c < 16; ++c) t[size_t(c)] = static_cast<int16_t>(std::lrint(kNF4[c] * kNF4Q15Unit));
    return t;
  }();
  return table.data();
}
const float* dynamic_map_signed() { return kDynamicMapSigned; }

NF4Weight quantize_nf4(const float* x, int64_t numel, bool double_quant) {
  FOUNDRY_CHECK_AS(ValueError, numel >= 0, "quantize_nf4: negative numel {}", numel);
  NF4Weight w;
  w.numel = numel;
  const int64_t blocks = (numel + kNF4BlockSize - 1) / kNF4BlockSize;
  w.absmax.assign(size_t(blocks), 0.f);
  std::vector<uint8_t> q(size_t(blocks * kNF4BlockSize), 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kNF4BlockSize;
    w.absmax[size_t(b)] = nf4_encode_block(x + lo, std::min(numel - lo, kNF4BlockSize), q.data() + lo);
  }
  w.packed.resize(size_t((numel + 1) / 2));
  for (size_t i = 0; i < w.packed.size(); ++i) w.packed[i] = uint8_t((q[2 * i] << 4) | q[2 * i + 1]);
  if (!double_quant) return w;
  w.double_quant = true;
  double sum = 0;
  for (float a : w.absmax) sum += a;
  w.offset = blocks ? float(sum / double(blocks)) : 0.f;
  const int64_t nested = (blocks + kNF4NestedBlockSize - 1) / kNF4NestedBlockSize;
  w.nested_absmax.assign(size_t(nested), 0.f);
  w.absmax_codes.assign(size_t(blocks), 0);
  for (int64_t n = 0; n < nested; ++n) {
    const int64_t lo = n * kNF4NestedBlockSize, hi = std::min(blocks, lo + kNF4NestedBlockSize);
    float amax = 0.f;
    for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(w.absmax[size_t(i)] - w.offset));
    w.nested_absmax[size_t(n)] = amax;
    const float r = 1.0f / amax;
    for (int64_t i = lo; i < hi; ++i)
      w.absmax_codes[size_t(i)] = dynamic_code(kDynamicMapSigned, (w.absmax[size_t(i)] - w.offset) * r);
  }
  w.absmax = nf4_absmax_from_nested(w.absmax_codes, w.nested_absmax, w.offset, kDynamicMapSigned);
  return w;
}

std::vector<float> nf4_absmax_from_nested(const std::vector<uint8_t>& codes, const std::vector<float>& nested_absmax,
                                          float offset, const float* map) {
  FOUNDRY_CHECK_AS(ValueError,
                   int64_t(nested_absmax.size()) == (int64_t(codes.size()) + kNF4NestedBlockSize - 1) / kNF4NestedBlockSize,
                   "nf4: {} nested maxima for {} block codes (one per {} expected)", nested_absmax.size(), codes.size(),
                   kNF4NestedBlockSize);
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = map[codes[i]] * nested_absmax[i / kNF4NestedBlockSize] + offset;
  return out;
}

void dequantize_nf4(const NF4Weight& w, float* out) {
  FOUNDRY_CHECK_AS(ValueError, int64_t(w.packed.size()) == (w.numel + 1) / 2 &&
                                   int64_t(w.absmax.size()) == (w.numel + kNF4BlockSize - 1) / kNF4BlockSize,
                   "nf4: {} packed bytes and {} block maxima do not describe {} values", w.packed.size(),
                   w.absmax.size(), w.numel);
  for (int64_t i = 0; i < w.numel; ++i) {
    const uint8_t byte = w.packed[size_t(i / 2)];
    out[i] = kNF4[(i % 2 == 0) ? byte >> 4 : byte & 0x0F] * w.absmax[size_t(i / kNF4BlockSize)];
  }
}

Int8RowWeight quantize_int8_rows(const float* w, int64_t rows, int64_t cols) {
  Int8RowWeight q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) {
      row[size_t(c)] = fp16_round(w[r * cols + c]);  // bitsandbytes quantizes the fp16 weight
      amax = std::max(amax, std::fabs(row[size_t(c)]));
    }
    q.scales[size_t(r)] = amax;
    const float scale = (1.0f / amax) * 127.0f;
    for (int64_t c = 0; c < cols; ++c) {
      float v = row[size_t(c)] * scale;
      if (std::isnan(v)) v = 0.f;
      q.codes[size_t(r * cols + c)] = int8_t(std::nearbyint(v));  // half to even
    }
  }
  return q;
}

void dequantize_int8_rows(const Int8RowWeight& w, float* out) {
  FOUNDRY_CHECK_AS(ValueError, int64_t(w.codes.size()) == w.rows * w.cols && int64_t(w.scales.size()) == w.rows,
                   "int8 rows: {} codes and {} scales for a [{}, {}] weight", w.codes.size(), w.scales.size(), w.rows,
                   w.cols);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c)
      out[r * w.cols + c] = (float(w.codes[size_t(r * w.cols + c)]) * w.scales[size_t(r)]) * 7.874015718698502e-3f;
}

Int4GroupWeight quantize_int4_groups(const float* w, int64_t rows, int64_t cols, int64_t group, bool symmetric) {
  FOUNDRY_CHECK_AS(ValueError, (group == 32 || group == 64 || group == 128) && cols % group == 0,
                   "int4: group size {} must be 32, 64 or 128 and divide the row length {}", group, cols);
  Int4GroupWeight q;
  q.rows = rows;
  q.cols = cols;
  q.group = group;
  q.symmetric = symmetric;
  const int64_t groups = rows * cols / group;
  q.packed.assign(size_t(rows * cols / 2), 0);
  q.scales.resize(size_t(groups));
  if (!symmetric) q.zeros.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const float* x = w + g * group;
    float lo = 0.f, hi = 0.f;  // the range always includes 0, so 0 is exact
    for (int64_t i = 0; i < group; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float amax = std::max(hi, -lo);  // +0 for an all-zero group (max(-0, 0) would keep -0)
    const uint16_t s16 = Half::from_float(symmetric ? amax / 7.0f : (hi - lo) / 15.0f);
    q.scales[size_t(g)] = s16;
    const float s = Half::to_float(s16), inv = s > 0.f ? 1.0f / s : 0.f;
    int zero = 8;
    if (!symmetric) zero = q.zeros[size_t(g)] = uint8_t(std::clamp(int(std::nearbyint(-lo * inv)), 0, 15));
    for (int64_t i = 0; i < group; ++i) {
      const int u = std::clamp(int(std::nearbyint(x[i] * inv)) + zero, 0, 15);
      const int64_t idx = g * group + i;
      q.packed[size_t(idx / 2)] |= uint8_t(idx % 2 == 0 ? u : u << 4);
    }
  }
  return q;
}

void dequantize_int4_groups(const Int4GroupWeight& w, float* out) {
  const int64_t n = w.rows * w.cols, groups = w.group > 0 ? n / w.group : 0;
  FOUNDRY_CHECK_AS(ValueError, w.group > 0 && int64_t(w.packed.size()) * 2 == n && int64_t(w.scales.size()) == groups &&
                                   (w.symmetric || int64_t(w.zeros.size()) == groups),
                   "int4: {} packed bytes, {} scales and {} zeros do not describe a [{}, {}] weight in groups of {}",
                   w.packed.size(), w.scales.size(), w.zeros.size(), w.rows, w.cols, w.group);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / w.group;
    const int u = (i % 2 == 0) ? w.packed[size_t(i / 2)] & 0x0F : w.packed[size_t(i / 2)] >> 4;
    const int zero = w.symmetric ? 8 : w.zeros[size_t(g)];
    out[i] = float(u - zero) * Half::to_float(w.scales[size_t(g)]);
  }
}

// ---- "nf4" in the format table: rows of 64-value blocks {float absmax; 32 bytes of codes} ---------
// Codes as q4_0 packs them (value j in the low nibble of byte j, value j + 32 in its high nibble),
// so each half of a block lines up with one q8_0 activation block; bitsandbytes' files pair
// neighbouring values instead and are repacked on load (nf4_block_from_bnb).

namespace detail {

namespace {

constexpr int64_t kNF4RowBlockBytes = 4 + kNF4BlockSize / 2;

struct BlockQ8_0View {  // ggml's block_q8_0
  uint16_t d;
  int8_t qs[32];
};

}  // namespace

namespace {

// 64 codes (value order) and their absmax as one in-memory block.
void pack_nf4_block(float absmax, const uint8_t* codes, uint8_t* block) {
  std::memcpy(block, &absmax, 4);
  for (int j = 0; j < kNF4BlockSize / 2; ++j) block[4 + j] = uint8_t(codes[j] | (codes[j + kNF4BlockSize / 2] << 4));
}

}  // namespace

void nf4_block_from_bnb(float absmax, const uint8_t* bnb_packed, uint8_t* block) {
  uint8_t codes[kNF4BlockSize];
  for (int i = 0; i < kNF4BlockSize / 2; ++i) {
    codes[2 * i] = bnb_packed[i] >> 4;
    codes[2 * i + 1] = bnb_packed[i] & 0x0F;
  }
  pack_nf4_block(absmax, codes, block);
}

void quantize_nf4(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<uint8_t*>(vy);
  uint8_t codes[kNF4BlockSize];
  for (int64_t b = 0; b < k / kNF4BlockSize; ++b)
    pack_nf4_block(nf4_encode_block(x + b * kNF4BlockSize, kNF4BlockSize, codes), codes, y + b * kNF4RowBlockBytes);
}

void dequantize_nf4(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t b = 0; b < k / kNF4BlockSize; ++b, x += kNF4RowBlockBytes, y += kNF4BlockSize) {
    float amax;
    std::memcpy(&amax, x, 4);
    for (int j = 0; j < kNF4BlockSize / 2; ++j) {
      y[j] = kNF4[x[4 + j] & 0x0F] * amax;
      y[j + kNF4BlockSize / 2] = kNF4[x[4 + j] >> 4] * amax;
    }
  }
}

// The codebook in Q15 (nf4_codebook_q15): each 32-value half's integer sum against the q8_0
// levels, scaled by the activation block's scale, the absmax and 1 / 32767.
float dot_nf4(const void* vx, const void* vy, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  const auto* y = static_cast<const BlockQ8_0View*>(vy);
  const int16_t* code = nf4_codebook_q15();
  float sum = 0.f;
  for (int64_t b = 0; b < k / kNF4BlockSize; ++b, x += kNF4RowBlockBytes) {
    float amax;
    std::memcpy(&amax, x, 4);
    float block = 0.f;
    for (int h = 0; h < 2; ++h) {
      const BlockQ8_0View& yb = y[2 * b + h];
      int32_t s = 0;  // |s| <= 32 * 32767 * 127
      for (int j = 0; j < 32; ++j) s += int32_t(code[h == 0 ? x[4 + j] & 0x0F : x[4 + j] >> 4]) * yb.qs[j];
      block += Half::to_float(yb.d) / kNF4Q15Unit * float(s);
    }
    sum += amax * block;
  }
  return sum;
}

}  // namespace detail

}  // namespace foundry::quant

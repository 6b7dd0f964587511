// Reference quantizers, dequantizers and q8_0 dot products of GGML's 32-value block formats,
// written from the format definitions in ggml (ggml-common.h block layouts, ggml-quants.c
// reference code): same rounding, same clamping, same fp16 scale conversion (round to nearest
// even). Compiled with -ffp-contract=off (src/CMakeLists.txt), so no FMA contraction changes results.
#include "foundry/quant/block_formats.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "foundry/core/error.h"
#include "foundry/core/numeric.h"
#include "quant/formats_internal.h"

namespace foundry::quant {

namespace {

constexpr int kQK = 32;  // values per block in every format here

uint16_t to_fp16(float f) { return Half::from_float(f); }
float from_fp16(uint16_t h) { return Half::to_float(h); }

// Block layouts, byte for byte as ggml's (no padding: every member is 1- or 2-byte aligned).
#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);

// The value of largest magnitude (the first one on ties), as the symmetric formats scale by it.
float signed_absmax(const float* x) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < kQK; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

void min_max(const float* x, float& mn, float& mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

// ---- Q4_0: d = max / -8, q = min(15, int8(x / d + 8.5)), value = (q - 8) d -----------------------

void quantize_q4_0(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ4_0*>(vy);
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -8;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(x0 + 8.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(x1 + 8.5f))));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}


// ---- Q4_1: d = (max - min) / 15, m = min, q = min(15, int8((x - m) / d + 0.5)) ----------------------

void quantize_q4_1(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ4_1*>(vy);
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    float mn, mx;
    min_max(x, mn, mx);
    const float d = (mx - mn) / ((1 << 4) - 1);
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - mn) * id, x1 = (x[kQK / 2 + j] - mn) * id;
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(x0 + 0.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(x1 + 0.5f))));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}


// ---- Q5_0 / Q5_1: as Q4 with a fifth bit per value in qh ------------------------------------------

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

void store_qh(uint8_t* qh, uint32_t v) { std::memcpy(qh, &v, 4); }

void quantize_q5_0(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ5_0*>(vy);
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -16;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      const uint8_t q0 = uint8_t(std::min(31, int(int8_t(x0 + 16.5f))));
      const uint8_t q1 = uint8_t(std::min(31, int(int8_t(x1 + 16.5f))));
      y[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    store_qh(y[i].qh, qh);
  }
}


void quantize_q5_1(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ5_1*>(vy);
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    float mn, mx;
    min_max(x, mn, mx);
    const float d = (mx - mn) / ((1 << 5) - 1);
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - mn) * id, x1 = (x[kQK / 2 + j] - mn) * id;
      const uint8_t q0 = uint8_t(x0 + 0.5f), q1 = uint8_t(x1 + 0.5f);
      y[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    store_qh(y[i].qh, qh);
  }
}


// ---- Q8_0: d = amax / 127, q = roundf(x / d) --------------------------------------------------------

void quantize_q8_0(const float* x, void* vy, int64_t k) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));  // half away from zero
  }
}


// ---- integer levels: every format's block as q[32], d, m with value = q d + m -------------------------
// Dequantization and the q8_0 dot product are both written once over these.

void unpack_q4_0(const uint8_t* p, int8_t* q, float& d, float& m) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
  d = from_fp16(b->d);
  m = 0.f;
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t((b->qs[j] & 0x0F) - 8);
    q[j + kQK / 2] = int8_t((b->qs[j] >> 4) - 8);
  }
}

void unpack_q4_1(const uint8_t* p, int8_t* q, float& d, float& m) {
  const auto* b = reinterpret_cast<const BlockQ4_1*>(p);
  d = from_fp16(b->d);
  m = from_fp16(b->m);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t(b->qs[j] & 0x0F);
    q[j + kQK / 2] = int8_t(b->qs[j] >> 4);
  }
}

// The fifth bits: value j's in bit j of qh, value j + 16's in bit j + 16.
void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int8_t* q) {
  const uint32_t qh = load_qh(qh_bytes);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t(((qs[j] & 0x0F) | (int((qh >> j) << 4) & 0x10)) - offset);
    q[j + kQK / 2] = int8_t(((qs[j] >> 4) | (int(qh >> (j + 12)) & 0x10)) - offset);
  }
}

void unpack_q5_0(const uint8_t* p, int8_t* q, float& d, float& m) {
  const auto* b = reinterpret_cast<const BlockQ5_0*>(p);
  d = from_fp16(b->d);
  m = 0.f;
  unpack_q5(b->qs, b->qh, 16, q);
}

void unpack_q5_1(const uint8_t* p, int8_t* q, float& d, float& m) {
  const auto* b = reinterpret_cast<const BlockQ5_1*>(p);
  d = from_fp16(b->d);
  m = from_fp16(b->m);
  unpack_q5(b->qs, b->qh, 0, q);
}

void unpack_q8_0(const uint8_t* p, int8_t* q, float& d, float& m) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
  d = from_fp16(b->d);
  m = 0.f;
  std::memcpy(q, b->qs, kQK);
}

using UnpackFn = void (*)(const uint8_t*, int8_t*, float&, float&);

template <UnpackFn Unpack, int64_t kBytes>
void dequantize(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    int8_t q[kQK];
    float d, m;
    Unpack(x + i * kBytes, q, d, m);
    for (int j = 0; j < kQK; ++j) y[j] = float(q[j]) * d + m;
  }
}

// q . y summed in int32 per block, then the block's scaled contribution added in float.
template <UnpackFn Unpack, int64_t kBytes>
float dot_q8(const void* vx, const void* vy, int64_t k) {
  const auto* x = static_cast<const uint8_t*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  float sum = 0.f;
  for (int64_t i = 0; i < k / kQK; ++i) {
    int8_t q[kQK];
    float d, m;
    Unpack(x + i * kBytes, q, d, m);
    int32_t qy = 0, sy = 0;
    for (int j = 0; j < kQK; ++j) {
      qy += int32_t(q[j]) * int32_t(y[i].qs[j]);
      sy += y[i].qs[j];
    }
    const float dy = from_fp16(y[i].d);
    sum += float(qy) * d * dy + (m != 0.f ? m * dy * float(sy) : 0.f);
  }
  return sum;
}

}  // namespace

const std::vector<BlockFormatTraits>& block_formats() {
  using detail::kQK_K;
  constexpr auto Q8_0 = BlockFormat::Q8_0, Q8_K = BlockFormat::Q8_K;
  static const std::vector<BlockFormatTraits> table = {
      {BlockFormat::F16, "f16", 1, 1, 2, detail::quantize_f16, detail::dequantize_f16, BlockFormat::F16,
       detail::dot_f16},
      {BlockFormat::BF16, "bf16", 30, 1, 2, detail::quantize_bf16, detail::dequantize_bf16, BlockFormat::BF16,
       detail::dot_bf16},
      {BlockFormat::Q4_0, "q4_0", 2, kQK, int64_t(sizeof(BlockQ4_0)), quantize_q4_0,
       dequantize<unpack_q4_0, int64_t(sizeof(BlockQ4_0))>, Q8_0, dot_q8<unpack_q4_0, int64_t(sizeof(BlockQ4_0))>},
      {BlockFormat::Q4_1, "q4_1", 3, kQK, int64_t(sizeof(BlockQ4_1)), quantize_q4_1,
       dequantize<unpack_q4_1, int64_t(sizeof(BlockQ4_1))>, Q8_0, dot_q8<unpack_q4_1, int64_t(sizeof(BlockQ4_1))>},
      {BlockFormat::Q5_0, "q5_0", 6, kQK, int64_t(sizeof(BlockQ5_0)), quantize_q5_0,
       dequantize<unpack_q5_0, int64_t(sizeof(BlockQ5_0))>, Q8_0, dot_q8<unpack_q5_0, int64_t(sizeof(BlockQ5_0))>},
      {BlockFormat::Q5_1, "q5_1", 7, kQK, int64_t(sizeof(BlockQ5_1)), quantize_q5_1,
       dequantize<unpack_q5_1, int64_t(sizeof(BlockQ5_1))>, Q8_0, dot_q8<unpack_q5_1, int64_t(sizeof(BlockQ5_1))>},
      {BlockFormat::Q8_0, "q8_0", 8, kQK, int64_t(sizeof(BlockQ8_0)), quantize_q8_0,
       dequantize<unpack_q8_0, int64_t(sizeof(BlockQ8_0))>, Q8_0, dot_q8<unpack_q8_0, int64_t(sizeof(BlockQ8_0))>},
      {BlockFormat::Q4_K, "q4_K", 12, kQK_K, detail::kQ4_KBytes, detail::quantize_q4_K, detail::dequantize_q4_K, Q8_K,
       detail::dot_q4_K},
      {BlockFormat::Q5_K, "q5_K", 13, kQK_K, detail::kQ5_KBytes, detail::quantize_q5_K, detail::dequantize_q5_K, Q8_K,
       detail::dot_q5_K},
      {BlockFormat::Q6_K, "q6_K", 14, kQK_K, detail::kQ6_KBytes, detail::quantize_q6_K, detail::dequantize_q6_K, Q8_K,
       detail::dot_q6_K},
      {BlockFormat::Q8_K, "q8_K", 15, kQK_K, detail::kQ8_KBytes, detail::quantize_q8_K, detail::dequantize_q8_K, Q8_K,
       detail::dot_q8_K},
      {BlockFormat::NF4, "nf4", kNoGGMLType, 64, 36, detail::quantize_nf4, detail::dequantize_nf4, Q8_0,
       detail::dot_nf4},
  };
  return table;
}

const BlockFormatTraits& traits(BlockFormat format) {
  for (const auto& t : block_formats())
    if (t.format == format) return t;
  raise<ValueError>("unknown block format {}", int(format));
}

const BlockFormatTraits& traits(const std::string& name) {
  // Case-insensitive, without building strings: decode looks its cache's format up every layer.
  auto same = [&name](const char* known) {
    size_t i = 0;
    for (; known[i] && i < name.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(name[i])) != std::tolower(static_cast<unsigned char>(known[i])))
        return false;
    return !known[i] && i == name.size();
  };
  for (const auto& t : block_formats())
    if (same(t.name)) return t;
  std::string known;
  for (const auto& t : block_formats()) known += (known.empty() ? "" : ", ") + std::string(t.name);
  raise<ValueError>("unknown block format '{}' (known: {})", name, known);
}

int64_t quantized_bytes(const BlockFormatTraits& t, int64_t rows, int64_t k) {
  FOUNDRY_CHECK_AS(ValueError, rows >= 0 && k >= 0 && k % t.block_size == 0,
                   "{}: rows of {} values are not a whole number of {}-value blocks", t.name, k, t.block_size);
  return rows * (k / t.block_size) * t.block_bytes;
}

}  // namespace foundry::quant

#include "foundry/core/numeric.h"

#include <cmath>

namespace foundry {

using detail::bits_float;
using detail::float_bits;

uint16_t Half::from_float(float f) {
  // Round-to-nearest-even conversion by bit manipulation (no F16C in the portable baseline).
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): add a magic number so the FPU does the rounding.
    float a = bits_float(abs) + 0.5f;  // 0.5 = 2^-1; subnormal half unit is 2^-24
    return uint16_t(sign | (float_bits(a) - float_bits(0.5f)));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // re-bias exponent (-112 << 23) and round
  return uint16_t(sign | (abs >> 13));
}

float Half::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    float v = float(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace {

// Generic round-to-nearest-even encoder for small floats with `E` exponent and `M` mantissa bits.
// `max_code` is the largest finite magnitude code; beyond it the value overflows to
// `overflow_code` (NaN for e4m3fn, inf for e5m2).
template <int E, int M>
uint8_t encode_small_float(float f, uint8_t max_code, uint8_t overflow_code, uint8_t nan_code) {
  constexpr int bias = (1 << (E - 1)) - 1;
  uint32_t x = float_bits(f);
  uint8_t sign = uint8_t((x >> 24) & 0x80u);
  if (std::isnan(f)) return uint8_t(sign | nan_code);
  double a = std::fabs(double(f));
  // Decode the largest finite value; anything that rounds above it overflows.
  auto decode = [](uint8_t code) {
    int e = (code >> M) & ((1 << E) - 1);
    int m = code & ((1 << M) - 1);
    if (e == 0) return std::ldexp(double(m), 1 - bias - M);
    return std::ldexp(double((1 << M) | m), e - bias - M);
  };
  double max_val = decode(max_code);
  // The rounding boundary above max: halfway to the next (non-representable) step.
  int max_e = (max_code >> M) & ((1 << E) - 1);
  double ulp_at_max = std::ldexp(1.0, max_e - bias - M);
  if (std::isinf(f)) return uint8_t(sign | overflow_code);
  if (a > max_val + ulp_at_max / 2 || (a == max_val + ulp_at_max / 2 && (max_code & 1)))
    return uint8_t(sign | overflow_code);
  if (a >= max_val) return uint8_t(sign | max_code);
  // Exponent of a (normal range) or subnormal.
  int exp2;
  std::frexp(a, &exp2);  // a = frac * 2^exp2, frac in [0.5, 1)
  int e_unbiased = exp2 - 1;
  int min_normal_e = 1 - bias;
  double quantum = e_unbiased < min_normal_e ? std::ldexp(1.0, min_normal_e - M)
                                             : std::ldexp(1.0, e_unbiased - M);
  double q = a / quantum;  // exact in double for float inputs
  double r = std::nearbyint(q);  // default rounding mode: nearest even
  double v = r * quantum;
  // Re-encode v (may have rounded up into the next binade, which is fine).
  if (v == 0) return sign;
  std::frexp(v, &exp2);
  e_unbiased = exp2 - 1;
  if (e_unbiased < min_normal_e) {
    return uint8_t(sign | uint8_t(v / std::ldexp(1.0, min_normal_e - M)));
  }
  int mant = int(v / std::ldexp(1.0, e_unbiased - M)) - (1 << M);
  return uint8_t(sign | uint8_t(((e_unbiased + bias) << M) | mant));
}

template <int E, int M>
float decode_small_float(uint8_t b, bool has_inf) {
  constexpr int bias = (1 << (E - 1)) - 1;
  bool neg = b & 0x80;
  int e = (b >> M) & ((1 << E) - 1);
  int m = b & ((1 << M) - 1);
  float v;
  if (has_inf && e == (1 << E) - 1) {
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!has_inf && e == (1 << E) - 1 && m == (1 << M) - 1) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = float(std::ldexp(double(m), 1 - bias - M));
  } else {
    v = float(std::ldexp(double((1 << M) | m), e - bias - M));
  }
  return neg ? -v : v;
}

}  // namespace

uint8_t Float8E4M3::from_float(float f) { return encode_small_float<4, 3>(f, 0x7e, 0x7f, 0x7f); }
float Float8E4M3::to_float(uint8_t b) { return decode_small_float<4, 3>(b, false); }
uint8_t Float8E5M2::from_float(float f) { return encode_small_float<5, 2>(f, 0x7b, 0x7c, 0x7f); }
float Float8E5M2::to_float(uint8_t b) { return decode_small_float<5, 2>(b, true); }

}  // namespace foundry

// Storage-only floating types: IEEE half, bfloat16 and the two OCP float8 formats.
// Arithmetic on them goes through float (as PyTorch's opmath does); conversions round to nearest
// even. float8 saturation follows PyTorch 2.x c10 (and ml_dtypes): e4m3fn has no infinity, so
// values that round beyond 448 become NaN; e5m2 overflows to infinity.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace foundry {

namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

/// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit, like c10::Half
  operator float() const { return to_float(bits); }

  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

/// bfloat16: the upper 16 bits of an IEEE float, rounded to nearest even; NaN stays NaN.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return detail::bits_float(uint32_t(bits) << 16); }

  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

/// float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448; NaN = S.1111.111; no inf.
struct Float8E4M3 {
  uint8_t bits = 0;
  Float8E4M3() = default;
  Float8E4M3(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }
  static Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v;
    v.bits = b;
    return v;
  }
  static uint8_t from_float(float f);
  static float to_float(uint8_t b);
};

/// float8 e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; max 57344; has inf and NaN.
struct Float8E5M2 {
  uint8_t bits = 0;
  Float8E5M2() = default;
  Float8E5M2(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }
  static Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }
  static uint8_t from_float(float f);
  static float to_float(uint8_t b);
};

}  // namespace foundry

// Calls a generic lambda with a tag for the C++ type of a dtype: visit_dtype(t, [&](auto tag) {
// using T = typename decltype(tag)::type; ... }). Each visit_* names the dtypes it instantiates
// for, so kernels compile for an explicit, short list.
#pragma once

#include "foundry/core/dtype.h"
#include "foundry/core/error.h"

namespace foundry::kernels {

template <typename T>
struct TypeTag {
  using type = T;
};

/// Arithmetic is done in float for the 16- and 8-bit float types (PyTorch's opmath_type).
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <>
struct OpMath<Float8E4M3> {
  using type = float;
};
template <>
struct OpMath<Float8E5M2> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

#define FOUNDRY_CASE(D, T) \
  case DType::D:           \
    return f(TypeTag<T>{});

/// Every dtype (the wide unsigned ones included: copies and conversions).
template <typename F>
decltype(auto) visit_all(DType t, const char* op, F&& f) {
  switch (t) {
    FOUNDRY_CASE(Bool, bool)
    FOUNDRY_CASE(UInt8, uint8_t)
    FOUNDRY_CASE(Int8, int8_t)
    FOUNDRY_CASE(Int16, int16_t)
    FOUNDRY_CASE(Int32, int32_t)
    FOUNDRY_CASE(Int64, int64_t)
    FOUNDRY_CASE(Float16, Half)
    FOUNDRY_CASE(BFloat16, BFloat16)
    FOUNDRY_CASE(Float32, float)
    FOUNDRY_CASE(Float64, double)
    FOUNDRY_CASE(Float8E4M3, Float8E4M3)
    FOUNDRY_CASE(Float8E5M2, Float8E5M2)
    FOUNDRY_CASE(UInt16, uint16_t)
    FOUNDRY_CASE(UInt32, uint32_t)
    FOUNDRY_CASE(UInt64, uint64_t)
  }
  raise<TypeError>("{}: unsupported dtype", op);
}

/// Every dtype that does arithmetic (all but the float8 storage types).
template <typename F>
decltype(auto) visit_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    FOUNDRY_CASE(Bool, bool)
    FOUNDRY_CASE(UInt8, uint8_t)
    FOUNDRY_CASE(Int8, int8_t)
    FOUNDRY_CASE(Int16, int16_t)
    FOUNDRY_CASE(Int32, int32_t)
    FOUNDRY_CASE(Int64, int64_t)
    FOUNDRY_CASE(Float16, Half)
    FOUNDRY_CASE(BFloat16, BFloat16)
    FOUNDRY_CASE(Float32, float)
    FOUNDRY_CASE(Float64, double)
    default:
      break;
  }
  raise<TypeError>("{}: not implemented for '{}'", op, dtype_name(t));
}

/// Integer and bool dtypes.
template <typename F>
decltype(auto) visit_integral(DType t, const char* op, F&& f) {
  switch (t) {
    FOUNDRY_CASE(Bool, bool)
    FOUNDRY_CASE(UInt8, uint8_t)
    FOUNDRY_CASE(Int8, int8_t)
    FOUNDRY_CASE(Int16, int16_t)
    FOUNDRY_CASE(Int32, int32_t)
    FOUNDRY_CASE(Int64, int64_t)
    default:
      break;
  }
  raise<TypeError>("{}: not implemented for '{}'", op, dtype_name(t));
}

/// Floating dtypes that do arithmetic: float16, bfloat16, float32, float64.
template <typename F>
decltype(auto) visit_floating(DType t, const char* op, F&& f) {
  switch (t) {
    FOUNDRY_CASE(Float16, Half)
    FOUNDRY_CASE(BFloat16, BFloat16)
    FOUNDRY_CASE(Float32, float)
    FOUNDRY_CASE(Float64, double)
    default:
      break;
  }
  raise<TypeError>("{}: not implemented for '{}'", op, dtype_name(t));
}

#undef FOUNDRY_CASE

}  // namespace foundry::kernels

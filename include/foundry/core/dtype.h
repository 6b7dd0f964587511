// Element types and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "foundry/core/numeric.h"

namespace foundry {

/// Element types. The order is part of no format; use names in files.
enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Float8E4M3,  // float8_e4m3fn
  Float8E5M2,  // float8_e5m2
  // Wide unsigned integers, as PyTorch 2.3+ and safetensors have them: storage and conversion
  // types (copies, indexing, comparisons); arithmetic promotes them nowhere.
  UInt16,
  UInt32,
  UInt64,
};
inline constexpr int kNumDTypes = 15;

/// Bytes per element.
int64_t itemsize(DType t);
/// Canonical name as PyTorch spells it: "float32", "bfloat16", "float8_e4m3fn", ...
std::string_view dtype_name(DType t);
/// Parses a name or a common alias ("float", "half", "long", "f32", "bf16", ...). Throws on unknown.
DType dtype_from_name(std::string_view name);

inline bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64 || t == DType::Float8E4M3 || t == DType::Float8E5M2;
}
inline bool is_float8(DType t) { return t == DType::Float8E4M3 || t == DType::Float8E5M2; }
inline bool is_wide_unsigned(DType t) { return t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64; }
inline bool is_integral(DType t, bool include_bool = false) {
  return (include_bool && t == DType::Bool) || (t >= DType::UInt8 && t <= DType::Int64) || is_wide_unsigned(t);
}
inline bool is_signed(DType t) { return t != DType::Bool && t != DType::UInt8 && !is_wide_unsigned(t); }

/// The default floating dtype (float32), used when integers meet floating scalars.
DType default_float_dtype();
void set_default_float_dtype(DType t);

/// PyTorch's promoteTypes: the smallest type both values fit in. Float8 and the wide unsigned
/// types do not promote with other types (as in PyTorch 2.x); that throws TypeError.
DType promote_types(DType a, DType b);

/// PyTorch's canCast: floating -> integral and non-bool -> bool are not allowed implicitly
/// (e.g. writing a float result into an int tensor in place).
bool can_cast(DType from, DType to);

/// Tracks PyTorch's result_type over several operands: tensors with dims, zero-dim tensors and
/// wrapped Python numbers participate with decreasing priority, so `int32_tensor + 5` stays int32
/// and `float16_tensor + 2.5` stays float16, but `int_tensor + 2.5` becomes the default float.
class ResultTypeState {
 public:
  void add_tensor(DType t, int64_t dim, bool wrapped_number);
  DType result() const;

 private:
  int dim_result_ = -1, zero_result_ = -1, wrapped_result_ = -1;
};

/// C++ type <-> DType mapping for kernels.
template <typename T>
struct DTypeOf;
#define FOUNDRY_DTYPE_OF(T, D) \
  template <>                  \
  struct DTypeOf<T> {          \
    static constexpr DType value = DType::D; \
  };
FOUNDRY_DTYPE_OF(bool, Bool)
FOUNDRY_DTYPE_OF(uint8_t, UInt8)
FOUNDRY_DTYPE_OF(int8_t, Int8)
FOUNDRY_DTYPE_OF(int16_t, Int16)
FOUNDRY_DTYPE_OF(int32_t, Int32)
FOUNDRY_DTYPE_OF(int64_t, Int64)
FOUNDRY_DTYPE_OF(Half, Float16)
FOUNDRY_DTYPE_OF(BFloat16, BFloat16)
FOUNDRY_DTYPE_OF(float, Float32)
FOUNDRY_DTYPE_OF(double, Float64)
FOUNDRY_DTYPE_OF(Float8E4M3, Float8E4M3)
FOUNDRY_DTYPE_OF(Float8E5M2, Float8E5M2)
FOUNDRY_DTYPE_OF(uint16_t, UInt16)
FOUNDRY_DTYPE_OF(uint32_t, UInt32)
FOUNDRY_DTYPE_OF(uint64_t, UInt64)
#undef FOUNDRY_DTYPE_OF

template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace foundry

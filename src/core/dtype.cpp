#include "foundry/core/dtype.h"

#include <array>

#include "foundry/core/error.h"

namespace foundry {

namespace {
struct DTypeInfo {
  const char* name;
  int64_t size;
};
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {"bool", 1},
    {"uint8", 1},
    {"int8", 1},
    {"int16", 2},
    {"int32", 4},
    {"int64", 8},
    {"float16", 2},
    {"bfloat16", 2},
    {"float32", 4},
    {"float64", 8},
    {"float8_e4m3fn", 1},
    {"float8_e5m2", 1},
    {"uint16", 2},
    {"uint32", 4},
    {"uint64", 8},
}};
DType g_default_float = DType::Float32;
}  // namespace

int64_t itemsize(DType t) { return kInfo[size_t(t)].size; }
std::string_view dtype_name(DType t) { return kInfo[size_t(t)].name; }

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kInfo[i].name) return DType(i);
  struct Alias {
    const char* name;
    DType t;
  };
  static const Alias aliases[] = {
      {"float", DType::Float32},   {"double", DType::Float64}, {"half", DType::Float16},
      {"long", DType::Int64},      {"int", DType::Int32},      {"short", DType::Int16},
      {"f32", DType::Float32},     {"f64", DType::Float64},    {"f16", DType::Float16},
      {"bf16", DType::BFloat16},   {"i64", DType::Int64},      {"i32", DType::Int32},
      {"i16", DType::Int16},       {"i8", DType::Int8},        {"u8", DType::UInt8},
      {"u16", DType::UInt16},      {"u32", DType::UInt32},     {"u64", DType::UInt64},
      {"float8_e4m3", DType::Float8E4M3}, {"e4m3", DType::Float8E4M3}, {"e5m2", DType::Float8E5M2},
  };
  for (const auto& a : aliases)
    if (name == a.name) return a.t;
  raise<TypeError>("unknown dtype '{}'", name);
}

DType default_float_dtype() { return g_default_float; }
void set_default_float_dtype(DType t) {
  FOUNDRY_CHECK_AS(TypeError, is_floating(t) && !is_float8(t),
                   "set_default_float_dtype: {} is not a floating dtype usable as default",
                   dtype_name(t));
  g_default_float = t;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b))
    raise<TypeError>("promotion of {} with {} is not supported (float8 types only promote with themselves)",
                     dtype_name(a), dtype_name(b));
  if (is_wide_unsigned(a) || is_wide_unsigned(b))
    raise<TypeError>("promotion of {} with {} is not supported (uint16/uint32/uint64 only promote with themselves)",
                     dtype_name(a), dtype_name(b));
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16))
      return DType::Float32;
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral (uint8/int8/int16/int32/int64).
  if (a == DType::UInt8 || b == DType::UInt8) {
    DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return itemsize(a) >= itemsize(b) ? a : b;
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

void ResultTypeState::add_tensor(DType t, int64_t dim, bool wrapped_number) {
  auto merge = [](int& slot, DType t) { slot = slot < 0 ? int(t) : int(promote_types(DType(slot), t)); };
  if (wrapped_number) {
    // Python floats count as the default dtype; Python ints as int64 (PyTorch rules).
    if (is_floating(t)) t = default_float_dtype();
    merge(wrapped_result_, t);
  } else if (dim == 0) {
    merge(zero_result_, t);
  } else {
    merge(dim_result_, t);
  }
}

namespace {
// PyTorch's combine_categories: a higher-priority group keeps its type unless the lower group
// is of a higher category (bool < integral < floating).
int combine(int higher, int lower) {
  if (higher < 0) return lower;
  if (lower < 0) return higher;
  DType h = DType(higher), l = DType(lower);
  if (is_floating(h)) return higher;
  if (h == DType::Bool || is_floating(l)) return int(promote_types(h, l));
  return higher;
}
}  // namespace

DType ResultTypeState::result() const {
  int r = combine(dim_result_, combine(zero_result_, wrapped_result_));
  FOUNDRY_CHECK(r >= 0, "result_type: no operands");
  return DType(r);
}

}  // namespace foundry

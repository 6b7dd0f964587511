#include "foundry/ops/value.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace foundry::ops {

namespace {
const char* kind_name(const Value::Variant& v) {
  static const char* names[] = {"None", "Tensor", "Tensor[]", "Scalar", "int", "float",
                                "bool", "int[]", "float[]", "str", "dtype"};
  return names[v.index()];
}
}  // namespace

#define FOUNDRY_VALUE_GET(T, what)                                                      \
  if (auto* p = std::get_if<T>(&v_)) return *p;                                         \
  raise<TypeError>("expected {} but got {}", what, kind_name(v_));

const Tensor& Value::tensor() const { FOUNDRY_VALUE_GET(Tensor, "a Tensor") }
Tensor& Value::tensor() { FOUNDRY_VALUE_GET(Tensor, "a Tensor") }
const std::vector<Tensor>& Value::tensor_list() const { FOUNDRY_VALUE_GET(std::vector<Tensor>, "a list of Tensors") }
std::vector<Tensor>& Value::tensor_list() { FOUNDRY_VALUE_GET(std::vector<Tensor>, "a list of Tensors") }
const std::string& Value::str() const { FOUNDRY_VALUE_GET(std::string, "a string") }
DType Value::dtype() const { FOUNDRY_VALUE_GET(DType, "a dtype") }
#undef FOUNDRY_VALUE_GET

Scalar Value::scalar() const {
  if (auto* p = std::get_if<Scalar>(&v_)) return *p;
  if (auto* p = std::get_if<int64_t>(&v_)) return Scalar(*p);
  if (auto* p = std::get_if<double>(&v_)) return Scalar(*p);
  if (auto* p = std::get_if<bool>(&v_)) return Scalar(*p);
  if (auto* p = std::get_if<Tensor>(&v_)) {
    if (p->defined() && p->numel() == 1) return p->item();
  }
  raise<TypeError>("expected a number but got {}", kind_name(v_));
}

int64_t Value::to_int() const {
  if (auto* p = std::get_if<int64_t>(&v_)) return *p;
  if (auto* p = std::get_if<bool>(&v_)) return *p;
  if (auto* p = std::get_if<Scalar>(&v_)) {
    if (!p->is_float()) return p->to_int();
  }
  raise<TypeError>("expected an int but got {}", kind_name(v_));
}

double Value::to_double() const {
  if (auto* p = std::get_if<double>(&v_)) return *p;
  if (auto* p = std::get_if<int64_t>(&v_)) return double(*p);
  if (auto* p = std::get_if<Scalar>(&v_)) return p->to_double();
  if (auto* p = std::get_if<bool>(&v_)) return *p;
  raise<TypeError>("expected a float but got {}", kind_name(v_));
}

bool Value::to_bool() const {
  if (auto* p = std::get_if<bool>(&v_)) return *p;
  if (auto* p = std::get_if<int64_t>(&v_)) return *p != 0;
  if (auto* p = std::get_if<Scalar>(&v_)) return p->to_bool();
  raise<TypeError>("expected a bool but got {}", kind_name(v_));
}

std::vector<int64_t> Value::int_list() const {
  if (auto* p = std::get_if<std::vector<int64_t>>(&v_)) return *p;
  if (auto* p = std::get_if<int64_t>(&v_)) return {*p};
  raise<TypeError>("expected a list of ints but got {}", kind_name(v_));
}

std::vector<double> Value::double_list() const {
  if (auto* p = std::get_if<std::vector<double>>(&v_)) return *p;
  if (auto* p = std::get_if<std::vector<int64_t>>(&v_)) return {p->begin(), p->end()};
  if (auto* p = std::get_if<double>(&v_)) return {*p};
  if (auto* p = std::get_if<int64_t>(&v_)) return {double(*p)};
  raise<TypeError>("expected a list of floats but got {}", kind_name(v_));
}

std::string Value::describe() const {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(const Tensor& t) const {
      if (!t.defined()) return "Tensor(undefined)";
      return fmt::format("Tensor{} {}", shape_str(t.sizes()), dtype_name(t.dtype()));
    }
    std::string operator()(const std::vector<Tensor>& ts) const {
      std::string s = "[";
      for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + (*this)(ts[i]);
      return s + "]";
    }
    std::string operator()(const Scalar& s) const { return s.str(); }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::vector<int64_t>& l) const { return shape_str(l); }
    std::string operator()(const std::vector<double>& l) const { return fmt::format("[{}]", fmt::join(l, ", ")); }
    std::string operator()(const std::string& s) const { return "'" + s + "'"; }
    std::string operator()(DType d) const { return std::string(dtype_name(d)); }
  };
  return std::visit(Visitor{}, v_);
}

}  // namespace foundry::ops

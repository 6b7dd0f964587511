// Value: one argument of an op as the registry sees it (what a schema type names), so that the
// same entry serves C++ calls, Python calls, the test samples and the parity fixtures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::ops {

class Value {
 public:
  using Variant = std::variant<std::monostate, Tensor, std::vector<Tensor>, Scalar, int64_t, double,
                               bool, std::vector<int64_t>, std::vector<double>, std::string, DType>;

  Value() = default;  // None
  Value(std::nullopt_t) {}  // NOLINT
  Value(Tensor t) : v_(std::move(t)) {}  // NOLINT
  Value(std::vector<Tensor> ts) : v_(std::move(ts)) {}  // NOLINT
  Value(Scalar s) : v_(s) {}  // NOLINT
  Value(int64_t i) : v_(i) {}  // NOLINT
  Value(int i) : v_(int64_t(i)) {}  // NOLINT
  Value(double d) : v_(d) {}  // NOLINT
  Value(bool b) : v_(b) {}  // NOLINT
  Value(IntList l) : v_(l.vec()) {}  // NOLINT
  Value(std::vector<int64_t> l) : v_(std::move(l)) {}  // NOLINT
  Value(std::vector<double> l) : v_(std::move(l)) {}  // NOLINT
  Value(std::string s) : v_(std::move(s)) {}  // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(DType d) : v_(d) {}  // NOLINT
  template <typename T>
  Value(const std::optional<T>& o) {  // NOLINT
    if (o) *this = Value(*o);
  }

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_tensor_list() const { return std::holds_alternative<std::vector<Tensor>>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_scalar() const { return std::holds_alternative<Scalar>(v_); }
  bool is_int_list() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_dtype() const { return std::holds_alternative<DType>(v_); }

  // Accessors throw TypeError naming the expected type.
  const Tensor& tensor() const;
  Tensor& tensor();
  const std::vector<Tensor>& tensor_list() const;
  std::vector<Tensor>& tensor_list();
  Scalar scalar() const;  // from Scalar, int, double or bool
  int64_t to_int() const;  // from int or bool
  double to_double() const;  // from double, int or Scalar
  bool to_bool() const;
  std::vector<int64_t> int_list() const;  // a single int becomes a one-element list
  std::vector<double> double_list() const;
  const std::string& str() const;
  DType dtype() const;

  /// Short description for error messages and docs: "Tensor[2, 3] float32", "3", "None".
  std::string describe() const;
  const Variant& variant() const { return v_; }

 private:
  Variant v_;
};

}  // namespace foundry::ops
